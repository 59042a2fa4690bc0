"""Thin views: parse, authorise, call a service or selector, render (a fragment for htmx requests)."""

from __future__ import annotations

import json
from http import HTTPStatus
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import replace_url

from trainer.config import ConfigError
from webapp.accounts.roles import researcher_required
from webapp.experiments import selectors, services
from webapp.experiments.data_snapshot import NO_SNAPSHOT, snapshot_download_name, snapshot_path
from webapp.experiments.forms import LaunchForm
from webapp.experiments.models import ModelRef, Run
from webapp.text import whole_number

COMPARE_LIMIT = 8
# htmx swaps this answer and stops polling: a finished run changes no more.
HTMX_STOP_POLLING = 286


def _optional_float(request: HttpRequest, name: str) -> float | None:
    raw = request.GET.get(name, "")
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise Http404(f"{name} must be a number") from None


def _smoothing(request: HttpRequest) -> float:
    weight = _optional_float(request, "smoothing") or 0.0
    if not 0 <= weight < 1:
        raise Http404(f"smoothing must be at least 0 and below 1, got {weight}")
    return weight


def _chart_context(request: HttpRequest, runs: list[Run]) -> dict:
    """What the charts' partial needs: the runs, and the user's pins for their kind (none when kinds differ)."""
    kinds = {run.kind for run in runs}
    kind = kinds.pop() if len(kinds) == 1 else ""
    pins = selectors.chart_pins(user=request.user, kind=kind) if kind else []
    return {"chart_runs_json": _chart_runs(runs), "chart_pins_json": json.dumps(pins), "chart_kind": kind}


def _chart_runs(runs: list[Run]) -> str:
    return json.dumps([
        {"id": run.pk, "label": f"#{run.pk} {run.name}", "kind": run.kind, "active": run.is_active,
         "metrics_url": reverse("experiments:run_metrics", args=[run.pk])}
        for run in runs
    ])


RUN_FILTERS = ("status", "kind", "query", "tag", "group", "archived")


def _run(request: HttpRequest, run_id: int) -> Run:
    """The run if the user reaches it (selectors.runs_visible_to); 404 otherwise, as for a run that does not exist."""
    return get_object_or_404(selectors.runs_visible_to(request.user).select_related("created_by", "parent"), pk=run_id)


def _run_rows_context(request: HttpRequest) -> dict:
    filters = {key: request.GET.get(key, "").strip() for key in RUN_FILTERS}
    return {
        "summaries": selectors.run_summaries(selectors.runs_list(user=request.user, **filters)[:200]),
        "filters": filters,
        "filtered": any(filters.values()),
    }


@researcher_required
def run_list(request: HttpRequest, *, rows_only: bool = False) -> HttpResponse:
    """The run list, or for htmx (and /runs/rows) its table alone: polled with the filter form's values so
    statuses, progress and alerts stay current; a change of filters also puts them in the address bar, so a
    reload keeps them. Stale runs are failed by the periodic task, never by a read."""
    context = _run_rows_context(request)
    if not (rows_only or request.htmx):
        context.update(statuses=Run.Status.choices, kinds=[(kind, kind) for kind, _ in selectors.run_kind_choices()],
                       archived_choices=selectors.ARCHIVED_CHOICES)
        return render(request, "experiments/run_list.html", context)
    response = render(request, "experiments/run_list.html#rows", context)
    if request.htmx and request.htmx.trigger == "run-filters":
        chosen = urlencode({key: value for key, value in context["filters"].items() if value})
        replace_url(response, reverse("experiments:runs") + (f"?{chosen}" if chosen else ""))
    return response


