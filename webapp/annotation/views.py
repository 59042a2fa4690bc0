"""Annotation pages. Thin: parse, authorise, call a service or a selector, render (a fragment for htmx)."""

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    QueryDict,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import escape
from django.utils.text import slugify
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from webapp.accounts.roles import annotator_required, researcher_required
from webapp.annotation import exporting, gold, selectors, services, suggestions
from webapp.annotation.feedback import DEFAULT_BINARIZATION, DEFAULT_SEED
from webapp.annotation.forms import NO_COMPARISON, ExportForm, ImportForm, ProjectForm, SamplingForm
from webapp.annotation.importing import ImportFileError, format_from_name
from webapp.annotation.models import (
    Assignment,
    ImportJob,
    Project,
    Prompt,
    Ranking,
    Round,
    SamplingJob,
    SuggestionJob,
)
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Entered
from webapp.annotation.rendering import render_markdown
from webapp.annotation.services import scoring as scoring_services
from webapp.annotation.services import suggesting as suggesting_services
from webapp.queueing import QueueUnavailable
from webapp.text import counted, is_blank, whole_number

# Annotators -------------------------------------------------------------------------------------------------


@annotator_required
def annotate_home(request: HttpRequest) -> HttpResponse:
    return render(request, "annotation/annotate_home.html", {"rows": selectors.own_progress(user=request.user)})


def _project(request: HttpRequest, project_id: int) -> Project:
    """The project if the user reaches it (selectors.projects_visible_to: its annotators and researchers, admins);
    404 otherwise, as for a project that does not exist, so its existence is not revealed."""
    return get_object_or_404(selectors.projects_visible_to(request.user), pk=project_id)


def _job_of_a_visible_project(request: HttpRequest, model: type[ImportJob | SamplingJob | SuggestionJob], job_id: int):
    return get_object_or_404(model.objects.filter(project__in=selectors.projects_visible_to(request.user)),
                             pk=job_id)


@dataclass(frozen=True)
class _ShownAnswer:
    """An answer put back into an item's controls: the one kept on an item reopened by Back, or one the server
    refused."""

    assignment_id: int
    entered: Entered = field(default_factory=Entered)
    rationale: str = ""
    reopened: bool = False
    skipped: bool = False


def _answer_from_post(project: Project, assignment_id: int, post: QueryDict) -> _ShownAnswer:
    return _ShownAnswer(assignment_id=assignment_id, entered=annotation_mode(project.mode).entered_from_post(post),
                        rationale=post.get("rationale", ""))


def _answer_from_ranking(project: Project, ranking: Ranking, shown: list[int]) -> _ShownAnswer:
    """`shown`: the response ids in the order this annotator sees them (A first)."""
    if ranking.skipped:
        return _ShownAnswer(assignment_id=ranking.assignment_id, reopened=True, skipped=True)
    mode = annotation_mode(project.mode)
    if mode.gives_labels:
        entered = mode.entered_from_labels(selectors.answer_labels(ranking_id=ranking.pk), shown)
    else:
        entered = mode.entered_from_ranking(ranking, shown)
    return _ShownAnswer(assignment_id=ranking.assignment_id, entered=entered, rationale=ranking.rationale,
                        reopened=True)


