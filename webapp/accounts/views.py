"""A project's members page (researchers): new annotator accounts, members in and out, password resets.

A one-time password appears only in the answer to the POST that made it, with caching forbidden: reloading or
going back never shows it again.
"""

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from webapp.accounts import selectors, services
from webapp.accounts.forms import AnnotatorCreateForm, MemberAddForm
from webapp.accounts.roles import researcher_required
from webapp.annotation.models import Project


def _members_page(
    request: HttpRequest,
    project: Project,
    *,
    create_form: AnnotatorCreateForm | None = None,
    add_form: MemberAddForm | None = None,
    shown_password: tuple[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "project": project,
        "members": selectors.project_members(project),
        "create_form": create_form or AnnotatorCreateForm(),
        "add_form": add_form or MemberAddForm(project=project),
        "shown_password": shown_password,
    }
    return render(request, "accounts/project_members.html", context, status=status)


@never_cache
@researcher_required
def project_members(request: HttpRequest, project_id: int) -> HttpResponse:
    return _members_page(request, get_object_or_404(Project, pk=project_id))


@never_cache
@require_POST
@researcher_required
def project_annotator_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = AnnotatorCreateForm(request.POST)
    if not form.is_valid():
        return _members_page(request, project, create_form=form, status=400)
    try:
        user, password = services.project_annotator_create(project=project, username=form.cleaned_data["username"])
    except services.AccountError as error:
        form.add_error("username", str(error))
        return _members_page(request, project, create_form=form, status=400)
    return _members_page(request, project, shown_password=(user.username, password))


@require_POST
@researcher_required
def project_member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = MemberAddForm(request.POST, project=project)
    if not form.is_valid():
        return _members_page(request, project, add_form=form, status=400)
    user = form.cleaned_data["user"]
    try:
        services.project_member_add(project=project, user=user)
    except services.AccountError as error:
        form.add_error("user", str(error))
        return _members_page(request, project, add_form=form, status=400)
    messages.success(request, f"{user.username} is now a member of {project.name}.")
    return redirect("project_members", project_id=project.pk)


@require_POST
@researcher_required
def project_member_remove(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    user = get_object_or_404(User, pk=user_id)
    services.project_member_remove(project=project, user=user)
    messages.success(request, f"{user.username} is no longer a member of {project.name}; their rankings stay.")
    return redirect("project_members", project_id=project.pk)


@never_cache
@require_POST
@researcher_required
def project_member_password_reset(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    user = get_object_or_404(User, pk=user_id)
    try:
        password = services.member_password_reset(project=project, user=user)
    except services.AccountError as error:
        messages.error(request, str(error))
        return redirect("project_members", project_id=project.pk)
    return _members_page(request, project, shown_password=(user.username, password))