@researcher_required
def run_launch(request: HttpRequest) -> HttpResponse:
    parent = None
    if request.GET.get("fork"):
        fork = request.GET["fork"]
        parent_id = whole_number(fork)
        if parent_id is None:
            return HttpResponseBadRequest(f"fork: a run number is expected, not {fork[:40]!r}",
                                          content_type="text/plain; charset=utf-8")
        parent = _run(request, parent_id)
        if parent.is_external:
            return HttpResponseBadRequest(f"run #{parent.pk} is an external run, logged by its own program: it has "
                                          "no config to fork", content_type="text/plain; charset=utf-8")
    kinds = selectors.launchable_kinds()
    kind = request.GET.get("kind") or (parent.kind if parent else kinds[0])
    if kind not in kinds:
        raise Http404(f"unknown run kind {kind!r}")
    status = 200
    presets = selectors.launch_presets(kind, parent)
    preset = request.GET.get("preset", "")
    try:
        initial_config = selectors.launch_initial_config(kind, parent, preset)
    except ConfigError as error:
        raise Http404(error.message) from error
    kept_upload = selectors.inherited_upload(parent)
    if request.method == "POST":
        form = LaunchForm(request.POST, request.FILES, kind=kind, initial_config=initial_config, user=request.user,
                          kept_upload=kept_upload)
        run = _launch(request, form, parent)
        if run is not None:
            # run_detail.js drops this message once the run's status is no longer "queued"
            messages.success(request, f"Run #{run.pk} queued.", extra_tags="run-queued")
            return redirect("experiments:run_detail", run_id=run.pk)
        # refused for what it holds: shown again with the errors on their fields, a 422 as the API answers; a launch
        # the queue could not take is shown with the reason (nothing in the form was wrong)
        if not form.queue_unavailable:
            status = HTTPStatus.UNPROCESSABLE_ENTITY
    else:
        initial = selectors.fork_initial(parent) if parent else {}
        form = LaunchForm(kind=kind, initial_config=initial_config, initial=initial, user=request.user,
                          kept_upload=kept_upload)
    context = {"form": form, "kind": kind, "kinds": kinds, "parent": parent, "preset": preset,
               "presets": presets, "has_models": selectors.models_visible_to(request.user).exists()}
    return render(request, "experiments/run_launch.html", context, status=status)


def _launch(request: HttpRequest, form: LaunchForm, parent: Run | None) -> Run | None:
    if not form.is_valid():
        return None
    try:
        source = form.data_source_value()
        name = form.cleaned_data.get("name", "")
        if source["type"] == "upload":
            if not form.cleaned_data.get("upload") and form.kept_upload and parent is not None:
                return services.run_create_on_kept_upload(
                    parent=parent, kind=form.kind, config=form.config(), created_by=request.user, name=name,
                )
            if not form.cleaned_data.get("upload"):
                raise ValidationError({"upload": "choose a JSONL file to upload"})
            return services.run_create_from_upload(
                file=form.cleaned_data["upload"], kind=form.kind, config=form.config(), created_by=request.user,
                name=name, parent=parent,
            )
        return services.run_create(
            kind=form.kind, config=form.config(), data_source=source, created_by=request.user, name=name,
            parent=parent,
        )
    except ValidationError as error:
        form.add_service_errors(error)
        return None


def _resume_plan(run: Run, checkpoint_id: str) -> selectors.ResumePlan | None:
    """The confirmation the run page shows after a resume that would remove later checkpoints."""
    number = whole_number(checkpoint_id)
    checkpoint = ModelRef.objects.filter(run=run, pk=number).first() if number is not None else None
    if checkpoint is None or run.is_active:
        return None
    plan = selectors.resume_plan(run=run, checkpoint=checkpoint)
    return plan if plan.removed else None


def _run_context(run: Run, step: int | None = None, resume: str = "") -> dict:
    steps, chosen, samples = selectors.samples_at(run=run, step=step)
    return {
        "run": run,
        "data_source": selectors.data_source_text(run.data_source, kind=run.kind),
        "processes": selectors.run_nodes_text(run),
        "checkpoints": selectors.run_checkpoints_sized(run=run),
        "resume_plan": _resume_plan(run, resume),
        "sample_steps": steps,
        "sample_steps_json": json.dumps(steps),
        "sample_index": steps.index(chosen) if steps else 0,
        "sample_step": chosen,
        "samples": samples,
        # an active run's newest samples replace the shown ones, unless an earlier step was picked
        "samples_follow_latest": run.is_active and (not steps or chosen == steps[-1]),
        "silence": selectors.run_silence(run),
        "heartbeat_timeout_text": selectors.duration_text(int(settings.PREFLAB_HEARTBEAT_TIMEOUT_S)),
    }


@researcher_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    context = {**_run_context(run, resume=request.GET.get("resume", "")), **_chart_context(request, [run]),
               "model_text": selectors.run_model_text(run),
               "config_items": sorted(run.config.items())}
    return render(request, "experiments/run_detail.html", context)


@researcher_required
def run_data(request: HttpRequest, run_id: int) -> FileResponse:
    """The training rows frozen at the run's launch (webapp.experiments.data_snapshot), byte for byte."""
    run = _run(request, run_id)
    path = snapshot_path(run.pk)
    if not run.data_sha256 or not path.is_file():
        raise Http404(NO_SNAPSHOT.format(run_id=run.pk))
    return FileResponse(path.open("rb"), as_attachment=True, filename=snapshot_download_name(run.pk),
                        content_type="application/x-ndjson; charset=utf-8")


