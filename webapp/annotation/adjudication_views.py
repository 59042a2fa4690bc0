"""The adjudication page: the items whose annotators disagree (lowest agreement first) with every answer side by
side, and the decisions taken; a researcher takes one annotator's answer or gives one, with a reason. Thin: the
rule is label_sources.py's, the write services/adjudication.py's."""

from __future__ import annotations

import re

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.accounts.roles import researcher_required
from webapp.annotation import selectors, services
from webapp.annotation.models import Project, Prompt
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Tiers

TAKEN_ANSWER = re.compile(r"ranking-(\d+)")


def _project(request: HttpRequest, project_id: int) -> Project:
    return get_object_or_404(selectors.projects_visible_to(request.user), pk=project_id)


@researcher_required
def adjudication(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    item = request.GET.get("item", "")
    focus = get_object_or_404(Prompt, pk=int(item), project=project) if item.isdigit() else None
    return render(request, "annotation/adjudication.html", {
        "project": project, "page": selectors.adjudication_page(project, focus=focus), "aspects": project.aspects,
        "gives_labels": annotation_mode(project.mode).gives_labels})


def order_tiers(text: str, response_ids: list[int]) -> Tiers:
    """"R2 > R1 = R3" -> tiers of response ids, R1 being the item's first response (the page's names)."""
    tiers = []
    for part in text.split(">"):
        tier = []
        for name in part.split("="):
            match = re.fullmatch(r"\s*[Rr](\d+)\s*", name)
            if match is None or not 1 <= int(match.group(1)) <= len(response_ids):
                raise ValidationError(f"order: {name.strip()[:20]!r} is not a response of this item "
                                      f"(R1 to R{len(response_ids)}), in an order such as “R2 > R1 = R3”")
            tier.append(response_ids[int(match.group(1)) - 1])
        tiers.append(tier)
    return tiers


def _decision_from_post(project: Project, prompt: Prompt, post: QueryDict) -> dict:
    """What the form gives the service: an answer taken, or the researcher's own tiers or labels."""
    choice = post.get("answer", "")
    if taken := TAKEN_ANSWER.fullmatch(choice):
        return {"answer_id": int(taken.group(1))}
    if choice != "own":
        raise ValidationError("answer: take one annotator's answer or give your own")
    mode = annotation_mode(project.mode)
    if mode.gives_labels:
        return {"labels": mode.labels_from_post(post)}
    return {"tiers": order_tiers(post.get("order", ""), list(prompt.responses.order_by("id").values_list("pk",
                                                                                                     flat=True)))}


@require_POST
@researcher_required
def adjudication_decide(request: HttpRequest, project_id: int, prompt_id: int) -> HttpResponse:
    project = _project(request, project_id)
    prompt = get_object_or_404(Prompt, pk=prompt_id, project=project)
    try:
        services.adjudication_decide(prompt=prompt, decided_by=request.user, reason=request.POST.get("reason", ""),
                                     **_decision_from_post(project, prompt, request.POST))
    except ValidationError as error:
        messages.error(request, f"Item {prompt.external_id}: {' '.join(error.messages)}")
    else:
        messages.success(request, f"Item {prompt.external_id} decided.")
    target = reverse("annotation:adjudication", kwargs={"project_id": project.pk})
    return redirect(f"{target}?item={prompt.pk}" if request.POST.get("focus") else target)
