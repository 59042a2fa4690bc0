"""Reads of the annotation app: what an annotator sees, progress and agreement, and the training/export rows."""

import dataclasses
import itertools
import random
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.accounts.roles import is_admin, is_researcher
from webapp.annotation import agreement, feedback, winrates
from webapp.annotation.aggregation import aggregate_pairs, aggregation_annotator
from webapp.annotation.exporting import conversational_rows, conversational_unpaired_rows
from webapp.annotation.models import (
    Assignment,
    ImportJob,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    ResponseLabel,
    RewardScore,
    Round,
    RoundScoring,
    SamplingJob,
    SuggestionJob,
)
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels
from webapp.annotation.preferences import LEFT_OUT_TEXT_REGEX, ranking_pairs
from webapp.text import BLANK_TEXT_REGEX, counted, is_blank

OPEN_ITEMS = Q(annotatable=True, response_count__gte=2)


def projects_visible_to(user: AbstractBaseUser) -> QuerySet[Project]:
    """The one rule of who reaches a project (its pages, fragments, exports, API, sampling and import jobs, the runs
    on its data): an admin every project; a researcher those they own or were added to as a member; an annotator
    those they were added to (to annotate). Anything else is answered 404, as a project that does not exist."""
    if is_admin(user):
        return Project.objects.all()
    membership = Project.members.through.objects.filter(user_id=user.pk).values("project_id")
    if is_researcher(user):
        return Project.objects.filter(Q(owner_id=user.pk) | Q(pk__in=membership))
    return Project.objects.filter(pk__in=membership)


def project_list(user: AbstractBaseUser, *, archived: bool = False) -> QuerySet[Project]:
    """The projects page's rows: the projects `user` reaches, not archived (or only the archived ones), with their
    open items counted."""
    return projects_visible_to(user).filter(archived_at__isnull=not archived).annotate(
        item_count=Count("prompts", filter=Q(prompts__annotatable=True), distinct=True)
    )


def responses_shown(*, prompt: Prompt, annotator: AbstractBaseUser) -> list[Response]:
    """The responses one annotator sees for an item, in an order of their own (stable across reloads)."""
    project = prompt.project
    count = annotation_mode(project.mode).responses_shown(project.responses_per_item)
    return _in_annotators_order(list(prompt.responses.order_by("id")[:count]), prompt_id=prompt.pk,
                                annotator=annotator)


def _in_annotators_order(responses: list[Response], *, prompt_id: int, annotator: AbstractBaseUser) -> list[Response]:
    random.Random(f"{annotator.pk}:{prompt_id}").shuffle(responses)
    return responses


def items_for_annotator(*, project: Project, annotator: AbstractBaseUser) -> QuerySet[Prompt]:
    """Every item of the project offered for ranking, in id order, with its responses and `annotator`'s answer
    (`own_answers`, a list of at most one) fetched along: `item_responses_shown` gives what they are shown."""
    answers = Ranking.objects.filter(annotator=annotator).prefetch_related("labels")
    return (Prompt.objects.filter(project=project, annotatable=True).order_by("id")
            .prefetch_related(Prefetch("responses", queryset=Response.objects.order_by("id")),
                              Prefetch("rankings", queryset=answers, to_attr="own_answers")))


def item_responses_shown(prompt: Prompt, *, project: Project, annotator: AbstractBaseUser) -> list[Response]:
    """`responses_shown` of an item from `items_for_annotator`, from its fetched responses."""
    count = annotation_mode(project.mode).responses_shown(project.responses_per_item)
    return _in_annotators_order(list(prompt.responses.all())[:count], prompt_id=prompt.pk, annotator=annotator)


# Progress and agreement -------------------------------------------------------------------------------------


@dataclass
class AnnotatorRow:
    username: str
    rankings: int
    skips: int
    median_seconds: float | None
    agreement_with_majority: float | None
    all_bad: int = 0


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
    # thumbs and ratings: Krippendorff's alpha over their labels (None for the modes that rank)
    label_agreement: agreement.LabelAgreement | None = None
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
    progress.annotators = annotator_rows(project, shared=shared)
    progress.label_agreement = label_agreement(project)
    return progress


def annotator_rows(project: Project, *, shared: list[dict[str, list[list[int]]]] | None = None) -> list[AnnotatorRow]:
    """Per annotator of the project: answers, skips, all-bad answers, median time, agreement with the majority."""
    majority = agreement.agreement_with_majority(item_rankings(project) if shared is None else shared)
    seconds: dict[str, list[float]] = defaultdict(list)
    skips: dict[str, int] = defaultdict(int)
    all_bad: dict[str, int] = defaultdict(int)
    for username, skipped, bad, spent in Ranking.objects.filter(prompt__project=project).values_list(
        "annotator__username", "skipped", "all_bad", "seconds_spent"
    ):
        if skipped:
            skips[username] += 1
        else:
            seconds[username].append(spent)
            all_bad[username] += bad
    return [
        AnnotatorRow(
            username=username,
            rankings=len(seconds[username]),
            skips=skips[username],
            median_seconds=statistics.median(seconds[username]) if seconds[username] else None,
            agreement_with_majority=majority.get(username),
            all_bad=all_bad[username],
        )
        for username in sorted(seconds.keys() | skips.keys())
    ]


@dataclass(frozen=True)
class OwnProgress:
    project: Project
    ranked: int
    available: int


def own_progress(*, user: AbstractBaseUser) -> list[OwnProgress]:
    """Per project of the user (not archived): what they ranked and how many items are still open to them (nobody
    else's)."""
    rows = []
    for project in Project.objects.filter(members=user, archived_at__isnull=True).order_by("name"):
        ranked = own_ranked_count(project=project, user=user)
        # every answer is a Ranking row, kept while its item is reopened by Back
        answered = Ranking.objects.filter(annotator=user, prompt__project=project)
        available = (
            Prompt.objects.filter(OPEN_ITEMS, project=project, ranking_count__lt=project.annotators_per_item)
            .exclude(pk__in=answered.values("prompt_id"))
            .count()
        )
        rows.append(OwnProgress(project=project, ranked=ranked, available=available))
    return rows


def own_ranked_count(*, project: Project, user: AbstractBaseUser) -> int:
    """The user's rankings in the project, skips aside; a ranking reopened by Back counts until it is replaced."""
    return Ranking.objects.filter(prompt__project=project, annotator=user, skipped=False).count()


