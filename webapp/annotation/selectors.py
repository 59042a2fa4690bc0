"""Reads of the annotation app: what an annotator sees, progress and agreement, and the training/export rows."""

import random
import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from webapp.accounts.roles import is_researcher
from webapp.annotation import agreement
from webapp.annotation.models import (
    Assignment,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    SamplingJob,
)
from webapp.annotation.preferences import pairs_from_tiers

OPEN_ITEMS = Q(annotatable=True, response_count__gte=2)


def projects_visible_to(user: AbstractBaseUser) -> QuerySet[Project]:
    projects = Project.objects.all() if is_researcher(user) else Project.objects.filter(members=user)
    return projects.annotate(item_count=Count("prompts", filter=Q(prompts__annotatable=True), distinct=True))


def responses_shown(*, prompt: Prompt, annotator: AbstractBaseUser) -> list[Response]:
    """The responses one annotator sees for an item, in an order of their own (stable across reloads)."""
    project = prompt.project
    count = 2 if project.mode == Project.Mode.PAIRWISE else project.responses_per_item
    responses = list(prompt.responses.order_by("id")[:count])
    random.Random(f"{annotator.pk}:{prompt.pk}").shuffle(responses)
    return responses


# Progress and agreement -------------------------------------------------------------------------------------


@dataclass
class AnnotatorRow:
    username: str
    rankings: int
    skips: int
    median_seconds: float | None
    agreement_with_majority: float | None


@dataclass
class ProjectProgress:
    items: int
    done: int
    in_progress: int
    rankings: int
    wanted: int
    tau: float | None = None
    pairwise_agreement: float | None = None
    alpha: float | None = None
    shared_items: int = 0
    annotators: list[AnnotatorRow] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.items - self.done

    @property
    def percent(self) -> int:
        return round(100 * min(self.rankings, self.wanted) / self.wanted) if self.wanted else 0


def item_rankings(project: Project) -> list[dict[str, list[list[int]]]]:
    """annotator -> tiers, for every item ranked by two people or more (the agreement figures' input)."""
    by_item: dict[int, dict[str, list[list[int]]]] = defaultdict(dict)
    rows = Ranking.objects.filter(prompt__project=project, skipped=False).values_list(
        "prompt_id", "annotator__username", "tiers"
    )
    for prompt_id, username, tiers in rows:
        by_item[prompt_id][username] = tiers
    return [item for item in by_item.values() if len(item) >= 2]


def project_progress(project: Project) -> ProjectProgress:
    items = Prompt.objects.filter(OPEN_ITEMS, project=project)
    overlap = project.annotators_per_item
    counts = items.aggregate(
        total=Count("pk"),
        done=Count("pk", filter=Q(ranking_count__gte=overlap)),
    )
    in_progress = (
        Assignment.objects.filter(prompt__in=items, status=Assignment.Status.LEASED, expires_at__gt=timezone.now())
        .values("prompt")
        .distinct()
        .count()
    )
    rankings = Ranking.objects.filter(prompt__project=project, skipped=False).count()
    progress = ProjectProgress(
        items=counts["total"], done=counts["done"], in_progress=in_progress, rankings=rankings,
        wanted=counts["total"] * overlap,
    )
    shared = item_rankings(project)
    progress.shared_items = len(shared)
    progress.tau = agreement.mean_kendall_tau(shared)
    progress.pairwise_agreement = agreement.pairwise_agreement_rate(shared)
    progress.alpha = agreement.ranking_alpha(shared)
    majority = agreement.agreement_with_majority(shared)
    seconds: dict[str, list[float]] = defaultdict(list)
    skips: dict[str, int] = defaultdict(int)
    for username, skipped, spent in Ranking.objects.filter(prompt__project=project).values_list(
        "annotator__username", "skipped", "seconds_spent"
    ):
        if skipped:
            skips[username] += 1
        else:
            seconds[username].append(spent)
    progress.annotators = [
        AnnotatorRow(
            username=username,
            rankings=len(seconds[username]),
            skips=skips[username],
            median_seconds=statistics.median(seconds[username]) if seconds[username] else None,
            agreement_with_majority=majority.get(username),
        )
        for username in sorted(seconds.keys() | skips.keys())
    ]
    return progress


@dataclass(frozen=True)
class OwnProgress:
    project: Project
    ranked: int
    available: int


