"""The run page's files section: what the run takes on disk, archive / unarchive, and delete of the run or one
of its checkpoints, each delete asked for again on the page (a confirm fragment from the server, no script) and
answered with what it freed. Thin: the services (services/removal.py) decide and refuse."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from webapp.accounts.roles import researcher_required
from webapp.experiments import selectors
from webapp.experiments.models import ModelRef, Run
from webapp.experiments.selectors import directory_size, disk_size_text, run_disk_bytes
from webapp.experiments.services.removal import (
    RemovalRefused,
    checkpoint_delete,
    may_remove_run,
    run_archive,
    run_delete,
)


def _run(request: HttpRequest, run_id: int) -> Run:
    return get_object_or_404(selectors.runs_visible_to(request.user), pk=run_id)


def _files_context(request: HttpRequest, run: Run, **extra: object) -> dict:
    checkpoints = list(ModelRef.objects.filter(run=run).order_by("step"))
    for checkpoint in checkpoints:
        checkpoint.size_text = disk_size_text(directory_size(checkpoint.path))
    return {"run": run, "disk_text": disk_size_text(run_disk_bytes(run)), "checkpoints": checkpoints,
            "may_remove": may_remove_run(request.user, run), "active": run.is_active, **extra}


def _files(request: HttpRequest, run: Run, **extra: object) -> HttpResponse:
    return render(request, "experiments/_run_files.html", _files_context(request, run, **extra))


@researcher_required
def run_files(request: HttpRequest, run_id: int) -> HttpResponse:
    return _files(request, _run(request, run_id))


@researcher_required
def run_delete_confirm(request: HttpRequest, run_id: int) -> HttpResponse:
    """The question asked before a delete, with what it would free."""
    run = _run(request, run_id)
    return _files(request, run, confirm_run=True)


@researcher_required
def checkpoint_delete_confirm(request: HttpRequest, run_id: int, checkpoint_id: int) -> HttpResponse:
    run = _run(request, run_id)
    checkpoint = get_object_or_404(ModelRef, pk=checkpoint_id, run=run)
    return _files(request, run, confirm_checkpoint=checkpoint.pk)


@researcher_required
@require_POST
def run_archive_toggle(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    try:
        run = run_archive(run_id=run.pk, user=request.user, archived=request.POST.get("archived") != "no")
    except RemovalRefused as error:
        return _files(request, run, refusal=error.message)
    return _files(request, run)


@researcher_required
@require_POST
def run_delete_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """Deleted: to the run list, which says what was freed; refused: the section says why."""
    run = _run(request, run_id)
    try:
        freed = run_delete(run_id=run.pk, user=request.user)
    except RemovalRefused as error:
        return _files(request, run, refusal=error.message)
    messages.success(request, f"Run #{run_id} {run.name} deleted: freed {freed.text}.")
    if request.htmx:
        return HttpResponseClientRedirect(reverse("experiments:runs"))
    return redirect("experiments:runs")


@researcher_required
@require_POST
def checkpoint_delete_view(request: HttpRequest, run_id: int, checkpoint_id: int) -> HttpResponse:
    run = _run(request, run_id)
    checkpoint = get_object_or_404(ModelRef, pk=checkpoint_id, run=run)
    try:
        freed = checkpoint_delete(checkpoint_id=checkpoint.pk, user=request.user)
    except RemovalRefused as error:
        return _files(request, run, refusal=error.message)
    run.refresh_from_db()
    return _files(request, run, freed=f"Checkpoint at step {checkpoint.step} deleted: freed {freed.text}.")