def previous_answer(*, project: Project, user: AbstractBaseUser) -> Ranking | None:
    """The user's latest answer (ranking or skip) in the project that Back may reopen: given within the project's
    lease time (services.ranking_withdraw holds the same rule) and not reopened already, so a second Back reopens
    the answer before it."""
    since = timezone.now() - timedelta(minutes=project.lease_minutes)
    return (
        Ranking.objects.filter(prompt__project=project, annotator=user, created_at__gte=since)
        .exclude(assignment__status=Assignment.Status.LEASED)
        .select_related("prompt")
        .order_by("-created_at", "-id")
        .first()
    )


def reopened_answer(*, assignment: Assignment) -> Ranking | None:
    """The answer kept on an item that Back reopened (shown filled in until a new answer replaces it); None for an
    item not answered before."""
    if assignment.status != Assignment.Status.LEASED:
        return None
    return Ranking.objects.filter(assignment=assignment).first()


def answer_labels(*, ranking_id: int) -> Labels:
    """The labels of one answer in a labels mode (thumbs, ratings): response id -> aspect -> value."""
    labels: Labels = {}
    for response, aspect, value in ResponseLabel.objects.filter(ranking_id=ranking_id).values_list(
        "response_id", "aspect", "value"
    ):
        labels.setdefault(response, {})[aspect] = value
    return labels


def response_texts(*, prompt_id: int) -> dict[int, str]:
    """The prompt's responses' texts by id: what `preferences.ranking_pairs` reads beside a ranking's tiers."""
    return dict(Response.objects.filter(prompt_id=prompt_id).values_list("id", "text"))


def rankings_with_pairs(*, project_id: int) -> QuerySet[Ranking]:
    """The project's rankings that can yield pairs, oldest first: a skip ranks nothing, and an all-bad answer is one
    tier (no pair either way; these are left out only to spare the work)."""
    return Ranking.objects.filter(prompt__project_id=project_id, skipped=False, all_bad=False,
                                  held_back=False).order_by("id")


@dataclass(frozen=True)
class ProjectData:
    """What a project holds beyond progress: pairs by origin and the empty responses left out of pairs."""

    items: int
    awaiting_responses: int
    imported_pairs: int
    ranking_pairs: int
    empty_responses: int
    # a thumbs or ratings project's labels (thumbs, or one rating a response and aspect), given in answers and
    # imported, and the training rows they make (None in a ranking mode): ratings' binarized pairs, KTO rows
    labels_given: int = 0
    labels_imported: int = 0
    binarized_pairs: int | None = None
    unpaired_rows: int | None = None


def project_data(project: Project) -> ProjectData:
    items = Prompt.objects.filter(project=project, annotatable=True).aggregate(
        total=Count("pk"), awaiting=Count("pk", filter=Q(response_count__lt=2))
    )
    pairs = PreferencePair.objects.filter(project=project).aggregate(
        imported=Count("pk", filter=Q(ranking__isnull=True)), ranked=Count("pk", filter=Q(ranking__isnull=False))
    )
    empty = Response.objects.filter(prompt__project=project, text__regex=LEFT_OUT_TEXT_REGEX).count()
    data = ProjectData(items=items["total"], awaiting_responses=items["awaiting"], imported_pairs=pairs["imported"],
                       ranking_pairs=pairs["ranked"], empty_responses=empty)
    if not annotation_mode(project.mode).gives_labels:
        return data
    labels = ResponseLabel.objects.filter(project=project).aggregate(
        given=Count("pk", filter=Q(ranking__isnull=False)), imported=Count("pk", filter=Q(ranking__isnull=True)))
    binarized = (sum(1 for _ in binarized_pair_rows(project_id=project.pk))
                 if project.mode == Project.Mode.RATINGS else None)
    return dataclasses.replace(data, labels_given=labels["given"], labels_imported=labels["imported"],
                               binarized_pairs=binarized, unpaired_rows=unpaired_count(project_id=project.pk))


def sampling_jobs(project: Project) -> QuerySet[SamplingJob]:
    return project.sampling_jobs.all()[:10]


# Pairs, rankings and prompts for export and training --------------------------------------------------------

_PAIR_FIELDS = ("prompt_id", "prompt__text", "prompt__messages", "chosen__text", "rejected__text", "weight",
                "margin", "ranking_id", "ranking__annotator__username")
# each answer's round (its number in the project, None for an imported one) and the model its round names
_PAIR_ROUND_FIELDS = ("chosen__round__number", "rejected__round__number", "chosen__round__model",
                      "rejected__round__model")


def _pair_rounds(chosen_round: int | None, rejected_round: int | None, chosen_model: str | None,
                 rejected_model: str | None) -> dict:
    return {"chosen_round": chosen_round, "rejected_round": rejected_round, "chosen_model": chosen_model or "",
            "rejected_model": rejected_model or ""}


def response_rounds(*, prompt_id: int) -> dict[int, tuple[int | None, str | None]]:
    """The prompt's responses' (round number, round model) by id, for the pair rows derived on the way."""
    return {pk: (number, model) for pk, number, model in
            Response.objects.filter(prompt_id=prompt_id).values_list("pk", "round__number", "round__model")}


def chat_sampled_prompt_ids(*, project_id: int) -> set[int]:
    """Text prompts whose responses a model sampled through its chat template (as one user turn)."""
    return set(
        Response.objects.filter(prompt__project_id=project_id, source_detail__chat_template=True)
        .values_list("prompt_id", flat=True)
        .distinct()
    )


def trl_prompt(text: str, messages: list[dict] | None, *, chat_sampled: bool = False) -> str | list[dict]:
    """A prompt as TRL takes it: its messages when it is a conversation (conversational format), else its text.
    A text prompt whose responses were sampled as one user turn is trained as that turn, so the model trains on
    the ids it was sampled with."""
    if messages:
        return messages
    return [{"role": "user", "content": text}] if chat_sampled else text


def trl_answer(text: str, *, conversational: bool) -> str | list[dict]:
    """A response as TRL takes it: one assistant message after a conversational prompt, else its text."""
    return [{"role": "assistant", "content": text}] if conversational else text


