"""API endpoints: projects, their progress and agreement, their members (researchers only)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status
from pydantic import field_validator

from webapp.accounts import selectors as account_selectors
from webapp.accounts import services as account_services
from webapp.annotation import selectors, services
from webapp.annotation.models import Project
from webapp.annotation.modes import DEFAULT_MODE, MODES
from webapp.annotation.services.projects import (
    ASPECT_DESCRIPTION_MAX_CHARS,
    ASPECT_NAME_MAX_CHARS,
    RATING_ASPECTS_MAX,
    RATING_SCALE_HIGHEST,
    RATING_SCALE_LOWEST,
)
from webapp.api.auth import researcher_only
from webapp.api.schemas import NON_BLANK_TEXT, BodyIn, Detail, Page, PageQuery, WholeNumber, page_of
from webapp.text_bounds import GUIDELINES_MAX_CHARS

router = Router(tags=["projects"])

# the model's PositiveSmallIntegerField
SMALL_INT_MAX = 32767
NAME_MAX_CHARS = Project._meta.get_field("name").max_length


class Aspect(BodyIn):
    name: str = Field(..., min_length=1, max_length=ASPECT_NAME_MAX_CHARS, json_schema_extra=NON_BLANK_TEXT)
    description: str = Field("", max_length=ASPECT_DESCRIPTION_MAX_CHARS, description="Shown to annotators.")


class ProjectOut(Schema):
    id: int
    name: str
    mode: str
    guidelines: str
    responses_per_item: int
    annotators_per_item: int
    rating_aspects: list[dict[str, str]] = Field(description="The ratings mode's aspects, {name, description} "
                                                             "each (none: one, \"overall\").")
    rating_min: int
    rating_max: int
    created_at: datetime


class ProjectsQuery(PageQuery):
    archived: Literal["", "only", "all"] = Field("", description="Empty: projects not archived; only: archived; all.")


class ProjectIn(BodyIn):
    name: str = Field(..., min_length=1, max_length=NAME_MAX_CHARS, json_schema_extra=NON_BLANK_TEXT)
    guidelines: str = Field("", max_length=GUIDELINES_MAX_CHARS,
                            description="Markdown, shown on every annotate page.")
    mode: Literal[tuple(MODES)] = DEFAULT_MODE  # type: ignore[valid-type]
    responses_per_item: WholeNumber = Field(4, ge=2, le=SMALL_INT_MAX)
    annotators_per_item: WholeNumber = Field(1, ge=1, le=SMALL_INT_MAX)
    lease_minutes: WholeNumber = Field(30, ge=1, le=SMALL_INT_MAX)
    rating_aspects: list[Aspect] = Field(default_factory=list, max_length=RATING_ASPECTS_MAX,
                                         description="The ratings mode's aspects, names unique; none: one, "
                                                     "\"overall\".")
    rating_min: WholeNumber = Field(1, ge=RATING_SCALE_LOWEST, le=RATING_SCALE_HIGHEST)
    rating_max: WholeNumber = Field(5, ge=RATING_SCALE_LOWEST, le=RATING_SCALE_HIGHEST,
                                    description="Above rating_min, at most 10 values (one digit key each).")

    @field_validator("name")
    @classmethod
    def name_is_text(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("is empty (or only whitespace)")
        return value


class Progress(Schema):
    items: int = Field(..., description="Items open to annotation (two responses or more).")
    done: int = Field(..., description="Items with all the rankings they need (the overlap).")
    remaining: int
    in_progress: int = Field(..., description="Items leased to someone right now.")
    rankings: int
    wanted: int = Field(..., description="Rankings wanted in all: items × annotators per item.")
    percent: int


class AnnotatorAgreement(Schema):
    username: str
    rankings: int
    skips: int
    all_bad: int
    median_seconds: float | None
    agreement_with_majority: float | None


class Agreement(Schema):
    shared_items: int = Field(..., description="Items ranked by two annotators or more: what the figures use.")
    kendall_tau: float | None = Field(..., description="Mean Kendall's tau-b between annotators per item.")
    pairwise_agreement: float | None
    krippendorff_alpha: float | None = Field(..., description="Krippendorff's alpha (ordinal) over the project.")
    annotators: list[AnnotatorAgreement]


class ProjectDetail(ProjectOut):
    progress: Progress
    agreement: Agreement


class HumanAgreementOut(Schema):
    items: int = Field(..., description="Items both the source and annotators answered.")
    answers: int = Field(..., description="Annotators' answers compared (skips, held-back answers and answers "
                                          "that accepted a suggestion left out).")
    left_out: int = Field(..., description="Answers to these items left out because they accepted a suggestion.")
    pairs: int = Field(..., description="The answers' strict preferences (responses in different tiers) compared.")
    agreed: int = Field(..., description="Of them, those the source orders the same way.")
    tied: int = Field(..., description="Of them, those the source ties (counted as not agreeing).")
    accuracy: float | None = Field(..., description="agreed / pairs; null without a pair.")
    low: float | None = Field(..., description="The accuracy's 95 % Wilson interval, lower bound.")
    high: float | None
    kendall_tau: float | None = Field(..., description="Kendall's tau-b between the source and each answer, "
                                                       "averaged over the answers where it is defined.")
    tau_answers: int = Field(..., description="The answers that mean is over.")


class SourceAgreementOut(Schema):
    agent: str = Field(..., description="The suggestion source, as its suggestions name it.")
    suggested_items: int
    agreement: HumanAgreementOut
    position_bias: float | None = Field(..., description="A judge's latest suggestions job: the share of its "
                                                         "comparisons that the order of the responses decided.")
    judge_comparisons: int | None


class RoundSuggestionAgreement(Schema):
    round: int = Field(..., description="The round's number in the project.")
    sources: list[SourceAgreementOut]


class SuggestionAgreementOut(Schema):
    sources: list[SourceAgreementOut] = Field(..., description="Over every item of the project.")
    rounds: list[RoundSuggestionAgreement] = Field(..., description="Over each round's items.")


class Member(Schema):
    username: str
    role: str


class MemberIn(BodyIn):
    username: str = Field(..., min_length=1, max_length=150)


def project_or_404(request: HttpRequest, project_id: int) -> Project:
    """A project the token's user reaches (selectors.projects_visible_to); any other is answered as one that does
    not exist."""
    project = selectors.projects_visible_to(request.auth).filter(pk=project_id).first()
    if project is None:
        raise HttpError(404, f"project {project_id} does not exist")
    return project


@router.get("", response=Page[ProjectOut], summary="List projects")
@researcher_only
def project_list(request: HttpRequest, paging: Query[ProjectsQuery]) -> dict:
    """Newest first; archived projects only with `archived`."""
    projects = selectors.projects_visible_to(request.auth).order_by("-created_at", "-id")
    if paging.archived != "all":
        projects = projects.filter(archived_at__isnull=paging.archived != "only")
    return page_of(projects, paging=paging)


@router.post("", response={201: ProjectOut, 409: Detail, 422: Detail}, summary="Create a project",
             openapi_extra={"responses": {422: {"description": "Besides the schema: rating_max above rating_min, "
                                                "at most 10 values; aspects named once each."}}})
@researcher_only
def project_create(request: HttpRequest, payload: ProjectIn) -> Status:
    try:
        project = services.project_create(owner=request.auth, **payload.model_dump())
    except IntegrityError:
        raise HttpError(409, f"name: a project named {payload.name!r} exists already") from None
    except ValidationError as error:
        raise HttpError(422, "; ".join(f"{field}: {' '.join(messages)}"
                                       for field, messages in error.message_dict.items())) from None
    return Status(201, project)


@router.get("/{project_id}", response={200: ProjectDetail, 404: Detail}, summary="A project, its progress and agreement")
@researcher_only
def project_detail(request: HttpRequest, project_id: int) -> dict:
    project = project_or_404(request, project_id)
    progress = selectors.project_progress(project)
    return {
        **{name: getattr(project, name) for name in ProjectOut.model_fields},
        "progress": {"items": progress.items, "done": progress.done, "remaining": progress.remaining,
                     "in_progress": progress.in_progress, "rankings": progress.rankings, "wanted": progress.wanted,
                     "percent": progress.percent},
        "agreement": {"shared_items": progress.shared_items, "kendall_tau": progress.tau,
                      "pairwise_agreement": progress.pairwise_agreement, "krippendorff_alpha": progress.alpha,
                      "annotators": progress.annotators},
    }


@router.get("/{project_id}/suggestions/agreement", response={200: SuggestionAgreementOut, 404: Detail},
            summary="Suggestion sources against the annotators")
@researcher_only
def suggestion_agreement(request: HttpRequest, project_id: int) -> dict:
    """Per suggestion source (agent): its agreement with the annotators over the items both answered, for the
    project and per round; the project page's Suggestions card and Rounds card show the same figures."""
    project = project_or_404(request, project_id)
    return {"sources": [_source_agreement(source) for source in selectors.suggestion_agreements(project)],
            "rounds": [{"round": number, "sources": [_source_agreement(source) for source in sources]}
                       for number, sources in selectors.round_suggestion_agreements(project).items()]}