@researcher_required
def run_status(request: HttpRequest, run_id: int) -> HttpResponse:
    """htmx fragment polled by the run page: status, progress, alerts, error and actions."""
    run = _run(request, run_id)
    response = render(request, "experiments/run_detail.html#status", _run_context(run))
    if request.htmx and not run.is_active:
        response.status_code = HTMX_STOP_POLLING
    return response


@researcher_required
def run_samples(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    step = request.GET.get("step")
    context = _run_context(run, whole_number(step) if step else None)
    return render(request, "experiments/run_detail.html#samples", context)


@researcher_required
def run_metrics(request: HttpRequest, run_id: int) -> JsonResponse:
    run = _run(request, run_id)
    x_axis = request.GET.get("x", "step")
    if x_axis not in selectors.X_AXES:
        raise Http404(f"x must be one of {', '.join(selectors.X_AXES)}")
    after = request.GET.get("after", "")
    payload = selectors.metric_series(
        run_id=run.pk,
        x_axis=x_axis,
        after_step=whole_number(after),
        x_min=_optional_float(request, "x_min"),
        x_max=_optional_float(request, "x_max"),
        metrics=request.GET.getlist("metric") or None,
        smoothing=_smoothing(request),
    )
    payload["status"] = run.status
    return JsonResponse(payload)


@researcher_required
@require_http_methods(["GET", "POST"])
def chart_pins(request: HttpRequest) -> JsonResponse:
    """The user's pinned charts ({"pins": {kind: [metric, ...]}}); a POST {"kind": ..., "metrics": [...]} replaces
    those of one kind."""
    if request.method == "GET":
        return JsonResponse({"pins": selectors.chart_pins_by_kind(user=request.user)})
    try:
        body = json.loads(request.body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return JsonResponse({"error": f"the body must be JSON: {error}"}, status=400)
    if not isinstance(body, dict):
        return JsonResponse({"error": 'the body must be a JSON object: {"kind": ..., "metrics": [...]}'}, status=400)
    try:
        pins = services.chart_pins_set(user=request.user, kind=body.get("kind"), metrics=body.get("metrics"))
    except ValidationError as error:
        return JsonResponse({"error": "; ".join(error.messages)}, status=400)
    return JsonResponse({"kind": body["kind"], "metrics": pins})


@researcher_required
@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    services.run_cancel(run_id=run.pk)
    if request.htmx:
        return run_status(request, run_id)
    return redirect("experiments:run_detail", run_id=run.pk)


@researcher_required
@require_POST
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    checkpoint = request.POST.get("checkpoint", "")
    try:
        with transaction.atomic():
            services.run_resume(run_id=run.pk, checkpoint_id=whole_number(checkpoint) or 0,
                                remove_later=request.POST.get("remove_later") == "yes")
        messages.success(request, f"Run #{run.pk} queued to resume.", extra_tags="run-queued")
    except ValidationError as error:
        needs_answer = any(item.code == "confirm" for item in getattr(error, "error_dict", {}).get("checkpoint", []))
        if not needs_answer:
            messages.error(request, "; ".join(error.messages))
        # the page lists what resuming would remove and asks (or says which run keeps it)
        return redirect(f"{reverse('experiments:run_detail', args=[run.pk])}?resume={checkpoint}#resume")
    return redirect("experiments:run_detail", run_id=run.pk)


@researcher_required
def run_compare(request: HttpRequest) -> HttpResponse:
    ids = [number for part in request.GET.getlist("runs") if (number := whole_number(part)) is not None][:COMPARE_LIMIT]
    runs = list(selectors.runs_visible_to(request.user).filter(pk__in=ids).order_by("pk"))
    context = {
        "runs": runs,
        **_chart_context(request, runs),
        "diff": selectors.config_diff(runs) if len(runs) > 1 else [],
        "choices": selectors.runs_list(user=request.user)[:50],
    }
    return render(request, "experiments/run_compare.html", context)


@researcher_required
def model_list(request: HttpRequest) -> HttpResponse:
    error = ""
    if request.method == "POST":
        try:
            model = services.model_register(path=request.POST.get("path", ""), name=request.POST.get("name", ""),
                                            user=request.user)
            messages.success(request, f"Model {model.name} registered.")
            return redirect("experiments:models")
        except ValidationError as validation_error:
            error = "; ".join(validation_error.messages)
    context = {"models": selectors.models_list(request.user), "error": error, "posted": request.POST}
    return render(request, "experiments/model_list.html", context)