def _trl_pair(text: str, messages: list[dict] | None, chosen: str, rejected: str, *, chat_sampled: bool) -> dict:
    prompt = trl_prompt(text, messages, chat_sampled=chat_sampled)
    conversational = not isinstance(prompt, str)
    return {"prompt": prompt, "chosen": trl_answer(chosen, conversational=conversational),
            "rejected": trl_answer(rejected, conversational=conversational)}


def project_has_conversations(*, project_id: int) -> bool:
    """Whether a TRL export of the project is conversational: a prompt is a conversation, or was sampled as one."""
    return (
        Prompt.objects.filter(project_id=project_id, messages__isnull=False).exists()
        or Response.objects.filter(prompt__project_id=project_id, source_detail__chat_template=True).exists()
    )


def _exportable_pairs(project_id: int) -> QuerySet[PreferencePair]:
    # Pairs stored before empty responses were left out of pairs may still hold one: never export them.
    return (
        PreferencePair.objects.filter(project_id=project_id)
        .exclude(ranking__held_back=True)
        .exclude(chosen__text__regex=LEFT_OUT_TEXT_REGEX)
        .exclude(rejected__text__regex=LEFT_OUT_TEXT_REGEX)
        .order_by("id")
    )


def pair_rows(*, project_id: int, strategy: str = "all", aggregation: str = "all",
              binarization: str = feedback.DEFAULT_BINARIZATION, seed: int = feedback.DEFAULT_SEED) -> Iterator[dict]:
    """The project's pair rows under `strategy`, aggregated across annotators by `aggregation`
    (webapp.annotation.aggregation: all, majority, drop_conflicts, annotator:<username>); ratings become pairs by
    `binarization` and `seed` (webapp.annotation.feedback), after the pairs of rankings and imports."""
    feedback.binarization_check(binarization, seed)
    rows = itertools.chain(_strategy_pair_rows(project_id=project_id, strategy=strategy),
                           binarized_pair_rows(project_id=project_id, aggregation=aggregation,
                                               binarization=binarization, seed=seed))
    return aggregate_pairs(rows, aggregation)


def _strategy_pair_rows(*, project_id: int, strategy: str) -> Iterator[dict]:
    """TRL rows {prompt, chosen, rejected, weight, margin, ranking_id, annotator}, streamed from the database:
    conversational (prompt = its messages, chosen/rejected = one assistant message each) when the prompt is a
    conversation, standard (text) otherwise.

    "all" reads the stored pairs; the other strategies derive pairs from each ranking on the way, by the same rule
    (`preferences.ranking_pairs`); imported pairs are part of every strategy. No pair involves an empty
    (whitespace-only) response.
    """
    stored = _exportable_pairs(project_id)
    if strategy != "all":
        stored = stored.filter(ranking__isnull=True)
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    for (prompt_id, text, messages, chosen, rejected, weight, margin, ranking_id, annotator,
         *rounds) in stored.values_list(*_PAIR_FIELDS, *_PAIR_ROUND_FIELDS).iterator(chunk_size=2000):
        yield {**_trl_pair(text, messages, chosen, rejected, chat_sampled=prompt_id in chat_sampled),
               "weight": weight, "margin": margin, "ranking_id": ranking_id, "annotator": annotator,
               **_pair_rounds(*rounds)}
    if strategy == "all":
        return
    rankings = rankings_with_pairs(project_id=project_id).select_related("prompt", "annotator")
    for ranking in rankings.iterator(chunk_size=500):
        texts = response_texts(prompt_id=ranking.prompt_id)
        rounds = response_rounds(prompt_id=ranking.prompt_id)
        for pair in ranking_pairs(ranking.tiers, texts, strategy=strategy):
            (chosen_round, chosen_model), (rejected_round, rejected_model) = rounds[pair.chosen], rounds[pair.rejected]
            yield {**_trl_pair(ranking.prompt.text, ranking.prompt.messages, texts[pair.chosen], texts[pair.rejected],
                               chat_sampled=ranking.prompt_id in chat_sampled),
                   "weight": pair.weight, "margin": pair.margin, "ranking_id": ranking.pk,
                   "annotator": ranking.annotator.get_username(),
                   **_pair_rounds(chosen_round, rejected_round, chosen_model, rejected_model)}


def pair_count(*, project_id: int, strategy: str = "all", aggregation: str = "all",
               binarization: str = feedback.DEFAULT_BINARIZATION, seed: int = feedback.DEFAULT_SEED) -> int:
    """How many rows `pair_rows` yields: counted by the database for the stored pairs, by deriving them for the
    other strategies and aggregations (and for ratings, whose pairs are derived)."""
    if strategy == "all" and aggregation == "all":
        binarized = binarized_pair_rows(project_id=project_id, binarization=binarization, seed=seed)
        return _exportable_pairs(project_id).count() + sum(1 for _ in binarized)
    return sum(1 for _ in pair_rows(project_id=project_id, strategy=strategy, aggregation=aggregation,
                                    binarization=binarization, seed=seed))


def pair_export_rows(
    *, project_id: int, strategy: str = "all", aggregation: str = "all", conversational: bool | None = None,
    binarization: str = feedback.DEFAULT_BINARIZATION, seed: int = feedback.DEFAULT_SEED,
) -> Iterator[dict]:
    """The rows of the pairs' JSONL export, the page's and the API's: all in TRL's conversational format when the
    project holds any conversation (or `conversational` says so), else as `pair_rows` yields them."""
    if conversational is None:
        conversational = project_has_conversations(project_id=project_id)
    rows = pair_rows(project_id=project_id, strategy=strategy, aggregation=aggregation, binarization=binarization,
                     seed=seed)
    return conversational_rows(rows) if conversational else rows


def ranking_count(*, project_id: int) -> int:
    """How many rows `ranking_rows` yields."""
    return Ranking.objects.filter(prompt__project_id=project_id).count()