def own_progress(*, user: AbstractBaseUser) -> list[OwnProgress]:
    """Per project of the user: what they ranked and how many items are still open to them (nobody else's)."""
    rows = []
    for project in Project.objects.filter(members=user).order_by("name"):
        ranked = own_ranked_count(project=project, user=user)
        touched = Assignment.objects.filter(annotator=user, prompt__project=project).exclude(
            status=Assignment.Status.LEASED
        )
        available = (
            Prompt.objects.filter(OPEN_ITEMS, project=project, ranking_count__lt=project.annotators_per_item)
            .exclude(pk__in=touched.values("prompt_id"))
            .count()
        )
        rows.append(OwnProgress(project=project, ranked=ranked, available=available))
    return rows


def own_ranked_count(*, project: Project, user: AbstractBaseUser) -> int:
    return Ranking.objects.filter(prompt__project=project, annotator=user, skipped=False).count()


def sampling_jobs(project: Project) -> QuerySet[SamplingJob]:
    return project.sampling_jobs.all()[:10]


# Pairs, rankings and prompts for export and training --------------------------------------------------------

_PAIR_FIELDS = ("prompt__text", "chosen__text", "rejected__text", "weight", "margin", "ranking_id",
                "ranking__annotator__username")


def pair_rows(*, project_id: int, strategy: str = "all") -> Iterator[dict]:
    """TRL rows {prompt, chosen, rejected, weight, margin, ranking_id, annotator}, streamed from the database.

    "all" reads the stored pairs; the other strategies derive pairs from each ranking on the way; imported
    pairs are part of every strategy.
    """
    stored = PreferencePair.objects.filter(project_id=project_id).order_by("id")
    if strategy != "all":
        stored = stored.filter(ranking__isnull=True)
    for prompt, chosen, rejected, weight, margin, ranking_id, annotator in stored.values_list(
        *_PAIR_FIELDS
    ).iterator(chunk_size=2000):
        yield {"prompt": prompt, "chosen": chosen, "rejected": rejected, "weight": weight, "margin": margin,
               "ranking_id": ranking_id, "annotator": annotator}
    if strategy == "all":
        return
    rankings = (
        Ranking.objects.filter(prompt__project_id=project_id, skipped=False, all_bad=False)
        .select_related("prompt", "annotator")
        .order_by("id")
    )
    for ranking in rankings.iterator(chunk_size=500):
        texts = dict(ranking.prompt.responses.values_list("id", "text"))
        for pair in pairs_from_tiers(ranking.tiers, strategy=strategy):
            yield {"prompt": ranking.prompt.text, "chosen": texts[pair.chosen], "rejected": texts[pair.rejected],
                   "weight": pair.weight, "margin": pair.margin, "ranking_id": ranking.pk,
                   "annotator": ranking.annotator.get_username()}


def ranking_rows(*, project_id: int) -> Iterator[dict]:
    """The raw rankings: tiers of response texts (best first) with ids, flags, rationale and time."""
    rankings = (
        Ranking.objects.filter(prompt__project_id=project_id).select_related("prompt", "annotator").order_by("id")
    )
    for ranking in rankings.iterator(chunk_size=500):
        texts = dict(ranking.prompt.responses.values_list("id", "text"))
        yield {
            "ranking_id": ranking.pk,
            "prompt_id": ranking.prompt.external_id,
            "prompt": ranking.prompt.text,
            "annotator": ranking.annotator.get_username(),
            "tiers": [[{"response_id": rid, "text": texts[rid]} for rid in tier] for tier in ranking.tiers],
            "all_bad": ranking.all_bad,
            "skipped": ranking.skipped,
            "rationale": ranking.rationale,
            "seconds_spent": ranking.seconds_spent,
            "created_at": ranking.created_at.isoformat(),
        }


def preference_pairs_for_training(*, project_id: int, strategy: str = "all") -> list[dict]:
    return [
        {key: row[key] for key in ("prompt", "chosen", "rejected", "weight", "margin")}
        for row in pair_rows(project_id=project_id, strategy=strategy)
    ]


def prompts_for_training(*, project_id: int) -> list[dict]:
    return [
        {"prompt": text, "answer": answer or None, "metadata": metadata}
        for text, answer, metadata in Prompt.objects.filter(project_id=project_id)
        .order_by("id")
        .values_list("text", "reference_answer", "metadata")
    ]


def projects_for_training() -> list[tuple[int, str, int, int]]:
    """(id, name, pair_count, prompt_count) for the launch form's data-source menu."""
    projects = Project.objects.annotate(
        pair_count=Count("pairs", distinct=True), prompt_count=Count("prompts", distinct=True)
    ).order_by("name")
    return [(p.pk, p.name, p.pair_count, p.prompt_count) for p in projects]