def _source_agreement(source: selectors.SourceAgreement) -> dict:
    measured = source.agreement
    return {"agent": source.agent, "suggested_items": source.suggested_items, "position_bias": source.position_bias,
            "judge_comparisons": source.judge_job.judge_comparisons if source.judge_job else None,
            "agreement": {"items": measured.items, "answers": measured.answers, "left_out": measured.left_out,
                          "pairs": measured.pairs, "agreed": measured.agreed, "tied": measured.tied,
                          "accuracy": measured.accuracy, "low": measured.low, "high": measured.high,
                          "kendall_tau": measured.tau, "tau_answers": measured.tau_answers}}


@router.get("/{project_id}/members", response={200: list[Member], 404: Detail}, summary="A project's members")
@researcher_only
def member_list(request: HttpRequest, project_id: int) -> list:
    return account_selectors.project_members(project_or_404(request, project_id))


@router.post("/{project_id}/members", response={201: Member, 404: Detail, 409: Detail}, summary="Add a member")
@researcher_only
def member_add(request: HttpRequest, project_id: int, payload: MemberIn) -> Status:
    project = project_or_404(request, project_id)
    user = _user_or_404(payload.username)
    try:
        account_services.project_member_add(project=project, user=user)
    except account_services.AccountError as error:
        raise HttpError(409, f"username: {error}") from None
    member = next(row for row in account_selectors.project_members(project) if row.user_id == user.pk)
    return Status(201, member)


@router.delete("/{project_id}/members/{username}", response={204: None, 404: Detail}, summary="Remove a member")
@researcher_only
def member_remove(request: HttpRequest, project_id: int, username: str) -> Status:
    project = project_or_404(request, project_id)
    user = _user_or_404(username)
    if not project.members.filter(pk=user.pk).exists():
        raise HttpError(404, f"{username} is not a member of project {project_id}")
    account_services.project_member_remove(project=project, user=user)
    return Status(204, None)


def _user_or_404(username: str) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise HttpError(404, f"username: no user is named {username!r}")
    return user