def ranking_rows(*, project_id: int) -> Iterator[dict]:
    """The raw answers: tiers of response texts (best first) with ids, or in the thumbs and ratings modes their
    labels (tiers empty), with flags, rationale and time."""
    rankings = (
        Ranking.objects.filter(prompt__project_id=project_id).select_related("prompt", "annotator").order_by("id")
        .prefetch_related(Prefetch("labels", queryset=ResponseLabel.objects.order_by("id")))
    )
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    for ranking in rankings.iterator(chunk_size=500):
        texts = dict(ranking.prompt.responses.values_list("id", "text"))
        yield {
            "ranking_id": ranking.pk,
            "prompt_id": ranking.prompt.external_id,
            "prompt": trl_prompt(ranking.prompt.text, ranking.prompt.messages,
                                 chat_sampled=ranking.prompt_id in chat_sampled),
            "annotator": ranking.annotator.get_username(),
            "tiers": [[{"response_id": rid, "text": texts[rid]} for rid in tier] for tier in ranking.tiers],
            "labels": [{"response_id": label.response_id, "text": texts[label.response_id], "aspect": label.aspect,
                        "value": label.value} for label in ranking.labels.all()],
            "all_bad": ranking.all_bad,
            "skipped": ranking.skipped,
            "rationale": ranking.rationale,
            "seconds_spent": ranking.seconds_spent,
            "created_at": ranking.created_at.isoformat(),
        }


def project_prompts(*, project_id: int) -> QuerySet[Prompt]:
    """A project's prompts, oldest first, each with its responses in the order they were added."""
    responses = Prefetch("responses", queryset=Response.objects.select_related("round").order_by("id"))
    return Prompt.objects.filter(project_id=project_id).order_by("id").prefetch_related(responses)


def preference_pairs_for_training(*, project_id: int, strategy: str = "all", aggregation: str = "all",
                                  binarization: str = feedback.DEFAULT_BINARIZATION,
                                  seed: int = feedback.DEFAULT_SEED) -> list[dict]:
    return [
        {key: row[key] for key in ("prompt", "chosen", "rejected", "weight", "margin", "chosen_round",
                                   "rejected_round", "chosen_model", "rejected_model")}
        for row in pair_rows(project_id=project_id, strategy=strategy, aggregation=aggregation,
                             binarization=binarization, seed=seed)
    ]


# Thumbs and ratings as training data (the rules: webapp.annotation.feedback) -----------------------------------

# Labels that count: imported ones, and those of answers that were neither skips nor held back (a paused annotator's).
_COUNTED_LABELS = Q(ranking__isnull=True) | Q(ranking__skipped=False, ranking__held_back=False)
# Prompts handled at a time when deriving rows from labels: one query each for their texts, not one per prompt.
_LABEL_PROMPT_BATCH = 500


def _labels(project_id: int, *, thumbs: bool, annotator: str | None = None) -> QuerySet[ResponseLabel]:
    labels = ResponseLabel.objects.filter(_COUNTED_LABELS, project_id=project_id)
    labels = labels.filter(aspect=ResponseLabel.THUMB) if thumbs else labels.exclude(aspect=ResponseLabel.THUMB)
    if annotator is not None:
        labels = labels.filter(Q(annotator__username=annotator)
                               | Q(annotator__isnull=True, external_annotator=annotator))
    return labels


def _label_annotator(username: str | None, external: str) -> str | None:
    """Who gave a label: the annotator's username, else the imported name (None when the file named nobody)."""
    return username or external or None


@dataclass(frozen=True)
class _ItemTexts:
    prompt: str
    messages: list[dict] | None
    external_id: str
    chat_sampled: bool
    responses: dict[int, tuple[str, int | None, str | None]]  # id -> (text, round number, round model)

    @property
    def left_out(self) -> set[int]:
        return feedback.left_out_responses({pk: text for pk, (text, _, _) in self.responses.items()})


def _item_texts(prompt_ids: Sequence[int], *, chat_sampled: set[int]) -> dict[int, _ItemTexts]:
    responses: dict[int, dict[int, tuple[str, int | None, str | None]]] = defaultdict(dict)
    for pk, prompt_id, text, number, model in Response.objects.filter(prompt_id__in=prompt_ids).values_list(
        "pk", "prompt_id", "text", "round__number", "round__model"
    ):
        responses[prompt_id][pk] = (text, number, model)
    return {pk: _ItemTexts(prompt=text, messages=messages, external_id=external_id, chat_sampled=pk in chat_sampled,
                           responses=responses[pk])
            for pk, text, messages, external_id in Prompt.objects.filter(pk__in=prompt_ids).values_list(
                "pk", "text", "messages", "external_id")}


def _binarized_pairs(
    project_id: int, *, annotator: str | None, binarization: str, seed: int
) -> Iterator[tuple[_ItemTexts, feedback.BinarizedPair]]:
    """Each rated item's binarized pair, by prompt id, with its texts; `annotator`: that annotator's ratings only."""
    feedback.binarization_check(binarization, seed)
    labels = _labels(project_id, thumbs=False, annotator=annotator).order_by("prompt_id", "id").values_list(
        "prompt_id", "response_id", "value")
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    by_item = itertools.groupby(labels.iterator(chunk_size=5000), key=lambda label: label[0])
    while batch := [(prompt_id, [feedback.Rating(response, value) for _, response, value in group])
                    for prompt_id, group in itertools.islice(by_item, _LABEL_PROMPT_BATCH)]:
        texts = _item_texts([prompt_id for prompt_id, _ in batch], chat_sampled=chat_sampled)
        for prompt_id, ratings in batch:
            item = texts[prompt_id]
            pair = feedback.binarize_ratings(item.external_id, ratings, left_out=item.left_out,
                                             binarization=binarization, seed=seed)
            if pair is not None:
                yield item, pair


def binarized_pair_rows(*, project_id: int, aggregation: str = "all",
                        binarization: str = feedback.DEFAULT_BINARIZATION,
                        seed: int = feedback.DEFAULT_SEED) -> Iterator[dict]:
    """The project's ratings as pair rows (the columns of `pair_rows`, ranking_id None): one pair a rated item,
    from everyone's ratings, or from one annotator's under `annotator:<username>` (the row then names them)."""
    annotator = aggregation_annotator(aggregation)
    for item, pair in _binarized_pairs(project_id, annotator=annotator, binarization=binarization, seed=seed):
        (chosen, chosen_round, chosen_model), (rejected, rejected_round, rejected_model) = (
            item.responses[pair.chosen], item.responses[pair.rejected])
        yield {**_trl_pair(item.prompt, item.messages, chosen, rejected, chat_sampled=item.chat_sampled),
               "weight": pair.weight, "margin": pair.margin, "ranking_id": None, "annotator": annotator,
               **_pair_rounds(chosen_round, rejected_round, chosen_model, rejected_model)}


