"""API endpoints: annotating through the API — a project's items with the responses the token's user is shown,
and a ranking of an item submitted as that user (in the thumbs and ratings modes its labels), so labels made in
another tool can be brought in.

A ranking goes through the page's own services (webapp.annotation.services.api_ranking_submit: a lease, then
ranking_submit; a changed answer reopened first as the page's Back does), so its pairs are exactly those of the
same ranking made in the browser. Annotators may call these two endpoints (on the projects they are members of),
as well as researchers.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from webapp.accounts.roles import is_annotator, is_researcher
from webapp.annotation import selectors, services
from webapp.annotation.models import Project, Prompt, Ranking
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels
from webapp.annotation.services.projects import ASPECT_NAME_MAX_CHARS
from webapp.api.auth import TokenAuth
from webapp.api.projects import project_or_404
from webapp.api.schemas import BodyIn, Detail, Page, PageQuery, WholeNumber, page_of
from webapp.text_bounds import RATIONALE_MAX_CHARS

router = Router(tags=["annotation"])
ANNOTATORS_TOO = TokenAuth(researchers_only=False)


class ShownResponse(Schema):
    id: int
    text: str


class LabelOut(Schema):
    response: int
    aspect: str = Field(description="The rated aspect; \"\" for a thumb.")
    value: float = Field(description="A thumb: 1 up, 0 down; a rating: on the project's scale.")


class AnswerOut(Schema):
    id: int
    tiers: list[list[int]] = Field(description="Response ids, best tier first; a tier of several is a tie. Empty in "
                                               "the thumbs and ratings modes, whose answer is its labels.")
    labels: list[LabelOut] = Field(description="The thumbs and ratings modes' answer: a label per response (and "
                                               "aspect); empty in the other modes.")
    all_bad: bool
    skipped: bool
    rationale: str


class ItemOut(Schema):
    id: int
    external_id: str
    prompt: str
    messages: list[dict[str, Any]] | None
    responses: list[ShownResponse] = Field(description="The responses the token's user is shown, in the page's "
                                           "order for them: a ranking names each of them once.")
    answer: AnswerOut | None = Field(description="The token's user's answer to the item, if any.")


class LabelIn(BodyIn):
    response: WholeNumber
    aspect: str = Field("", max_length=ASPECT_NAME_MAX_CHARS, description="The aspect rated (ratings mode: each of "
                        "the project's aspects); left out for a thumb.")
    value: float = Field(description="A thumb: 1 up, 0 down; a rating: a whole number on the project's scale.")


class RankingIn(BodyIn):
    ranking: list[WholeNumber | list[WholeNumber]] = Field(
        default_factory=list, max_length=1000,
        description="Response ids, best first; a list of ids in it is a tie, e.g. [12, [14, 13], 15]. "
                    "Every response shown for the item, once. Left empty with all_bad, and in the thumbs and "
                    "ratings modes.")
    labels: list[LabelIn] | None = Field(
        None, max_length=1000,
        description="The thumbs and ratings modes' answer instead of a ranking: thumbs, one {response, value} per "
                    "response shown (1 up, 0 down); ratings, one {response, aspect, value} per response shown and "
                    "aspect of the project.")
    all_bad: bool = Field(False, description="None of the responses is acceptable: no pair is made.")
    rationale: str = Field("", max_length=RATIONALE_MAX_CHARS)
    suggestion: WholeNumber | None = Field(
        None, description="The id of the item's machine suggestion this answer accepts: recorded as the answer's "
                          "origin when the answer is that suggestion unchanged (the project must show suggestions "
                          "while annotating).")


class RankingOut(AnswerOut):
    item: int
    changed: bool = Field(description="False when the same answer was stored already: nothing was written.")


def _annotator_check(request: HttpRequest) -> None:
    if not (is_annotator(request.auth) or is_researcher(request.auth)):
        raise HttpError(403, "annotators and researchers only")


def _answer_out(ranking: Ranking) -> dict[str, Any]:
    return {"id": ranking.pk, "tiers": ranking.tiers, "all_bad": ranking.all_bad, "skipped": ranking.skipped,
            "rationale": ranking.rationale,
            "labels": [{"response": label.response_id, "aspect": label.aspect, "value": label.value}
                       for label in ranking.labels.all()]}


def _item_out(prompt: Prompt, *, project: Project, request: HttpRequest) -> dict[str, Any]:
    shown = selectors.item_responses_shown(prompt, project=project, annotator=request.auth)
    answer = prompt.own_answers[0] if prompt.own_answers else None
    return {"id": prompt.pk, "external_id": prompt.external_id, "prompt": prompt.text, "messages": prompt.messages,
            "responses": [{"id": response.pk, "text": response.text} for response in shown],
            "answer": _answer_out(answer) if answer is not None else None}


@router.get("/projects/{project_id}/items", response={200: Page[ItemOut], 403: Detail, 404: Detail},
            auth=ANNOTATORS_TOO, summary="A project's items with the responses you are shown and your answers")
def item_list(request: HttpRequest, project_id: int, paging: Query[PageQuery]) -> dict[str, Any]:
    _annotator_check(request)
    project = project_or_404(request, project_id)
    items = selectors.items_for_annotator(project=project, annotator=request.auth)
    return page_of(items, paging=paging, item=lambda prompt: _item_out(prompt, project=project, request=request))


def _tiers(body: RankingIn) -> list[list[int]]:
    return [sorted(entry) if isinstance(entry, list) else [entry] for entry in body.ranking]


def _labels(body: RankingIn, *, prompt: Prompt, request: HttpRequest) -> Labels | None:
    """The body's answer in the project's mode: its labels in a labels mode, checked as the page's are (a 422 naming
    the response and aspect at fault), None in a tiers mode; a 422 when the body gives the other kind of answer."""
    mode = annotation_mode(prompt.project.mode)
    if not mode.gives_labels:
        if body.labels:
            raise HttpError(422, f"labels: this project's mode is {mode.name}; send a ranking, not labels")
        return None
    if body.labels is None or body.ranking or body.all_bad:
        example = "{response, value} per response (1 up, 0 down)" if mode.name == "thumbs" else \
            "{response, aspect, value} per response and aspect"
        raise HttpError(422, f"labels: this project's mode is {mode.name}; send labels ({example}), not a ranking")
    labels: Labels = {}
    for label in body.labels:
        if label.aspect in labels.get(label.response, {}):
            raise HttpError(422, f"labels: response {label.response}, aspect {label.aspect!r} is given twice")
        labels.setdefault(label.response, {})[label.aspect] = label.value
    shown = [response.pk for response in selectors.responses_shown(prompt=prompt, annotator=request.auth)]
    try:
        return mode.labels_check(labels, prompt.project, shown)
    except ValidationError as error:
        raise HttpError(422, f"labels: {'; '.join(error.messages)} (the item's responses, A first: "
                             f"{', '.join(map(str, shown))})") from None


def _ranking_check(tiers: list[list[int]], *, prompt: Prompt, request: HttpRequest, all_bad: bool) -> None:
    """The ranking names each response the user is shown once: else a 422 naming the ids at fault."""
    if all_bad and not tiers:
        return
    shown = [response.pk for response in selectors.responses_shown(prompt=prompt, annotator=request.auth)]
    given = [response for tier in tiers for response in tier]
    shown_text = ", ".join(str(response) for response in shown)
    if unknown := [response for response in given if response not in shown]:
        raise HttpError(422, f"ranking: {', '.join(map(str, unknown))} is not a response of item {prompt.pk} "
                             f"shown to you (those are {shown_text})")
    if repeated := sorted({response for response in given if given.count(response) > 1}):
        raise HttpError(422, f"ranking: {', '.join(map(str, repeated))} appears twice")
    if missing := [response for response in shown if response not in given]:
        raise HttpError(422, f"ranking: rank every response of item {prompt.pk}; {', '.join(map(str, missing))} "
                             f"is missing (the item's responses are {shown_text})")


@router.post("/items/{item_id}/ranking",
             response={200: RankingOut, 403: Detail, 404: Detail, 409: Detail, 422: Detail},
             auth=ANNOTATORS_TOO, summary="Submit your ranking of an item (or its labels, in the thumbs and ratings modes)",
             openapi_extra={"responses": {422: {"description": "Besides the schema: the ranking must name every "
                                                "response of the item shown to you, once; in the thumbs and ratings "
                                                "modes, labels instead, every response (and aspect) labelled."}}})
def ranking_submit(request: HttpRequest, item_id: int, body: RankingIn) -> dict[str, Any]:
    """As the annotation page's submit: the same answer again writes nothing (`changed: false`); a different one
    replaces yours, as the page's Back then submit do, within the project's lease time from your answer (else a
    409). An item that has all the rankings it needs from others, or too few responses, is a 409 too."""
    _annotator_check(request)
    visible = selectors.projects_visible_to(request.auth)
    prompt = Prompt.objects.filter(pk=item_id, project__in=visible).select_related("project").first()
    if prompt is None:
        raise HttpError(404, f"there is no item {item_id}")
    labels = _labels(body, prompt=prompt, request=request)
    tiers = [] if labels is not None else _tiers(body)
    if labels is None:
        _ranking_check(tiers, prompt=prompt, request=request, all_bad=body.all_bad)
    try:
        result = services.api_ranking_submit(prompt_id=prompt.pk, annotator=request.auth, tiers=tiers,
                                             all_bad=body.all_bad, labels=labels, rationale=body.rationale,
                                             suggestion_id=body.suggestion)
    except ValidationError as error:
        raise HttpError(409, "; ".join(error.messages)) from None
    return {**_answer_out(result.ranking), "item": prompt.pk, "changed": result.changed}