def _item_context(
    request: HttpRequest, project: Project, *, assignment: Assignment | None = None, error: str = "",
    answer: _ShownAnswer | None = None, guidelines_first: bool = False,
) -> dict:
    if guidelines_first:
        # the guidelines before the first item: no item is leased until the annotator starts
        return {"project": project, "mode": annotation_mode(project.mode), "guidelines_first": True,
                "guidelines_html": render_markdown(project.guidelines), "ranked": 0}
    if assignment is None:
        assignment = services.assignment_lease_next(project=project, annotator=request.user)
    if answer is None or assignment is None or answer.assignment_id != assignment.pk:
        answer = _ShownAnswer(assignment_id=0)
    context: dict = {"project": project, "mode": annotation_mode(project.mode), "assignment": assignment,
                     "error": error, "rationale_max_chars": services.RATIONALE_MAX_CHARS}
    if assignment is not None:
        responses = selectors.responses_shown(prompt=assignment.prompt, annotator=request.user)
        kept = selectors.reopened_answer(assignment=assignment)
        if kept is not None and not answer.assignment_id:
            # an item reopened by Back, on this page or before a reload: its kept answer, as it was given
            answer = _answer_from_ranking(project, kept, [response.pk for response in responses])
        answer = replace(answer, reopened=kept is not None, skipped=kept is not None and kept.skipped)
        context["responses"] = [
            {"id": response.pk, "letter": chr(ord("A") + index), "html": render_markdown(response.text),
             "long": len(response.text) > 1500, "empty": is_blank(response.text),
             "entered": answer.entered.per_response.get(response.pk, "")}
            for index, response in enumerate(responses)
        ]
        context["prompt_html"] = render_markdown(assignment.prompt.text)
        context["prompt_turns"] = _turns(assignment.prompt)
        if project.suggestions_display == Project.SuggestionDisplay.SHOWN:
            _add_suggestion(context, project, assignment.prompt_id, [response.pk for response in responses])
    if project.suggestions_display == Project.SuggestionDisplay.AFTER_ANSWER:
        context["last_beside_suggestion"] = suggestions.last_answer_beside_suggestion(project=project,
                                                                                      user=request.user)
    context["answer"] = answer
    context["pause"] = pause = selectors.annotator_latest_pause(project=project, annotator=request.user)
    context["ranked"] = selectors.own_ranked_count(project=project, user=request.user)
    # a paused annotator's answers cannot change until a researcher decides: no Back to offer
    paused = pause is not None and pause.decision != pause.Decision.RELEASED
    context["previous_answer"] = None if paused else selectors.previous_answer(project=project, user=request.user)
    return context


def _add_suggestion(context: dict, project: Project, prompt_id: int, shown: list[int]) -> None:
    """The item's machine suggestion, marked as a machine's: a banner (agent, confidence, what it suggests, the
    key that accepts it) and a mark on each response; the controls stay empty until it is accepted."""
    suggestion = suggestions.item_suggestion(project=project, prompt_id=prompt_id, shown=shown)
    if suggestion is None:
        return
    context["suggestion"] = {
        "id": suggestion.newest_id, "agent": suggestion.agent or "an unnamed source",
        "confidence": suggestion.confidence, "complete": suggestion.complete,
        "text": suggestions.suggestion_text(project, suggestion, shown),
        "fill": suggestions.suggestion_fill_json(project, suggestion, shown),
    }
    marks = suggestions.response_marks(project, suggestion)
    for response in context["responses"]:
        response["suggested"] = marks.get(response["id"], "")


def _turns(prompt: Prompt) -> list[dict]:
    """A conversation's turns, each with its role, for the page; none for a text prompt."""
    return [{"role": message["role"], "html": render_markdown(message["content"])} for message in prompt.messages or ()]


def _render_item(
    request: HttpRequest, project: Project, *, assignment: Assignment | None = None, error: str = "",
    answer: _ShownAnswer | None = None, gold_note: str | None = None, guidelines_first: bool = False,
) -> HttpResponse:
    context = _item_context(request, project, assignment=assignment, error=error, answer=answer,
                            guidelines_first=guidelines_first)
    context["gold_note"] = gold_note
    if request.htmx:
        return render(request, "annotation/annotate.html#item", context)
    context["guidelines_html"] = render_markdown(project.guidelines)
    return render(request, "annotation/annotate.html", context)


def _refused(request: HttpRequest, project: Project, message: str, answer: _ShownAnswer | None = None) -> HttpResponse:
    """A refusal that leaves what the annotator entered in place: htmx puts the message into the item's error box
    and swaps nothing else; without htmx the item is shown again with the posted answer filled in."""
    if request.htmx:
        response = HttpResponse(escape(message))
        return reswap(retarget(response, "#item-error"), "innerHTML")
    return _render_item(request, project, error=message, answer=answer)


@annotator_required
def annotate(request: HttpRequest, project_id: int) -> HttpResponse:
    """The annotator's current item; before their first answer in the project, its guidelines (if it has any)
    with a Start button (`?start=1` then shows the item)."""
    project = _project(request, project_id)
    guidelines_first = request.GET.get("start") != "1" and selectors.guidelines_first(project=project,
                                                                                      user=request.user)
    return _render_item(request, project, guidelines_first=guidelines_first)


def _seconds(post: QueryDict) -> float:
    try:
        return float(post.get("seconds", "0"))
    except ValueError:
        return 0.0


def _accepted_suggestion_id(post: QueryDict) -> int | None:
    """The suggestion the annotator accepted with its key (the page posts its id), None when they answered."""
    value = post.get("suggestion", "")
    if not value:
        return None
    number = whole_number(value)
    if number is None:
        raise ValidationError(f"suggestion: a suggestion number is expected, not {value[:40]!r}")
    return number