def _unpaired_labels(project_id: int, *, annotator: str | None, binarization: str,
                     seed: int) -> Iterator[feedback.UnpairedLabel]:
    """Every unpaired row of the project in ids, before aggregation: thumbs, answers' tiers, binarized ratings,
    imported pairs (feedback's rules)."""
    for response, value, username, external in _labels(project_id, thumbs=True).order_by("id").values_list(
        "response_id", "value", "annotator__username", "external_annotator"
    ):
        yield feedback.thumb_label(response, value, annotator=_label_annotator(username, external))
    left_out = set(Response.objects.filter(prompt__project_id=project_id, text__regex=LEFT_OUT_TEXT_REGEX)
                   .values_list("pk", flat=True))
    answers = Ranking.objects.filter(prompt__project_id=project_id, skipped=False).exclude(tiers=[]).order_by("id")
    for tiers, all_bad, username, mode in answers.values_list("tiers", "all_bad", "annotator__username",
                                                              "prompt__project__mode").iterator(chunk_size=2000):
        yield from feedback.tier_labels(tiers, all_bad=all_bad, annotator=username, left_out=left_out,
                                        source="pairwise" if mode == "pairwise" else "ranking")
    for _, pair in _binarized_pairs(project_id, annotator=annotator, binarization=binarization, seed=seed):
        yield from feedback.pair_labels(pair.chosen, pair.rejected, annotator=annotator, source="ratings")
    for chosen, rejected in _exportable_pairs(project_id).filter(ranking__isnull=True).values_list(
        "chosen_id", "rejected_id"
    ):
        yield from feedback.pair_labels(chosen, rejected, annotator=None, source="pairs")


def unpaired_rows(*, project_id: int, aggregation: str = "all", binarization: str = feedback.DEFAULT_BINARIZATION,
                  seed: int = feedback.DEFAULT_SEED) -> Iterator[dict]:
    """The project's KTO rows, TRL's unpaired format {prompt, completion, label} with annotator, response_id,
    source (thumbs, ranking, pairwise, ratings or pairs: where the row came from), and the response's round (its
    number, None when it came in no round) and model (its round's, "" when unknown): conversational (prompt = its
    messages, completion = one assistant message) when the prompt is a conversation, standard text otherwise.
    `aggregation` combines annotators (feedback.aggregate_unpaired), `binarization` and `seed` make ratings pairs."""
    feedback.binarization_check(binarization, seed)
    labels = feedback.aggregate_unpaired(
        _unpaired_labels(project_id, annotator=aggregation_annotator(aggregation), binarization=binarization,
                         seed=seed), aggregation)
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    while batch := list(itertools.islice(labels, 2000)):
        responses = {pk: (prompt_id, text, number, model) for pk, prompt_id, text, number, model in
                     Response.objects.filter(pk__in={label.response for label in batch}).values_list(
                         "pk", "prompt_id", "text", "round__number", "round__model")}
        prompts = {pk: (text, messages) for pk, text, messages in Prompt.objects.filter(
            pk__in={prompt_id for prompt_id, *_ in responses.values()}).values_list("pk", "text", "messages")}
        for label in batch:
            prompt_id, completion, round_number, model = responses[label.response]
            prompt = trl_prompt(*prompts[prompt_id], chat_sampled=prompt_id in chat_sampled)
            yield {"prompt": prompt, "completion": trl_answer(completion, conversational=not isinstance(prompt, str)),
                   "label": label.label, "annotator": label.annotator, "response_id": label.response,
                   "source": label.source, "round": round_number, "model": model or ""}


def unpaired_count(*, project_id: int, aggregation: str = "all", binarization: str = feedback.DEFAULT_BINARIZATION,
                   seed: int = feedback.DEFAULT_SEED) -> int:
    """How many rows `unpaired_rows` yields (derived: they are not stored)."""
    return sum(1 for _ in feedback.aggregate_unpaired(
        _unpaired_labels(project_id, annotator=aggregation_annotator(aggregation), binarization=binarization,
                         seed=seed), aggregation))


def unpaired_export_rows(*, project_id: int, aggregation: str = "all", conversational: bool | None = None,
                         binarization: str = feedback.DEFAULT_BINARIZATION,
                         seed: int = feedback.DEFAULT_SEED) -> Iterator[dict]:
    """The unpaired exports' rows (page and API): all conversational when the project holds any conversation."""
    if conversational is None:
        conversational = project_has_conversations(project_id=project_id)
    rows = unpaired_rows(project_id=project_id, aggregation=aggregation, binarization=binarization, seed=seed)
    return conversational_unpaired_rows(rows) if conversational else rows


def unpaired_for_training(*, project_id: int, aggregation: str = "all",
                          binarization: str = feedback.DEFAULT_BINARIZATION,
                          seed: int = feedback.DEFAULT_SEED) -> list[dict]:
    """A KTO run's rows: {prompt, completion, label}."""
    return [{key: row[key] for key in ("prompt", "completion", "label")}
            for row in unpaired_rows(project_id=project_id, aggregation=aggregation, binarization=binarization,
                                     seed=seed)]


def label_rows(*, project_id: int) -> Iterator[dict]:
    """The raw thumbs and ratings (labels.jsonl), oldest first: a thumb has aspect "" and value 1 (up) or 0 (down),
    a rating its aspect and value; ranking_id is the answer it was given in (None: imported)."""
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    labels = ResponseLabel.objects.filter(_COUNTED_LABELS, project_id=project_id).order_by("id").values_list(
        "prompt_id", "prompt__external_id", "prompt__text", "prompt__messages", "response_id", "response__text",
        "annotator__username", "external_annotator", "aspect", "value", "ranking_id", "created_at")
    for (prompt_id, external_id, text, messages, response_id, response, username, external, aspect, value,
         ranking_id, created_at) in labels.iterator(chunk_size=2000):
        yield {"prompt_id": external_id, "prompt": trl_prompt(text, messages, chat_sampled=prompt_id in chat_sampled),
               "response_id": response_id, "response": response,
               "annotator": _label_annotator(username, external), "aspect": aspect, "value": value,
               "ranking_id": ranking_id, "created_at": created_at.isoformat()}


