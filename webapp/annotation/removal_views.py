"""The project page's files section: what the project's own files and the runs trained on it take on disk,
archive / unarchive, and delete asked for again on the page (a confirm fragment from the server, no script) and
answered with what it freed. Thin: the services (services/removal.py) decide and refuse."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from webapp.accounts.roles import researcher_required
from webapp.annotation import selectors
from webapp.annotation.models import Project
from webapp.annotation.services.removal import (
    may_remove_project,
    project_archive,
    project_delete,
    project_disk_bytes,
    project_runs,
)
from webapp.experiments.selectors import disk_size_text, run_disk_bytes
from webapp.experiments.services.removal import RemovalRefused


def _project(request: HttpRequest, project_id: int) -> Project:
    return get_object_or_404(selectors.projects_visible_to(request.user), pk=project_id)


def _files(request: HttpRequest, project: Project, **extra: object) -> HttpResponse:
    runs = project_runs(project)
    for run in runs:
        run.disk_text = disk_size_text(run_disk_bytes(run))
    return render(request, "annotation/_project_files.html", {
        "project": project, "disk_text": disk_size_text(project_disk_bytes(project)), "runs": runs,
        "may_remove": may_remove_project(request.user, project), **extra})


@researcher_required
def project_files(request: HttpRequest, project_id: int) -> HttpResponse:
    return _files(request, _project(request, project_id))


@researcher_required
def project_delete_confirm(request: HttpRequest, project_id: int) -> HttpResponse:
    return _files(request, _project(request, project_id), confirm=True)


@researcher_required
@require_POST
def project_archive_toggle(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    try:
        project = project_archive(project_id=project.pk, user=request.user,
                                  archived=request.POST.get("archived") != "no")
    except RemovalRefused as error:
        return _files(request, project, refusal=error.message)
    return _files(request, project)


@researcher_required
@require_POST
def project_delete_view(request: HttpRequest, project_id: int) -> HttpResponse:
    """Deleted: to the project list, which says what was freed; refused: the section says why."""
    project = _project(request, project_id)
    try:
        freed = project_delete(project_id=project.pk, user=request.user)
    except RemovalRefused as error:
        return _files(request, project, refusal=error.message)
    messages.success(request, f"Project “{project.name}” deleted: freed {freed.text}.")
    if request.htmx:
        return HttpResponseClientRedirect(reverse("annotation:project_list"))
    return redirect("annotation:project_list")