def _answer_item(request: HttpRequest, assignment_id: int, write: Callable[[Project], object]) -> HttpResponse:
    """Record an answer on an item, then show the next item (or keep this one, as entered, with the refusal)."""
    assignment = get_object_or_404(Assignment.objects.select_related("prompt__project"), pk=assignment_id)
    project = _project(request, assignment.prompt.project_id)
    try:
        answer = write(project)
    except ValidationError as error:
        return _refused(request, project, " ".join(error.messages),
                        _answer_from_post(project, assignment_id, request.POST))
    gold_note = selectors.gold_feedback(answer) if isinstance(answer, Ranking) else None
    if not request.htmx:
        if gold_note:
            messages.info(request, gold_note)
        return redirect("annotation:annotate", project_id=project.pk)
    return _render_item(request, project, gold_note=gold_note)


@require_POST
@annotator_required
def annotate_submit(request: HttpRequest, assignment_id: int) -> HttpResponse:
    def submit(project: Project) -> object:
        mode = annotation_mode(project.mode)
        if mode.gives_labels:
            answer: dict = {"labels": mode.labels_from_post(request.POST)}
        else:
            tiers, all_bad = mode.tiers_from_post(request.POST)
            answer = {"tiers": tiers, "all_bad": all_bad}
        return services.ranking_submit(
            assignment_id=assignment_id, annotator=request.user, **answer,
            rationale=request.POST.get("rationale", ""), seconds_spent=_seconds(request.POST),
            suggestion_id=_accepted_suggestion_id(request.POST),
        )

    return _answer_item(request, assignment_id, submit)


@require_POST
@annotator_required
def annotate_skip(request: HttpRequest, assignment_id: int) -> HttpResponse:
    return _answer_item(
        request, assignment_id, lambda _: services.ranking_skip(assignment_id=assignment_id, annotator=request.user)
    )


@require_POST
@annotator_required
def annotate_back(request: HttpRequest, project_id: int) -> HttpResponse:
    """Reopen the annotator's latest answer and show its item again with that answer filled in; the answer stays
    stored until a new one (or a skip) replaces it.

    The page names the answer it offers to go back to: a second press sent before the first one's page arrived
    names an answer already reopened, and is refused instead of reopening the one before it too.
    """
    project = _project(request, project_id)
    previous = selectors.previous_answer(project=project, user=request.user)
    if previous is None:
        return _refused(request, project, f"Nothing to go back to: no answer of yours in this project within the "
                                          f"last {counted(project.lease_minutes, 'minute')} (the lease time).")
    if request.POST.get("answer", str(previous.pk)) != str(previous.pk):
        return _refused(request, project, "That answer is already reopened; this page was behind. Nothing else "
                                          "was changed.")
    try:
        reopened = services.ranking_withdraw(ranking_id=previous.pk, annotator=request.user)
    except ValidationError as error:
        return _refused(request, project, " ".join(error.messages))
    assignment = Assignment.objects.select_related("prompt").get(pk=reopened.assignment_id)
    return _render_item(request, project, assignment=assignment)


# Researchers ------------------------------------------------------------------------------------------------


@researcher_required
def project_list(request: HttpRequest) -> HttpResponse:
    archived = request.GET.get("archived") == "only"
    return render(request, "annotation/project_list.html",
                  {"projects": selectors.project_list(request.user, archived=archived), "archived": archived})