def label_agreement(project: Project) -> agreement.LabelAgreement | None:
    """Thumbs: Krippendorff's alpha, nominal, a unit per response; ratings: alpha, interval, a unit per (response,
    aspect); None for the modes that rank (their figures are the rankings')."""
    if project.mode not in ("thumbs", "ratings"):
        return None
    thumbs = project.mode == "thumbs"
    labels = _labels(project.pk, thumbs=thumbs).values_list("prompt_id", "response_id", "aspect", "value")
    return agreement.label_alpha(((prompt_id, (response, aspect), value) for prompt_id, response, aspect, value
                                  in labels.iterator(chunk_size=5000)),
                                 metric="nominal" if thumbs else "interval")


def pair_annotators(*, project_id: int) -> list[str]:
    """The usernames of the project's annotators who gave pairs (or thumbs, ratings): the `annotator:<username>`
    aggregations offered."""
    ranked = set(PreferencePair.objects.filter(project_id=project_id, ranking__isnull=False)
                 .values_list("ranking__annotator__username", flat=True))
    labelled = set(ResponseLabel.objects.filter(project_id=project_id, annotator__isnull=False)
                   .values_list("annotator__username", flat=True))
    return sorted(ranked | labelled)


def prompts_for_training(*, project_id: int) -> list[dict]:
    """Online runs' rows: a conversation stays its messages (TRL's conversational prompt), a text prompt text
    (one user turn when its responses were sampled as one)."""
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    return [
        {"prompt": trl_prompt(text, messages, chat_sampled=prompt_id in chat_sampled), "answer": answer or None,
         "metadata": metadata}
        for prompt_id, text, messages, answer, metadata in Prompt.objects.filter(project_id=project_id,
                                                                                  origin__isnull=True)
        .order_by("id")
        .values_list("id", "text", "messages", "reference_answer", "metadata")
    ]


def training_prompt_count(*, project_id: int) -> int:
    """How many rows `prompts_for_training` gives."""
    return Prompt.objects.filter(project_id=project_id, origin__isnull=True).count()


def training_prompt_with_answer_count(*, project_id: int) -> int:
    """How many rows of `prompts_for_training` hold an answer (a reference answer that is not empty)."""
    return Prompt.objects.filter(project_id=project_id).exclude(reference_answer="").count()


def prompts_to_sample(*, project_id: int, responses_per_prompt: int) -> list[Prompt]:
    """A sampling job's prompts: the annotatable ones with fewer than `responses_per_prompt` responses."""
    return list(
        Prompt.objects.filter(project_id=project_id, annotatable=True, response_count__lt=responses_per_prompt)
        .order_by("id")
    )


def prompts_to_sample_for_round(*, round_id: int) -> list[Prompt]:
    """A round's sampling prompts: the project's own prompts (not the items rounds made from them, nor imported
    pairs) that hold no response of the round yet, so a resumed job samples none twice."""
    round_ = Round.objects.get(pk=round_id)
    done = set(Response.objects.filter(round=round_, copy_of__isnull=True).annotate(
        original=Coalesce("prompt__origin_id", "prompt_id")).values_list("original", flat=True))
    prompts = Prompt.objects.filter(project_id=round_.project_id, annotatable=True, origin__isnull=True)
    return [prompt for prompt in prompts.order_by("id") if prompt.pk not in done]


def projects_for_training(user: AbstractBaseUser) -> list[tuple[int, str, str, int]]:
    """(id, name, what feedback it holds in words, prompt_count) of the projects `user` reaches, for the launch
    form's data-source menu: a ranking project's stored pairs, a thumbs or ratings project's labelled responses."""
    projects = projects_visible_to(user).annotate(
        pair_count=Count("pairs", distinct=True), prompt_count=Count("prompts", distinct=True),
        labelled_count=Count("labels__response", distinct=True),
    ).order_by("name")
    return [(p.pk, p.name, _feedback_held(p), p.prompt_count) for p in projects]


def _feedback_held(project: Project) -> str:
    if project.mode == "thumbs":
        return counted(project.labelled_count, "response") + " with thumbs"
    if project.mode == "ratings":
        return counted(project.labelled_count, "rated response")
    return counted(project.pair_count, "pair")


def pair_annotators_for_training(user: AbstractBaseUser) -> list[str]:
    """The usernames who gave pairs in the projects `user` reaches: the launch form's `annotator:<username>`
    aggregations."""
    return sorted(
        PreferencePair.objects.filter(project__in=projects_visible_to(user), ranking__isnull=False)
        .values_list("ranking__annotator__username", flat=True)
        .distinct()
    )


# The items view: a project's prompts with their answers, filtered, searched and opened one by one ----------

ITEM_STATUSES = {
    "all": "All",
    "unranked": "Unranked",
    "ranked": "Ranked",
    "skipped": "Skipped",
    "all_bad": "All bad",
    "disputed": "Disputed",
}


def _answers_by_item(rankings: QuerySet[Ranking]) -> dict[int, list[frozenset[int] | str]]:
    answers: dict[int, list[frozenset[int] | str]] = defaultdict(list)
    for prompt_id, tiers, all_bad in rankings.filter(skipped=False).values_list("prompt_id", "tiers", "all_bad"):
        answers[prompt_id].append(agreement.best_answer(tiers, all_bad=all_bad))
    return answers


def disputed_item_ids(*, project: Project, among: QuerySet[Prompt] | None = None) -> set[int]:
    """Items whose answers (skips excluded) disagree on the best response; see agreement.py for the rule."""
    items = among if among is not None else Prompt.objects.filter(project=project)
    rankings = Ranking.objects.filter(prompt__in=items.filter(ranking_count__gte=2).values("pk"))
    return {prompt_id for prompt_id, answers in _answers_by_item(rankings).items() if agreement.is_disputed(answers)}


def project_items(
    *, project: Project, status: str = "all", search: str = "", annotator: str = ""
) -> QuerySet[Prompt]:
    """The project's items (imported pairs are not items), oldest first; `item_rows` counts a page's answers.

    Statuses overlap: an item one person skipped and another ranked is both "skipped" and "ranked".
    unranked: no ranking yet (skips aside); ranked: one ranking or more; skipped / all_bad: someone skipped it
    or called every response bad; disputed: its answers disagree on the best response.
    """
    items = Prompt.objects.filter(project=project, annotatable=True)
    if status == "unranked":
        items = items.filter(ranking_count=0)
    elif status == "ranked":
        items = items.filter(ranking_count__gte=1)
    elif status == "skipped":
        items = items.filter(Exists(Ranking.objects.filter(prompt=OuterRef("pk"), skipped=True)))
    elif status == "all_bad":
        items = items.filter(Exists(Ranking.objects.filter(prompt=OuterRef("pk"), all_bad=True, skipped=False)))
    elif status == "disputed":
        items = items.filter(pk__in=disputed_item_ids(project=project, among=items))
    if search.strip():
        text = search.strip()
        items = items.filter(
            Q(text__icontains=text) | Q(pk__in=Response.objects.filter(text__icontains=text).values("prompt_id"))
        )
    if annotator.strip():
        items = items.filter(
            Exists(Ranking.objects.filter(prompt=OuterRef("pk"), annotator__username=annotator.strip()))
        )
    return items.order_by("id")


