"""A project's members page (its researchers: owner and researcher members; admins): new annotator accounts,
members in and out, password resets of its annotators; and anyone's own API tokens page.

A one-time password, or a new API token, appears only in the answer to the POST that made it, with caching
forbidden: reloading or going back never shows it again.
"""

import secrets

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from webapp.accounts import selectors, services
from webapp.accounts.forms import AnnotatorCreateForm, ApiTokenCreateForm, MemberAddForm
from webapp.accounts.roles import researcher_required
from webapp.annotation.models import Project
from webapp.annotation.selectors import projects_visible_to


def _project(request: HttpRequest, project_id: int) -> Project:
    """A project the researcher reaches (its owner, a researcher member, an admin); 404 for any other, so that
    nobody manages, or resets passwords through, a project not theirs."""
    return get_object_or_404(projects_visible_to(request.user), pk=project_id)


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
    return _members_page(request, _project(request, project_id))


@never_cache
@require_POST
@researcher_required
def project_annotator_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
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
    project = _project(request, project_id)
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
    project = _project(request, project_id)
    user = get_object_or_404(User, pk=user_id)
    services.project_member_remove(project=project, user=user)
    messages.success(request, f"{user.username} is no longer a member of {project.name}; their rankings stay.")
    return redirect("project_members", project_id=project.pk)


@never_cache
@require_POST
@researcher_required
def project_member_password_reset(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    project = _project(request, project_id)
    user = get_object_or_404(User, pk=user_id)
    try:
        password = services.member_password_reset(project=project, user=user)
    except services.AccountError as error:
        messages.error(request, str(error))
        return redirect("project_members", project_id=project.pk)
    return _members_page(request, project, shown_password=(user.username, password))


# API tokens: every logged-in user's own ---------------------------------------------------------------------

# A new token is shown in the answer to the POST that made it. Reloading that page sends the POST again: each form
# carries a key kept in the session, spent by the first POST, so a form sent again makes no second token and
# is answered with the list, never with a token.
_TOKEN_FORM_KEYS = "api_token_form_keys"
_TOKEN_FORM_KEYS_KEPT = 10


def _token_form(request: HttpRequest, data: QueryDict | None = None) -> ApiTokenCreateForm:
    key = secrets.token_urlsafe(16)
    request.session[_TOKEN_FORM_KEYS] = [*request.session.get(_TOKEN_FORM_KEYS, [])[-(_TOKEN_FORM_KEYS_KEPT - 1):], key]
    if data is None:
        return ApiTokenCreateForm(initial={"form_key": key})
    data = data.copy()
    data["form_key"] = key
    return ApiTokenCreateForm(data)


def _spend_token_form_key(request: HttpRequest, key: str) -> bool:
    keys = request.session.get(_TOKEN_FORM_KEYS, [])
    if key not in keys:
        return False
    request.session[_TOKEN_FORM_KEYS] = [kept for kept in keys if kept != key]
    return True


def _tokens_page(
    request: HttpRequest, *, form: ApiTokenCreateForm | None = None, shown_token: str | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "tokens": selectors.api_tokens_of(user=request.user),
        "form": form or _token_form(request),
        "shown_token": shown_token,
        "api_base": request.build_absolute_uri("/api/v1/"),
    }
    return render(request, "accounts/api_tokens.html", context, status=status)


@never_cache
def api_tokens(request: HttpRequest) -> HttpResponse:
    return _tokens_page(request)


@never_cache
@require_POST
def api_token_create(request: HttpRequest) -> HttpResponse:
    if not _spend_token_form_key(request, request.POST.get("form_key", "")):
        messages.info(request, "That form was sent already (a reload?): any token it made is listed below, and is "
                               "not shown again. Create another if you need one.")
        return redirect("api_tokens")
    form = _token_form(request, request.POST)  # with a fresh key, for sending it again if refused
    if not form.is_valid():
        return _tokens_page(request, form=form, status=400)
    try:
        _, raw = services.api_token_create(user=request.user, name=form.cleaned_data["name"])
    except services.AccountError as error:
        form.add_error("name", str(error))
        return _tokens_page(request, form=form, status=400)
    return _tokens_page(request, shown_token=raw)


@require_POST
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = services.api_token_revoke(token_id=token_id, user=request.user)
    except services.AccountError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Token “{token.name}” (pfl_{token.prefix}…) is revoked: programs using it are "
                                  "refused from now on.")
    return redirect("api_tokens")