@researcher_required
def project_create(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        project = services.project_create(owner=request.user, members=data.pop("members"), **data)
        messages.success(request, f"Project “{project.name}” created. Import prompts next.")
        return redirect("annotation:project_detail", project_id=project.pk)
    return render(request, "annotation/project_form.html", {"form": form})


@researcher_required
def project_edit(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    form = ProjectForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        services.project_update(project=project, members=data.pop("members"), **data)
        return redirect("annotation:project_detail", project_id=project.pk)
    return render(request, "annotation/project_form.html", {"form": form, "project": project})


def _detail_context(request: HttpRequest, project: Project) -> dict:
    # The jobs are read before the counts: a job that ends in between is then shown active, and its line's poll
    # refreshes the cards when it sees the end; read after, it would show ended beside counts from before its end.
    jobs, import_jobs = list(selectors.sampling_jobs(project)), list(selectors.import_jobs(project))
    # every item's standing, read once for the cards that need it (the Data card's training rows, Adjudication)
    standings = selectors.item_standings(project_id=project.pk)
    return {
        "project": project,
        "guidelines_html": render_markdown(project.guidelines),
        "progress": selectors.project_progress(project),
        "pauses": selectors.project_pauses(project),
        "gold_count": selectors.gold_count(project),
        "data": selectors.project_data(project, sources=selectors.label_sources_of(standings)),
        "reordering": suggestions.uncertainty_reordering(project),
        "jobs": jobs,
        "rounds": selectors.round_rows(project),
        "reward_runs": selectors.reward_model_runs(request.user),
        "suggestion_sources": selectors.suggestion_agreements(project),
        "suggestion_jobs": selectors.suggestion_jobs(project),
        "import_jobs": import_jobs,
        "adjudication_count": len(selectors.adjudication_queue(project, standings=standings)),
        "import_form": ImportForm(),
        "sampling_form": SamplingForm(initial={"responses_per_prompt": project.responses_per_item}, user=request.user,
                                      rounds=list(selectors.project_rounds(project))),
        "export_form": ExportForm(annotators=selectors.pair_annotators(project_id=project.pk), auto_id="export_%s",
                                  ratings=project.mode == Project.Mode.RATINGS),
    }


@researcher_required
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    return render(request, "annotation/project_detail.html", _detail_context(request, project))


@researcher_required
def project_progress(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    return render(request, "annotation/_project_progress.html",
                  {"project": project, "progress": selectors.project_progress(project),
                   "pauses": selectors.project_pauses(project)})


@researcher_required
def project_data(request: HttpRequest, project_id: int) -> HttpResponse:
    """The Data card alone: fetched again by the project page when one of its jobs ends."""
    project = _project(request, project_id)
    return render(request, "annotation/_project_data.html", {"project": project, "data": selectors.project_data(project)})


# htmx fires this event from a job's line when the job's answer says it ended; the cards whose counts a job
# changes (Data, Progress) fetch themselves again on it, so they never wait for a reload
JOB_FINISHED_EVENT = "job-finished"


def _job_line(request: HttpRequest, partial: str, job: ImportJob | SamplingJob, **context: object) -> HttpResponse:
    response = render(request, f"annotation/project_detail.html#{partial}", {"job": job, **context})
    if not job.is_active:
        response["HX-Trigger"] = JOB_FINISHED_EVENT
    return response


@researcher_required
def project_rounds(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    return render(request, "annotation/_rounds.html", _rounds_context(request, project))


@researcher_required
def project_suggestion_agreement(request: HttpRequest, project_id: int) -> HttpResponse:
    """The card of the project's suggestion sources measured against the annotators."""
    project = _project(request, project_id)
    return render(request, "annotation/_suggestion_agreement.html",
                  {"project": project, "suggestion_sources": selectors.suggestion_agreements(project)})


def _rounds_context(request: HttpRequest, project: Project, **extra) -> dict:
    return {"project": project, "rounds": selectors.round_rows(project),
            "reward_runs": selectors.reward_model_runs(request.user),
            "suggestion_jobs": selectors.suggestion_jobs(project), **extra}


def _refusal_text(refusal: ValidationError) -> str:
    """A refusal as one line, each field named."""
    if hasattr(refusal, "error_dict"):
        return " ".join(f"{field}: {' '.join(texts)}" for field, texts in refusal.message_dict.items())
    return " ".join(refusal.messages)


@require_POST
@researcher_required
def round_score(request: HttpRequest, project_id: int) -> HttpResponse:
    """Score a round's responses with a chosen reward-model run; the Rounds card comes back, showing the
    scoring's progress, or with the reason it was refused."""
    project = _project(request, project_id)
    number, run_id = request.POST.get("round", ""), request.POST.get("reward_run", "")
    round_ = get_object_or_404(Round, project=project, number=int(number)) if number.isdigit() else None
    run = selectors.visible_run(request.user, int(run_id)) if run_id.isdigit() else None
    status, error = HTTPStatus.OK, ""
    try:
        if round_ is None:
            raise ValidationError({"round": "choose a round to score"})
        scoring_services.round_scoring_create(round_=round_, run=run, created_by=request.user)
    except ValidationError as refusal:
        status, error = HTTPStatus.UNPROCESSABLE_ENTITY, " ".join(
            f"{field}: {' '.join(texts)}" for field, texts in refusal.message_dict.items()
        ) if hasattr(refusal, "error_dict") else " ".join(refusal.messages)
    context = _rounds_context(request, project, scoring_error=error)
    return render(request, "annotation/_rounds.html", context, status=status)


@require_POST
@researcher_required
def suggestion_job_start(request: HttpRequest, project_id: int) -> HttpResponse:
    """Start a suggestion job for a round (or, with no round chosen, the whole project) by a reward-model run or a
    judge model; the Rounds card comes back, showing the job's progress, or with the reason it was refused."""
    project = _project(request, project_id)
    number, run_id = request.POST.get("round", "").strip(), request.POST.get("reward_run", "").strip()
    source = request.POST.get("source", "").strip()
    status, error = HTTPStatus.OK, ""
    try:
        round_ = get_object_or_404(Round, project=project, number=int(number)) if number.isdigit() else None
        if number and round_ is None:
            raise ValidationError({"round": f"{number!r} is not a round number"})
        run = selectors.visible_run(request.user, int(run_id)) if run_id.isdigit() else None
        suggesting_services.suggestion_job_create(
            project=project, round_=round_, source=source, created_by=request.user,
            reward_run=run if source == SuggestionJob.Source.REWARD_MODEL else None,
            judge_model=request.POST.get("judge_model", ""))
    except ValidationError as refusal:
        status, error = HTTPStatus.UNPROCESSABLE_ENTITY, _refusal_text(refusal)
    return render(request, "annotation/_rounds.html", _rounds_context(request, project, suggestion_error=error),
                  status=status)


@require_POST
@researcher_required
def suggestion_job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_of_a_visible_project(request, SuggestionJob, job_id)
    suggesting_services.suggestion_job_cancel(job_id=job.pk)
    return _suggestion_job_answer(request, job)


@require_POST
@researcher_required
def suggestion_job_resume(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_of_a_visible_project(request, SuggestionJob, job_id)
    try:
        suggesting_services.suggestion_job_resume(job_id=job.pk)
    except ValidationError as refusal:
        return _suggestion_job_answer(request, job, refusal=_refusal_text(refusal))
    return _suggestion_job_answer(request, job)


def _suggestion_job_answer(request: HttpRequest, job: SuggestionJob, *, refusal: str = "") -> HttpResponse:
    """htmx swaps the Rounds card (with the refusal said on it); a plain form post returns to the project."""
    if request.htmx:
        context = _rounds_context(request, job.project, suggestion_error=refusal)
        return render(request, "annotation/_rounds.html", context,
                      status=HTTPStatus.UNPROCESSABLE_ENTITY if refusal else HTTPStatus.OK)
    if refusal:
        messages.error(request, refusal)
    return redirect("annotation:project_detail", project_id=job.project_id)


ITEMS_PER_PAGE = 25


@researcher_required
def project_items(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    status = request.GET.get("status", "all")
    if status not in selectors.ITEM_STATUSES:
        status = "all"
    search, annotator = request.GET.get("q", "").strip(), request.GET.get("annotator", "").strip()
    items = selectors.project_items(project=project, status=status, search=search, annotator=annotator)
    page = Paginator(items, ITEMS_PER_PAGE).get_page(request.GET.get("page"))
    filters = {key: value for key, value in (("q", search), ("annotator", annotator)) if value}
    context = {
        "project": project, "page": page, "rows": selectors.item_rows(project=project, prompts=page.object_list),
        "status": status, "status_label": selectors.ITEM_STATUSES[status], "search": search,
        "annotator": annotator, "statuses": selectors.ITEM_STATUSES, "items_total": selectors.item_count(project),
        "annotators": selectors.annotator_rows(project),
        "filter_query": urlencode(filters), "page_query": urlencode({**filters, "status": status}),
    }
    return render(request, "annotation/project_items.html", context)


def _project_item(request: HttpRequest, project_id: int, prompt_id: int) -> tuple[Project, Prompt]:
    project = _project(request, project_id)
    return project, get_object_or_404(Prompt, pk=prompt_id, project=project)


@researcher_required
def project_item(request: HttpRequest, project_id: int, prompt_id: int) -> HttpResponse:
    project, prompt = _project_item(request, project_id, prompt_id)
    return _item_page(request, project, prompt)


def _item_page(request: HttpRequest, project: Project, prompt: Prompt, *, gold_error: str = "",
               status: int = HTTPStatus.OK) -> HttpResponse:
    gold_form = selectors.item_gold(prompt)
    if gold_error:  # what the researcher entered stays in the form beside the refusal
        gold_form = replace(gold_form, order=request.POST.get("order", ""), choice=request.POST.get("choice", ""))
    return render(request, "annotation/project_item.html",
                  {"project": project, "item": selectors.item_detail(prompt=prompt), "gold": gold_form,
                   "gold_error": gold_error, "explanation": request.POST.get("explanation") if gold_error else None},
                  status=status)


def _gold_from_post(project: Project, prompt: Prompt, post: QueryDict) -> dict:
    """The gold answer the item page's form sends, in the mode's own terms: an order ("B > A = C"), A/B/tie, or the
    annotate page's thumb and rating fields."""
    mode = annotation_mode(project.mode)
    if mode.gives_labels:
        return {"labels": mode.labels_from_post(post)}
    responses = selectors.gold_responses(prompt)
    if project.mode == Project.Mode.PAIRWISE:
        return {"tiers": gold.tiers_from_choice(post.get("choice", ""), responses)}
    return {"tiers": gold.tiers_from_order(post.get("order", ""), responses)}


@require_POST
@researcher_required
def project_item_gold(request: HttpRequest, project_id: int, prompt_id: int) -> HttpResponse:
    """Mark the item gold with the answer the form gives (or change it), or with an annotator's answer (`ranking`)."""
    project, prompt = _project_item(request, project_id, prompt_id)
    try:
        if ranking_id := request.POST.get("ranking"):
            ranking = get_object_or_404(Ranking, pk=whole_number(ranking_id) or 0, prompt=prompt)
            services.gold_answer_from_ranking(ranking=ranking, user=request.user)
        else:
            services.gold_answer_set(prompt=prompt, user=request.user, explanation=request.POST.get("explanation", ""),
                                     **_gold_from_post(project, prompt, request.POST))
    except ValidationError as error:
        return _item_page(request, project, prompt, gold_error=" ".join(error.messages),
                          status=HTTPStatus.BAD_REQUEST)
    messages.success(request, "Marked gold: annotators' answers to this item are checked against this answer.")
    return redirect("annotation:project_item", project_id=project.pk, prompt_id=prompt.pk)


@require_POST
@researcher_required
def project_item_gold_remove(request: HttpRequest, project_id: int, prompt_id: int) -> HttpResponse:
    project, prompt = _project_item(request, project_id, prompt_id)
    services.gold_answer_remove(prompt=prompt)
    messages.success(request, "No longer gold: the item is back in the normal queue.")
    return redirect("annotation:project_item", project_id=project.pk, prompt_id=prompt.pk)


@require_POST
@researcher_required
def annotator_pause_decide(request: HttpRequest, project_id: int, pause_id: int) -> HttpResponse:
    """Release a paused annotator (their answers count again) or drop their answers from training."""
    project = _project(request, project_id)
    try:
        pause = services.annotator_pause_decide(pause_id=pause_id, project=project, user=request.user,
                                                decision=request.POST.get("decision", ""))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"{pause.annotator.get_username()}: {pause.get_decision_display().lower()}.")
    return redirect(f"{reverse('annotation:project_detail', args=[project.pk])}#quality")


@require_POST
@researcher_required
def project_import(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Import: choose a file.")
        return redirect("annotation:project_detail", project_id=project.pk)
    upload = form.cleaned_data["file"]
    try:
        chosen = form.cleaned_data["file_format"]
        file_format = format_from_name(upload.name) if chosen == "auto" else chosen
    except ImportFileError as error:
        messages.error(request, f"Nothing was imported from {upload.name}: {error}")
        return redirect("annotation:project_detail", project_id=project.pk)
    # read and written by a job (workers/importing.py); the project page follows it
    try:
        services.import_job_create(project=project, upload=upload, file_format=file_format, created_by=request.user)
    except QueueUnavailable as error:
        messages.error(request, f"Nothing was imported from {upload.name}: {' '.join(error.messages)}")
    return redirect("annotation:project_detail", project_id=project.pk)


@researcher_required
def import_job_status(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_of_a_visible_project(request, ImportJob, job_id)
    return _job_line(request, "import_job", job)


@require_POST
@researcher_required
def sampling_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    form = SamplingForm(request.POST, user=request.user, rounds=list(selectors.project_rounds(project)))
    status = 200
    if form.is_valid():
        options = dict(form.cleaned_data)
        try:
            services.sampling_job_create(project=project, model_path=options.pop("model_path"),
                                         generation_settings=options, created_by=request.user,
                                         compare_with=_compared_round(project, options.pop("compare_with")))
        except QueueUnavailable as error:
            form.add_error(None, error.messages)
        except ValidationError as error:
            form.add_error(None if hasattr(error, "error_dict") else "model_path", error)
            status = HTTPStatus.UNPROCESSABLE_ENTITY
    else:
        status = HTTPStatus.UNPROCESSABLE_ENTITY
    context = {**_detail_context(request, project), "sampling_form": form}
    if request.htmx:
        return render(request, "annotation/project_detail.html#sampling", context, status=status)
    return render(request, "annotation/project_detail.html", context, status=status)


def _compared_round(project: Project, choice: str) -> Round | None | str:
    if not choice:
        return services.PREVIOUS
    if choice == NO_COMPARISON:
        return None
    return selectors.project_rounds(project).get(number=int(choice))


@researcher_required
def sampling_job_status(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_of_a_visible_project(request, SamplingJob, job_id)
    return _job_line(request, "job", job)


@require_POST
@researcher_required
def sampling_job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_of_a_visible_project(request, SamplingJob, job_id)
    services.sampling_job_cancel(job_id=job.pk)
    return _sampling_job_answer(request, job)


@require_POST
@researcher_required
def sampling_job_resume(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_of_a_visible_project(request, SamplingJob, job_id)
    try:
        services.sampling_job_resume(job_id=job.pk)
    except ValidationError as error:
        return _sampling_job_answer(request, job, refusal=" ".join(error.messages))
    return _sampling_job_answer(request, job)


def _sampling_job_answer(request: HttpRequest, job: SamplingJob, *, refusal: str = "") -> HttpResponse:
    """htmx swaps the job's line in place (with any error, and the refusal, said on it); a plain form post returns
    to the project, where the refusal is a message."""
    if request.htmx:
        job.refresh_from_db()
        return _job_line(request, "job", job, refusal=refusal)
    if refusal:
        messages.error(request, refusal)
    return redirect("annotation:project_detail", project_id=job.project_id)


@researcher_required
def project_export(request: HttpRequest, project_id: int, kind: str) -> HttpResponse:
    project = _project(request, project_id)
    form = ExportForm(request.GET or None)
    if request.GET and not form.is_valid():
        for name in ("aggregation", "binarization", "seed"):
            if name in form.errors:
                return HttpResponseBadRequest(f"{name}: {' '.join(form.errors[name])}",
                                              content_type="text/plain; charset=utf-8")
    strategy = form.cleaned_data.get("strategy", "all") if request.GET else "all"
    aggregation = form.cleaned_data.get("aggregation", "all") if request.GET else "all"
    ratings = _ratings_options(form) if request.GET else {}
    stem = f"{slugify(project.name) or project.pk}-{strategy}"
    if aggregation != "all":
        stem = f"{stem}-{slugify(aggregation)}"
    pairs = selectors.pair_rows(project_id=project.pk, strategy=strategy, aggregation=aggregation, **ratings)
    conversational = selectors.project_has_conversations(project_id=project.pk)
    if kind in FEEDBACK_EXPORTS:
        return _feedback_export(project, kind, aggregation=aggregation, conversational=conversational, **ratings)
    if kind == "pairs.jsonl":
        # the API's pair export reads the same rows
        rows = selectors.pair_export_rows(project_id=project.pk, strategy=strategy, aggregation=aggregation,
                                          conversational=conversational, **ratings)
        return _stream(exporting.jsonl_lines(rows), f"{stem}-pairs.jsonl", "application/x-ndjson")
    if kind == "pairs.csv":
        return _stream(exporting.csv_lines(pairs), f"{stem}-pairs.csv", "text/csv")
    if kind == "rankings.jsonl":
        rows = selectors.ranking_rows(project_id=project.pk)
        return _stream(exporting.jsonl_lines(rows), f"{slugify(project.name)}-rankings.jsonl", "application/x-ndjson")
    if kind in DATASET_EXPORTS:
        return _dataset_export(request, project, kind, stem=stem, strategy=strategy, aggregation=aggregation,
                               conversational=conversational, **ratings)
    if kind == "dataset.zip":
        try:
            archive = exporting.dataset_zip(pairs, name=f"{stem}-pairs", conversational=conversational,
                                            card=_card(project, "pairs", strategy=strategy, aggregation=aggregation,
                                                      **ratings))
        except ValueError as error:
            messages.error(request, str(error))
            return redirect("annotation:project_detail", project_id=project.pk)
        response = FileResponse(archive.open("rb"), as_attachment=True, filename=archive.name)
        # The archive is open; its directory can go now (Linux keeps the inode until the file is closed).
        shutil.rmtree(archive.parent)
        return response
    raise Http404(f"unknown export {kind!r}")


FEEDBACK_EXPORTS = ("unpaired.jsonl", "unpaired.csv", "labels.jsonl")


def _ratings_options(form: ExportForm) -> dict:
    """How ratings become pairs (binarization, seed), as the export form gives them."""
    return {"binarization": form.cleaned_data.get("binarization", DEFAULT_BINARIZATION),
            "seed": form.cleaned_data.get("seed", DEFAULT_SEED)}


def _feedback_export(project: Project, kind: str, *, aggregation: str, conversational: bool, binarization: str =
                     DEFAULT_BINARIZATION, seed: int = DEFAULT_SEED) -> StreamingHttpResponse:
    """The unpaired (KTO) rows, JSONL or CSV, and the raw thumbs and ratings (webapp.annotation.feedback's rules)."""
    name = slugify(project.name) or str(project.pk)
    if kind == "labels.jsonl":
        return _stream(exporting.jsonl_lines(selectors.label_rows(project_id=project.pk)), f"{name}-labels.jsonl",
                       "application/x-ndjson")
    stem = f"{name}-unpaired" if aggregation == "all" else f"{name}-{slugify(aggregation)}-unpaired"
    if kind == "unpaired.csv":
        rows = selectors.unpaired_rows(project_id=project.pk, aggregation=aggregation, binarization=binarization,
                                       seed=seed)
        return _stream(exporting.csv_lines(rows, exporting.UNPAIRED_COLUMNS), f"{stem}.csv", "text/csv")
    rows = selectors.unpaired_export_rows(project_id=project.pk, aggregation=aggregation, binarization=binarization,
                                          seed=seed, conversational=conversational)
    return _stream(exporting.jsonl_lines(rows), f"{stem}.jsonl", "application/x-ndjson")


DATASET_EXPORTS = ("pairs.parquet", "unpaired.parquet", "unpaired-dataset.zip", "argilla.parquet")
_MADE = {
    "pairs": "One row per preference pair: the project's rankings turned into pairs by the pair strategy, "
             "combined across annotators by the aggregation, and the imported pairs (README, «Export»).",
    "unpaired": "TRL's unpaired format for KTO: one row per response with its label, true for desirable "
                "(thumbs, and the rules turning rankings and ratings into labels: README, «From feedback to "
                "training data»).",
}


def _card(project: Project, kind: str, **options: object) -> exporting.DatasetCard:
    return exporting.DatasetCard(project=project.name, mode=project.mode, kind=kind, made=_MADE[kind],
                                 guidelines=project.guidelines, options=options)


def _dataset_export(request: HttpRequest, project: Project, kind: str, *, stem: str, strategy: str,
                    aggregation: str, conversational: bool, **ratings: object) -> HttpResponse:
    """Parquet files and the unpaired datasets zip: written to a temporary file, then sent. `ratings`: how a
    ratings project's ratings become pairs, as the form says (binarization, seed)."""
    from webapp.annotation import argilla_export

    try:
        if kind == "pairs.parquet":
            rows = selectors.pair_export_rows(project_id=project.pk, strategy=strategy, aggregation=aggregation,
                                              conversational=conversational, **ratings)
            path = exporting.parquet_file(rows, name=f"{stem}-pairs.parquet",
                                          features=exporting.pair_features(conversational=conversational))
        elif kind == "argilla.parquet":
            layout = argilla_export.argilla_layout(project)
            path = exporting.parquet_file(argilla_export.argilla_rows(project, layout),
                                          name=f"{slugify(project.name) or project.pk}-argilla.parquet",
                                          features=argilla_export.argilla_features(layout))
        else:
            rows = selectors.unpaired_export_rows(project_id=project.pk, aggregation=aggregation,
                                                  conversational=conversational, **ratings)
            rows, features = exporting.unpaired_rows_features(rows, conversational=conversational)
            name = f"{slugify(project.name) or project.pk}-unpaired"
            if kind == "unpaired.parquet":
                path = exporting.parquet_file(rows, name=f"{name}.parquet", features=features)
            else:
                path = exporting.dataset_zip(rows, name=name, features=features,
                                             card=_card(project, "unpaired", aggregation=aggregation, **ratings))
    except ValueError as error:
        messages.error(request, str(error))
        return redirect("annotation:project_detail", project_id=project.pk)
    response = FileResponse(path.open("rb"), as_attachment=True, filename=path.name)
    # The file is open; its directory can go now (Linux keeps the inode until the file is closed).
    shutil.rmtree(path.parent)
    return response


def _stream(lines, filename: str, content_type: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