def item_count(project: Project) -> int:
    return Prompt.objects.filter(project=project, annotatable=True).count()


@dataclass(frozen=True)
class ItemRow:
    prompt: Prompt
    skips: int
    all_bad: int
    empty_responses: int
    disputed: bool


def item_rows(*, project: Project, prompts: Sequence[Prompt]) -> list[ItemRow]:
    """A page of the items list with its counts: computed for the page alone, not for the whole project."""
    shown = Prompt.objects.filter(pk__in=[prompt.pk for prompt in prompts])
    # distinct: the two joins (rankings, responses) multiply each other's rows
    counted = shown.annotate(
        skips=Count("rankings", filter=Q(rankings__skipped=True), distinct=True),
        all_bad_count=Count("rankings", filter=Q(rankings__all_bad=True, rankings__skipped=False), distinct=True),
        empty_responses=Count("responses", filter=Q(responses__text__regex=BLANK_TEXT_REGEX), distinct=True),
    ).select_related("round").order_by("id")
    disputed = disputed_item_ids(project=project, among=shown)
    return [ItemRow(prompt=prompt, skips=prompt.skips, all_bad=prompt.all_bad_count,
                    empty_responses=prompt.empty_responses, disputed=prompt.pk in disputed) for prompt in counted]


@dataclass(frozen=True)
class ItemResponse:
    id: int
    label: str
    text: str
    empty: bool
    round: int | None = None
    model: str = ""
    copy: bool = False


@dataclass(frozen=True)
class ItemAnswer:
    """One annotator's answer to an item: a rank per response (by the item's response order), or a skip."""

    username: str
    skipped: bool
    all_bad: bool
    ranks: list[int | None]
    rationale: str
    seconds: float
    # in the thumbs and ratings modes: per response (the item's response order) its labels in words, "" for none
    labels: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ItemDetail:
    prompt: Prompt
    responses: list[ItemResponse]
    answers: list[ItemAnswer]
    tau: float | None
    pairwise_agreement: float | None
    disputed: bool

    @property
    def rows(self) -> list[tuple[ItemResponse, list[int | str | None]]]:
        """Per response, its rank (or its labels, in the thumbs and ratings modes) by each annotator (columns in the
        order of `answers`)."""
        return [(response, [(answer.labels[index] or None) if answer.labels else answer.ranks[index]
                            for answer in self.answers])
                for index, response in enumerate(self.responses)]


def label_words(aspect: str, value: float) -> str:
    """A label as the item page shows it: a thumb as 👍 / 👎, a rating as "aspect value"."""
    if aspect == ResponseLabel.THUMB:
        return "👍" if value >= 0.5 else "👎"
    return f"{aspect} {value:g}"


def _answer_label_words(prompt: Prompt) -> dict[tuple[int, int], str]:
    """(answer id, response id) -> its labels in words, for the answers to `prompt` given in a labels mode."""
    words: dict[tuple[int, int], list[str]] = defaultdict(list)
    for ranking_id, response_id, aspect, value in ResponseLabel.objects.filter(
        prompt=prompt, ranking__isnull=False
    ).order_by("id").values_list("ranking_id", "response_id", "aspect", "value"):
        words[(ranking_id, response_id)].append(label_words(aspect, value))
    return {key: " · ".join(labels) for key, labels in words.items()}


def item_detail(*, prompt: Prompt) -> ItemDetail:
    """Every annotator's answer to one item side by side, with the item's own agreement figures."""
    responses = [
        ItemResponse(id=response.pk, label=f"R{number}", text=response.text, empty=is_blank(response.text),
                     round=response.round.number if response.round_id else None, model=response.model_name,
                     copy=response.copy_of_id is not None)
        for number, response in enumerate(prompt.responses.select_related("round").order_by("id"), start=1)
    ]
    rankings = list(prompt.rankings.select_related("annotator").order_by("annotator__username"))
    labels = _answer_label_words(prompt) if annotation_mode(prompt.project.mode).gives_labels else {}
    answers = []
    for ranking in rankings:
        # An all-bad answer with everything in one tier ranks nothing: its cells say "all bad", not "1".
        ranked = not ranking.skipped and not (ranking.all_bad and len(ranking.tiers) <= 1)
        position = agreement.positions(ranking.tiers) if ranked else {}
        answers.append(ItemAnswer(
            username=ranking.annotator.get_username(), skipped=ranking.skipped, all_bad=ranking.all_bad,
            ranks=[position.get(response.id) for response in responses], rationale=ranking.rationale,
            seconds=ranking.seconds_spent,
            labels=[labels.get((ranking.pk, response.id), "") for response in responses] if labels else [],
        ))
    shared = {ranking.annotator.get_username(): ranking.tiers for ranking in rankings if not ranking.skipped}
    items = [shared] if len(shared) >= 2 else []
    return ItemDetail(
        prompt=prompt,
        responses=responses,
        answers=answers,
        tau=agreement.mean_kendall_tau(items),
        pairwise_agreement=agreement.pairwise_agreement_rate(items),
        disputed=agreement.is_disputed(
            agreement.best_answer(ranking.tiers, all_bad=ranking.all_bad) for ranking in rankings if not ranking.skipped
        ),
    )


# Rounds and their win rates ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundRow:
    round: Round
    items: int
    responses: int
    ranked_items: int
    win_rate: winrates.WinRate | None
    # the round's latest scoring by a reward model, and what its scores say (None until one succeeded)
    scoring: RoundScoring | None = None
    rm_win_rate: winrates.WinRate | None = None
    rm_agreement: winrates.Agreement | None = None


def project_rounds(project: Project) -> QuerySet[Round]:
    return Round.objects.filter(project=project).select_related("compared_with").order_by("number")


def answers_as_tiers(rankings: QuerySet[Ranking]) -> Iterator[tuple[int, list[list[int]], bool]]:
    """(prompt id, tiers, all bad) of each answer (skips included: filter them out), oldest first: a ranking's own
    tiers; a thumbs or ratings answer's responses ordered by their labels (feedback.tiers_from_scores)."""
    rows = list(rankings.order_by("id").values_list("pk", "prompt_id", "tiers", "all_bad"))
    given: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ranking_id, response_id, value in ResponseLabel.objects.filter(
        ranking_id__in=[pk for pk, _, tiers, _ in rows if not tiers]
    ).values_list("ranking_id", "response_id", "value"):
        given[ranking_id][response_id].append(value)
    for pk, prompt_id, tiers, all_bad in rows:
        if not tiers and pk in given:
            tiers = feedback.tiers_from_scores({response: statistics.fmean(values)
                                                for response, values in given[pk].items()})
        yield prompt_id, tiers, all_bad


def round_outcomes(round_: Round) -> list[float]:
    """Per ranking of the round's new items and per new response in it: its score against the compared copy
    (winrates.outcome); skips and all-bad answers that rank nothing are left out."""
    items = Prompt.objects.filter(round=round_, origin__isnull=False)
    copies = dict(Response.objects.filter(prompt__in=items, copy_of__isnull=False).values_list("prompt_id", "pk"))
    new: dict[int, list[int]] = defaultdict(list)
    for prompt_id, pk in Response.objects.filter(prompt__in=items, round=round_, copy_of__isnull=True).values_list(
        "prompt_id", "pk"
    ):
        new[prompt_id].append(pk)
    outcomes = []
    for prompt_id, tiers, all_bad in answers_as_tiers(Ranking.objects.filter(prompt__in=items, skipped=False)):
        if prompt_id not in copies or (all_bad and len(tiers) <= 1):
            continue
        position = agreement.positions(tiers)
        if copies[prompt_id] not in position:
            continue
        outcomes += [winrates.outcome(position[pk], position[copies[prompt_id]])
                     for pk in new[prompt_id] if pk in position]
    return outcomes


def round_rows(project: Project) -> list[RoundRow]:
    """The project's rounds, oldest first, each with its items, responses and its win rate over the round it is
    compared with (None until a ranking compares them)."""
    rows = []
    for round_ in project_rounds(project).annotate(
        item_count=Count("items", distinct=True),
        ranked_count=Count("items", filter=Q(items__ranking_count__gte=1), distinct=True),
        response_count=Count("responses", filter=Q(responses__copy_of__isnull=True), distinct=True),
    ):
        scoring = latest_round_scoring(round_)
        scores = round_scores(scoring) if scoring is not None and scoring.status == RoundScoring.Status.SUCCEEDED \
            else None
        rows.append(RoundRow(round=round_, items=round_.item_count, responses=round_.response_count,
                             ranked_items=round_.ranked_count, win_rate=winrates.win_rate(round_outcomes(round_)),
                             scoring=scoring,
                             rm_win_rate=winrates.win_rate(round_score_outcomes(round_, scores)) if scores else None,
                             rm_agreement=round_score_agreement(round_, scores) if scores else None))
    return rows


def latest_round_scoring(round_: Round) -> RoundScoring | None:
    return RoundScoring.objects.filter(round=round_).select_related("reward_run").order_by("-created_at", "-id").first()


def round_scores(scoring: RoundScoring) -> dict[int, float]:
    """Response id -> its score by the scoring's reward model."""
    return dict(RewardScore.objects.filter(scoring=scoring).values_list("response_id", "score"))


def round_score_outcomes(round_: Round, scores: dict[int, float]) -> list[float]:
    """Per new response of the round's new items: its score against the compared copy beside it, by a reward
    model's scores (round_scores; winrates.score_outcome); a first round's items compare nothing."""
    items = Prompt.objects.filter(round_id=round_.pk, origin__isnull=False)
    copies = dict(Response.objects.filter(prompt__in=items, copy_of__isnull=False).values_list("prompt_id", "pk"))
    outcomes = []
    for prompt_id, pk in Response.objects.filter(
        prompt__in=items, round_id=round_.pk, copy_of__isnull=True
    ).order_by("id").values_list("prompt_id", "pk"):
        copy = copies.get(prompt_id)
        if copy in scores and pk in scores:
            outcomes.append(winrates.score_outcome(scores[pk], scores[copy]))
    return outcomes


def round_score_agreement(round_: Round, scores: dict[int, float]) -> winrates.Agreement | None:
    """How many of the people's pairs (from rankings) on the round's items a reward model's scores order alike."""
    pairs = PreferencePair.objects.filter(prompt__round_id=round_.pk, ranking__isnull=False)
    return winrates.agreement(
        (scores[chosen], scores[rejected]) for chosen, rejected in pairs.values_list("chosen_id", "rejected_id")
        if chosen in scores and rejected in scores
    )


def visible_run(user: AbstractBaseUser, run_id: int):
    """The run `run_id` if `user` reaches it (webapp.experiments.selectors.runs_visible_to), else None."""
    from webapp.experiments.selectors import runs_visible_to

    return runs_visible_to(user).filter(pk=run_id).first()


def reward_model_runs(user: AbstractBaseUser) -> QuerySet:
    """The succeeded reward-model runs with a checkpoint that `user` sees, newest first: what a round can be
    scored with."""
    from webapp.experiments.models import Run
    from webapp.experiments.selectors import runs_visible_to

    return runs_visible_to(user).filter(kind="reward_model", status=Run.Status.SUCCEEDED).exclude(checkpoint_path="")


SUGGESTION_JOBS_SHOWN = 5


def suggestion_jobs(project: Project) -> list[SuggestionJob]:
    """The project's latest suggestion jobs, newest first: what the Rounds card shows of them."""
    return list(SuggestionJob.objects.filter(project=project).select_related("round")[:SUGGESTION_JOBS_SHOWN])


IMPORT_JOBS_SHOWN = 5


def import_jobs(project: Project) -> list[ImportJob]:
    """The project's latest import jobs, newest first."""
    return list(ImportJob.objects.filter(project=project).order_by("-created_at", "-pk")[:IMPORT_JOBS_SHOWN])
