"""Reads of the annotation app: what an annotator sees, progress and agreement, and the training/export rows."""

import dataclasses
import itertools
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Exists, Max, OuterRef, Prefetch, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.accounts.roles import is_admin, is_researcher
from webapp.annotation import agreement, feedback, gold, label_sources, suggestion_agreement, winrates
from webapp.annotation.aggregation import (
    aggregate_pairs,
    aggregation_annotator,
    aggregation_check,
    picks_one_answer,
)
from webapp.annotation.exporting import conversational_rows, conversational_unpaired_rows
from webapp.annotation.models import (
    Adjudication,
    AnnotatorPause,
    Assignment,
    GoldAnswer,
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
    Suggestion,
    SuggestionJob,
)
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels, response_letter
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


@dataclass(frozen=True)
class GoldAccuracy:
    """An annotator's gold answers judged (since their last release) and the decisions of them they matched."""

    answers: int
    matched: int
    decisions: int

    @property
    def share(self) -> float | None:
        return self.matched / self.decisions if self.decisions else None

    def __str__(self) -> str:
        share = f"{self.share:.0%}" if self.share is not None else "—"
        return f"{share} ({self.matched} of {counted(self.decisions, 'decision')}, {counted(self.answers, 'gold item')})"


@dataclass
class AnnotatorRow:
    username: str
    rankings: int
    skips: int
    median_seconds: float | None
    agreement_with_majority: float | None
    all_bad: int = 0
    # quality (gold items, pace, pause): accuracy on gold since their last release, the share of answers given
    # faster than the project's fast_answer_seconds, and their pause's decision if one holds them ("" when none)
    gold: GoldAccuracy | None = None
    fast_share: float | None = None
    paused: str = ""


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
    """Per annotator of the project: answers, skips, all-bad answers, median time, share of fast answers, agreement
    with the majority, accuracy on gold and whether a pause holds them."""
    majority = agreement.agreement_with_majority(item_rankings(project) if shared is None else shared)
    seconds: dict[str, list[float]] = defaultdict(list)
    skips: dict[str, int] = defaultdict(int)
    all_bad: dict[str, int] = defaultdict(int)
    ids: dict[str, int] = {}
    for annotator_id, username, skipped, bad, spent in Ranking.objects.filter(prompt__project=project).values_list(
        "annotator_id", "annotator__username", "skipped", "all_bad", "seconds_spent"
    ):
        ids[username] = annotator_id
        if skipped:
            skips[username] += 1
        else:
            seconds[username].append(spent)
            all_bad[username] += bad
    accuracies = gold_accuracies(project)
    paused = dict(AnnotatorPause.objects.filter(project=project).exclude(decision=AnnotatorPause.Decision.RELEASED)
                  .values_list("annotator_id", "decision"))
    return [
        AnnotatorRow(
            username=username,
            rankings=len(seconds[username]),
            skips=skips[username],
            median_seconds=statistics.median(seconds[username]) if seconds[username] else None,
            agreement_with_majority=majority.get(username),
            all_bad=all_bad[username],
            gold=accuracies.get(ids[username]),
            fast_share=(sum(spent < project.fast_answer_seconds for spent in seconds[username]) / len(seconds[username])
                        if seconds[username] else None),
            paused=paused.get(ids[username], ""),
        )
        for username in sorted(seconds.keys() | skips.keys())
    ]


# Gold items and annotators' quality (the rules: webapp.annotation.gold) ------------------------------------


def gold_responses(prompt: Prompt) -> list[int]:
    """The response ids a gold answer places, in the item page's order (R1, also called A, first): those an
    annotator is shown (`responses_shown`, before each annotator's own shuffle)."""
    count = annotation_mode(prompt.project.mode).responses_shown(prompt.project.responses_per_item)
    return list(prompt.responses.order_by("id").values_list("id", flat=True)[:count])


def gold_count(project: Project) -> int:
    return GoldAnswer.objects.filter(prompt__project=project).count()


def _last_releases(project: Project) -> dict[int, object]:
    """annotator id -> when a researcher last released them: gold answers before it are not judged again."""
    return dict(AnnotatorPause.objects.filter(project=project, decision=AnnotatorPause.Decision.RELEASED)
                .values("annotator_id").annotate(last=Max("decided_at")).values_list("annotator_id", "last"))


def gold_accuracies(project: Project, *, annotator_id: int | None = None) -> dict[int, GoldAccuracy]:
    """annotator id -> their accuracy on the gold items they answered (skips aside) since their last release."""
    golds = {answer.prompt_id: answer for answer in GoldAnswer.objects.filter(prompt__project=project)}
    if not golds:
        return {}
    answers = Ranking.objects.filter(prompt_id__in=golds, skipped=False).prefetch_related("labels").order_by("id")
    if annotator_id is not None:
        answers = answers.filter(annotator_id=annotator_id)
    released = _last_releases(project)
    gives_labels = annotation_mode(project.mode).gives_labels
    tolerance = gold.RATING_TOLERANCE if project.mode == Project.Mode.RATINGS else 0.0
    judged: dict[int, list[gold.Decisions]] = defaultdict(list)
    for answer in answers:
        since = released.get(answer.annotator_id)
        if since is not None and answer.created_at <= since:
            continue
        right = golds[answer.prompt_id]
        if gives_labels:
            given: Labels = defaultdict(dict)
            for label in answer.labels.all():
                given[label.response_id][label.aspect] = label.value
            decisions = gold.label_decisions(gold.labels_from_json(right.labels), given, tolerance=tolerance)
        else:
            decisions = gold.tier_decisions(right.tiers, answer.tiers)
        judged[answer.annotator_id].append(decisions)
    return {annotator: GoldAccuracy(answers=len(decisions), matched=sum(d.matched for d in decisions),
                                    decisions=sum(d.total for d in decisions))
            for annotator, decisions in judged.items()}


@dataclass(frozen=True)
class GoldForm:
    """An item's gold answer as its page shows and edits it: the responses a gold answer places (letter A is R1),
    the stored answer in words, and what fills the form."""

    responses: list[dict]
    answer: GoldAnswer | None
    words: str
    order: str = ""
    choice: str = ""


def item_gold(prompt: Prompt) -> GoldForm:
    responses = gold_responses(prompt)
    letter = {response: response_letter(index) for index, response in enumerate(responses)}
    answer = GoldAnswer.objects.filter(prompt=prompt).first()
    given = gold.labels_from_json(answer.labels) if answer is not None else {}
    rows = [{"id": response, "letter": letter[response], "number": index, "thumb": "",
             "ratings": [{"name": aspect["name"], "value": given.get(response, {}).get(aspect["name"])}
                         for aspect in prompt.project.aspects]}
            for index, response in enumerate(responses, start=1)]
    if answer is None:
        return GoldForm(responses=rows, answer=None, words="")
    if given:
        for row in rows:
            thumb = given.get(row["id"], {}).get(ResponseLabel.THUMB)
            row["thumb"] = "" if thumb is None else ("up" if thumb >= 0.5 else "down")
        words = "; ".join(f"{letter[response]} " + " · ".join(label_words(aspect, value) for aspect, value in labels.items())
                          for response, labels in given.items() if response in letter)
        return GoldForm(responses=rows, answer=answer, words=words)
    order = " > ".join(" = ".join(letter.get(response, "?") for response in tier) for tier in answer.tiers)
    choice = ""
    if len(responses) == 2:
        choice = "tie" if len(answer.tiers) == 1 else letter[answer.tiers[0][0]]
    return GoldForm(responses=rows, answer=answer, words=order, order=order, choice=choice)


def gold_feedback(ranking: Ranking) -> str | None:
    """What an annotator is told after answering a gold item otherwise than its gold answer: that answer, in the
    letters they saw the responses under, and the researcher's explanation. None for any other answer."""
    answer = GoldAnswer.objects.filter(prompt_id=ranking.prompt_id).first()
    if answer is None or ranking.skipped:
        return None
    shown = [response.pk for response in responses_shown(prompt=ranking.prompt, annotator=ranking.annotator)]
    letter = {response: response_letter(index) for index, response in enumerate(shown)}
    if annotation_mode(ranking.prompt.project.mode).gives_labels:
        right = gold.labels_from_json(answer.labels)
        decisions = gold.label_decisions(right, answer_labels(ranking_id=ranking.pk), tolerance=(
            gold.RATING_TOLERANCE if ranking.prompt.project.mode == Project.Mode.RATINGS else 0.0))
        words = "; ".join(f"{letter[response]} " + " · ".join(label_words(aspect, value) for aspect, value in
                                                              right[response].items())
                          for response in shown if response in right)
    else:
        decisions = gold.tier_decisions(answer.tiers, ranking.tiers)
        tiers = [sorted((response for response in tier if response in letter), key=shown.index)
                 for tier in answer.tiers]
        words = " > ".join(" = ".join(letter[response] for response in tier) for tier in tiers if tier)
    if decisions.matched == decisions.total:
        return None
    explanation = f" {answer.explanation}" if answer.explanation else ""
    return f"That was a check item; its expected answer is {words}.{explanation}"


def annotator_pause_blocking(*, project: Project, annotator: AbstractBaseUser) -> AnnotatorPause | None:
    """The pause that keeps the annotator from new items: one waiting for a researcher, or one whose answers were
    dropped (a released pause no longer holds them)."""
    return (AnnotatorPause.objects.filter(project=project, annotator=annotator)
            .exclude(decision=AnnotatorPause.Decision.RELEASED).order_by("-created_at", "-id").first())


def annotator_latest_pause(*, project: Project, annotator: AbstractBaseUser) -> AnnotatorPause | None:
    """What the annotate page tells an annotator of their quality: their latest pause, with its reason and decision."""
    return (AnnotatorPause.objects.filter(project=project, annotator=annotator).select_related("decided_by")
            .order_by("-created_at", "-id").first())


def project_pauses(project: Project) -> list[AnnotatorPause]:
    """The project's pauses, those waiting for a decision first, then the latest."""
    pauses = AnnotatorPause.objects.filter(project=project).select_related("annotator", "decided_by")
    return sorted(pauses, key=lambda pause: (pause.decision != AnnotatorPause.Decision.PENDING, -pause.pk))


@dataclass(frozen=True)
class OwnProgress:
    project: Project
    ranked: int
    available: int
    paused: bool = False  # a pause holds them in this project: nothing is open to them until a researcher decides


def own_progress(*, user: AbstractBaseUser) -> list[OwnProgress]:
    """Per project of the user (not archived): what they ranked and how many items are still open to them (nobody
    else's)."""
    rows = []
    for project in Project.objects.filter(members=user, archived_at__isnull=True).order_by("name"):
        ranked = own_ranked_count(project=project, user=user)
        # every answer is a Ranking row, kept while its item is reopened by Back
        answered = Ranking.objects.filter(annotator=user, prompt__project=project)
        if annotator_pause_blocking(project=project, annotator=user) is not None:
            rows.append(OwnProgress(project=project, ranked=ranked, available=0, paused=True))
            continue
        # a gold item is open to every annotator who has not answered it, whatever its overlap
        available = (
            Prompt.objects.filter(OPEN_ITEMS, Q(ranking_count__lt=project.annotators_per_item) | Q(gold__isnull=False),
                                  project=project)
            .exclude(pk__in=answered.values("prompt_id"))
            .count()
        )
        rows.append(OwnProgress(project=project, ranked=ranked, available=available))
    return rows


def own_ranked_count(*, project: Project, user: AbstractBaseUser) -> int:
    """The user's rankings in the project, skips aside; a ranking reopened by Back counts until it is replaced."""
    return Ranking.objects.filter(prompt__project=project, annotator=user, skipped=False).count()


def guidelines_first(*, project: Project, user: AbstractBaseUser) -> bool:
    """Whether the annotate page shows the project's guidelines before an item: the project has guidelines and the
    user has not answered (nor skipped) any of its items yet."""
    if is_blank(project.guidelines):
        return False
    return not Ranking.objects.filter(prompt__project=project, annotator=user).exists()


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
    # pairs or labels of answers held back (a paused annotator's): stored, not trained on until released
    held_back_pairs: int = 0
    held_back_labels: int = 0
    # a thumbs or ratings project's labels (thumbs, or one rating a response and aspect), given in answers and
    # imported, and the training rows they make (None in a ranking mode): ratings' binarized pairs, KTO rows
    labels_given: int = 0
    labels_imported: int = 0
    binarized_pairs: int | None = None
    unpaired_rows: int | None = None


def project_data(project: Project, *, sources: dict[int, str] | None = None) -> ProjectData:
    """`sources`: item_label_sources, read when not given (the project page reads them once for its cards)."""
    items = Prompt.objects.filter(project=project, annotatable=True).aggregate(
        total=Count("pk"), awaiting=Count("pk", filter=Q(response_count__lt=2))
    )
    pairs = PreferencePair.objects.filter(project=project).aggregate(
        imported=Count("pk", filter=Q(ranking__isnull=True)),
        ranked=Count("pk", filter=Q(ranking__isnull=False, ranking__held_back=False)),
        held_back=Count("pk", filter=Q(ranking__held_back=True)),
    )
    empty = Response.objects.filter(prompt__project=project, text__regex=LEFT_OUT_TEXT_REGEX).count()
    data = ProjectData(items=items["total"], awaiting_responses=items["awaiting"], imported_pairs=pairs["imported"],
                       ranking_pairs=pairs["ranked"], held_back_pairs=pairs["held_back"], empty_responses=empty)
    if not annotation_mode(project.mode).gives_labels:
        return data
    labels = ResponseLabel.objects.filter(project=project).aggregate(
        given=Count("pk", filter=Q(ranking__isnull=False, ranking__held_back=False)),
        held_back=Count("pk", filter=Q(ranking__held_back=True)),
        imported=Count("pk", filter=Q(ranking__isnull=True)))
    if sources is None:
        sources = item_label_sources(project_id=project.pk)
    binarized = (sum(1 for _ in binarized_pair_rows(project_id=project.pk, sources=sources))
                 if project.mode == Project.Mode.RATINGS else None)
    return dataclasses.replace(data, labels_given=labels["given"], labels_imported=labels["imported"],
                               held_back_labels=labels["held_back"], binarized_pairs=binarized,
                               unpaired_rows=unpaired_count(project_id=project.pk, sources=sources))


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
    (webapp.annotation.aggregation: all, majority, drop_conflicts, resolved, annotator:<username>); ratings become
    pairs by `binarization` and `seed` (webapp.annotation.feedback), after the pairs of rankings and imports. Each row
    names its item's `label_source` (webapp.annotation.label_sources); under the aggregations that pick one answer,
    an adjudicated item's rows are its decision's (annotator: the researcher who decided, ranking_id None)."""
    feedback.binarization_check(binarization, seed)
    aggregation_check(aggregation)
    sources = item_label_sources(project_id=project_id)
    decided = picks_one_answer(aggregation)
    rows = itertools.chain(_strategy_pair_rows(project_id=project_id, strategy=strategy, sources=sources,
                                               decided=decided),
                           binarized_pair_rows(project_id=project_id, aggregation=aggregation,
                                               binarization=binarization, seed=seed, sources=sources))
    return aggregate_pairs(rows, aggregation)


def _adjudicated_ids(sources: dict[int, str]) -> list[int]:
    return [prompt_id for prompt_id, source in sources.items() if source == label_sources.ADJUDICATED]


def _strategy_pair_rows(*, project_id: int, strategy: str, sources: dict[int, str] | None = None,
                        decided: bool = False) -> Iterator[dict]:
    """TRL rows {prompt, chosen, rejected, weight, margin, ranking_id, annotator, label_source}, streamed from the
    database (`sources`: item_label_sources, read when not given; `decided`: an adjudicated item's rows are its
    decision's, else its annotators'):
    conversational (prompt = its messages, chosen/rejected = one assistant message each) when the prompt is a
    conversation, standard (text) otherwise.

    "all" reads the stored pairs; the other strategies derive pairs from each ranking on the way, by the same rule
    (`preferences.ranking_pairs`); imported pairs are part of every strategy. No pair involves an empty
    (whitespace-only) response.
    """
    sources = item_label_sources(project_id=project_id) if sources is None else sources
    replaced = _adjudicated_ids(sources) if decided else []
    stored = _exportable_pairs(project_id).exclude(prompt_id__in=replaced)
    if strategy != "all":
        stored = stored.filter(ranking__isnull=True)
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    for (prompt_id, text, messages, chosen, rejected, weight, margin, ranking_id, annotator,
         *rounds) in stored.values_list(*_PAIR_FIELDS, *_PAIR_ROUND_FIELDS).iterator(chunk_size=2000):
        yield {**_trl_pair(text, messages, chosen, rejected, chat_sampled=prompt_id in chat_sampled),
               "weight": weight, "margin": margin, "ranking_id": ranking_id, "annotator": annotator,
               **_pair_rounds(*rounds), "label_source": _row_source(sources, prompt_id, ranking_id)}
    if decided:
        yield from _decision_pair_rows(replaced, strategy=strategy, chat_sampled=chat_sampled)
    if strategy == "all":
        return
    rankings = rankings_with_pairs(project_id=project_id).exclude(prompt_id__in=replaced).select_related(
        "prompt", "annotator")
    for ranking in rankings.iterator(chunk_size=500):
        texts = response_texts(prompt_id=ranking.prompt_id)
        rounds = response_rounds(prompt_id=ranking.prompt_id)
        for pair in ranking_pairs(ranking.tiers, texts, strategy=strategy):
            (chosen_round, chosen_model), (rejected_round, rejected_model) = rounds[pair.chosen], rounds[pair.rejected]
            yield {**_trl_pair(ranking.prompt.text, ranking.prompt.messages, texts[pair.chosen], texts[pair.rejected],
                               chat_sampled=ranking.prompt_id in chat_sampled),
                   "weight": pair.weight, "margin": pair.margin, "ranking_id": ranking.pk,
                   "annotator": ranking.annotator.get_username(),
                   **_pair_rounds(chosen_round, rejected_round, chosen_model, rejected_model),
                   "label_source": sources[ranking.prompt_id]}


def _row_source(sources: dict[int, str], prompt_id: int, ranking_id: int | None) -> str:
    """An answer's row: its item's source; an imported row (no answer behind it): "imported"."""
    return sources.get(prompt_id, label_sources.IMPORTED) if ranking_id is not None else label_sources.IMPORTED


def _decision_pair_rows(prompt_ids: Sequence[int], *, strategy: str, chat_sampled: set[int]) -> Iterator[dict]:
    """The pairs of the decisions on these items (tiers modes), by the rule of an answer's pairs."""
    decisions = Adjudication.objects.filter(prompt_id__in=prompt_ids).exclude(tiers=[]).select_related(
        "prompt", "decided_by").order_by("prompt_id")
    for decision in decisions:
        texts, rounds = response_texts(prompt_id=decision.prompt_id), response_rounds(prompt_id=decision.prompt_id)
        for pair in ranking_pairs(decision.tiers, texts, strategy=strategy):
            (chosen_round, chosen_model), (rejected_round, rejected_model) = rounds[pair.chosen], rounds[pair.rejected]
            yield {**_trl_pair(decision.prompt.text, decision.prompt.messages, texts[pair.chosen],
                               texts[pair.rejected], chat_sampled=decision.prompt_id in chat_sampled),
                   "weight": pair.weight, "margin": pair.margin, "ranking_id": None,
                   "annotator": decision.decided_by.get_username() if decision.decided_by else None,
                   **_pair_rounds(chosen_round, rejected_round, chosen_model, rejected_model),
                   "label_source": label_sources.ADJUDICATED}


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
    labels (tiers empty), with flags, rationale and time; `held_back` for a paused annotator's answer (out of
    training rows), `gold` for an answer to a gold item, and label_source: its item's
    (webapp.annotation.label_sources) for an answer that counts, None for a skip or a held-back answer."""
    sources = item_label_sources(project_id=project_id)
    rankings = (
        Ranking.objects.filter(prompt__project_id=project_id).select_related("prompt", "annotator").order_by("id")
        .prefetch_related(Prefetch("labels", queryset=ResponseLabel.objects.order_by("id")))
    )
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    gold_items = set(GoldAnswer.objects.filter(prompt__project_id=project_id).values_list("prompt_id", flat=True))
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
            "held_back": ranking.held_back,
            "gold": ranking.prompt_id in gold_items,
            "label_source": None if ranking.skipped or ranking.held_back else sources.get(ranking.prompt_id),
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
    project_id: int, *, annotator: str | None, binarization: str, seed: int, replaced: Sequence[int] = ()
) -> Iterator[tuple[int, _ItemTexts, feedback.BinarizedPair]]:
    """Each rated item's binarized pair, by prompt id, with its id and texts; `annotator`: that annotator's ratings
    only; `replaced`: adjudicated items whose decision's ratings stand in for everyone's (after the others)."""
    feedback.binarization_check(binarization, seed)
    labels = _labels(project_id, thumbs=False, annotator=annotator).exclude(prompt_id__in=replaced).order_by(
        "prompt_id", "id").values_list("prompt_id", "response_id", "value")
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    by_item = itertools.groupby(labels.iterator(chunk_size=5000), key=lambda label: label[0])
    decided = ((decision.prompt_id, [feedback.Rating(response, value)
                                     for response, given in decision_labels(decision).items()
                                     for aspect, value in given.items() if aspect != ResponseLabel.THUMB])
               for decision in Adjudication.objects.filter(prompt_id__in=replaced).order_by("prompt_id"))
    ratings_by_item = itertools.chain(((prompt_id, [feedback.Rating(response, value) for _, response, value in group])
                                       for prompt_id, group in by_item), decided)
    while batch := list(itertools.islice(ratings_by_item, _LABEL_PROMPT_BATCH)):
        texts = _item_texts([prompt_id for prompt_id, _ in batch], chat_sampled=chat_sampled)
        for prompt_id, ratings in batch:
            item = texts[prompt_id]
            pair = feedback.binarize_ratings(item.external_id, ratings, left_out=item.left_out,
                                             binarization=binarization, seed=seed)
            if pair is not None:
                yield prompt_id, item, pair


def binarized_pair_rows(*, project_id: int, aggregation: str = "all",
                        binarization: str = feedback.DEFAULT_BINARIZATION,
                        seed: int = feedback.DEFAULT_SEED, sources: dict[int, str] | None = None) -> Iterator[dict]:
    """The project's ratings as pair rows (the columns of `pair_rows`, ranking_id None): one pair a rated item,
    from everyone's ratings, or from one annotator's under `annotator:<username>` (the row then names them); an
    adjudicated item's from its decision under the aggregations that pick one answer. `sources`:
    item_label_sources, read when not given."""
    annotator = aggregation_annotator(aggregation)
    sources = item_label_sources(project_id=project_id) if sources is None else sources
    replaced = _adjudicated_ids(sources) if picks_one_answer(aggregation) else []
    for prompt_id, item, pair in _binarized_pairs(project_id, annotator=annotator, binarization=binarization,
                                                  seed=seed, replaced=replaced):
        (chosen, chosen_round, chosen_model), (rejected, rejected_round, rejected_model) = (
            item.responses[pair.chosen], item.responses[pair.rejected])
        yield {**_trl_pair(item.prompt, item.messages, chosen, rejected, chat_sampled=item.chat_sampled),
               "weight": pair.weight, "margin": pair.margin, "ranking_id": None, "annotator": annotator,
               **_pair_rounds(chosen_round, rejected_round, chosen_model, rejected_model),
               "label_source": sources.get(prompt_id, label_sources.IMPORTED)}


def _with_source(labels: Iterable[feedback.UnpairedLabel], source: str) -> Iterator[feedback.UnpairedLabel]:
    return (dataclasses.replace(label, label_source=source) for label in labels)


def _unpaired_labels(project_id: int, *, aggregation: str, binarization: str, seed: int,
                     sources: dict[int, str] | None = None) -> Iterator[feedback.UnpairedLabel]:
    """Every unpaired row of the project in ids, before aggregation: thumbs, answers' tiers, binarized ratings,
    imported pairs (feedback's rules), each with its item's label source; under the aggregations that pick one
    answer, an adjudicated item's rows are its decision's."""
    annotator = aggregation_annotator(aggregation)
    sources = item_label_sources(project_id=project_id) if sources is None else sources
    replaced = _adjudicated_ids(sources) if picks_one_answer(aggregation) else []
    for prompt_id, response, value, username, external, ranking_id in _labels(project_id, thumbs=True).exclude(
        prompt_id__in=replaced
    ).order_by("id").values_list("prompt_id", "response_id", "value", "annotator__username", "external_annotator",
                                 "ranking_id"):
        yield from _with_source([feedback.thumb_label(response, value, annotator=_label_annotator(username, external))],
                                _row_source(sources, prompt_id, ranking_id))
    left_out = set(Response.objects.filter(prompt__project_id=project_id, text__regex=LEFT_OUT_TEXT_REGEX)
                   .values_list("pk", flat=True))
    answers = Ranking.objects.filter(prompt__project_id=project_id, skipped=False, held_back=False).exclude(
        tiers=[]).exclude(prompt_id__in=replaced).order_by("id")
    for prompt_id, tiers, all_bad, username, mode in answers.values_list(
        "prompt_id", "tiers", "all_bad", "annotator__username", "prompt__project__mode"
    ).iterator(chunk_size=2000):
        yield from _with_source(feedback.tier_labels(tiers, all_bad=all_bad, annotator=username, left_out=left_out,
                                                     source="pairwise" if mode == "pairwise" else "ranking"),
                                sources[prompt_id])
    yield from _decision_unpaired_labels(replaced, left_out=left_out)
    for prompt_id, _, pair in _binarized_pairs(project_id, annotator=annotator, binarization=binarization, seed=seed,
                                               replaced=replaced):
        yield from _with_source(feedback.pair_labels(pair.chosen, pair.rejected, annotator=annotator,
                                                     source="ratings"),
                                sources.get(prompt_id, label_sources.IMPORTED))
    for chosen, rejected in _exportable_pairs(project_id).filter(ranking__isnull=True).values_list(
        "chosen_id", "rejected_id"
    ):
        yield from feedback.pair_labels(chosen, rejected, annotator=None, source="pairs")


def _decision_unpaired_labels(prompt_ids: Sequence[int], *, left_out: set[int]) -> Iterator[feedback.UnpairedLabel]:
    """The rows of the decisions on these items given as tiers or thumbs (a ratings decision's come with the
    binarized pairs), by the rules of an answer's rows, named after the researcher who decided."""
    for decision in Adjudication.objects.filter(prompt_id__in=prompt_ids).select_related(
            "decided_by", "prompt__project").order_by("prompt_id"):
        decider = decision.decided_by.get_username() if decision.decided_by else None
        if decision.tiers:
            mode = decision.prompt.project.mode
            labels = feedback.tier_labels(decision.tiers, all_bad=False, annotator=decider, left_out=left_out,
                                          source="pairwise" if mode == "pairwise" else "ranking")
        else:
            labels = [feedback.thumb_label(response, given[ResponseLabel.THUMB], annotator=decider)
                      for response, given in decision_labels(decision).items() if ResponseLabel.THUMB in given]
        yield from _with_source(labels, label_sources.ADJUDICATED)


def unpaired_rows(*, project_id: int, aggregation: str = "all", binarization: str = feedback.DEFAULT_BINARIZATION,
                  seed: int = feedback.DEFAULT_SEED) -> Iterator[dict]:
    """The project's KTO rows, TRL's unpaired format {prompt, completion, label} with annotator, response_id,
    source (thumbs, ranking, pairwise, ratings or pairs: where the row came from), the response's round (its
    number, None when it came in no round) and model (its round's, "" when unknown), and label_source (its item's,
    webapp.annotation.label_sources): conversational (prompt = its
    messages, completion = one assistant message) when the prompt is a conversation, standard text otherwise.
    `aggregation` combines annotators (feedback.aggregate_unpaired), `binarization` and `seed` make ratings pairs."""
    feedback.binarization_check(binarization, seed)
    aggregation_check(aggregation)
    labels = feedback.aggregate_unpaired(
        _unpaired_labels(project_id, aggregation=aggregation, binarization=binarization, seed=seed), aggregation)
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
                   "source": label.source, "round": round_number, "model": model or "",
                   "label_source": label.label_source}


def unpaired_count(*, project_id: int, aggregation: str = "all", binarization: str = feedback.DEFAULT_BINARIZATION,
                   seed: int = feedback.DEFAULT_SEED, sources: dict[int, str] | None = None) -> int:
    """How many rows `unpaired_rows` yields (derived: they are not stored). `sources`: item_label_sources, read
    when not given."""
    aggregation_check(aggregation)
    return sum(1 for _ in feedback.aggregate_unpaired(
        _unpaired_labels(project_id, aggregation=aggregation, binarization=binarization, seed=seed, sources=sources),
        aggregation))


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
    a rating its aspect and value; ranking_id is the answer it was given in (None: imported); label_source its
    item's (webapp.annotation.label_sources; "imported" for an imported label)."""
    chat_sampled = chat_sampled_prompt_ids(project_id=project_id)
    sources = item_label_sources(project_id=project_id)
    labels = ResponseLabel.objects.filter(_COUNTED_LABELS, project_id=project_id).order_by("id").values_list(
        "prompt_id", "prompt__external_id", "prompt__text", "prompt__messages", "response_id", "response__text",
        "annotator__username", "external_annotator", "aspect", "value", "ranking_id", "created_at")
    for (prompt_id, external_id, text, messages, response_id, response, username, external, aspect, value,
         ranking_id, created_at) in labels.iterator(chunk_size=2000):
        yield {"prompt_id": external_id, "prompt": trl_prompt(text, messages, chat_sampled=prompt_id in chat_sampled),
               "response_id": response_id, "response": response,
               "annotator": _label_annotator(username, external), "aspect": aspect, "value": value,
               "ranking_id": ranking_id, "created_at": created_at.isoformat(),
               "label_source": _row_source(sources, prompt_id, ranking_id)}


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
    # a paused annotator's held-back answers give no training rows, so the menu does not count them
    projects = projects_visible_to(user).annotate(
        pair_count=Count("pairs", filter=Q(pairs__ranking__isnull=True) | Q(pairs__ranking__held_back=False),
                         distinct=True),
        prompt_count=Count("prompts", distinct=True),
        labelled_count=Count("labels__response", filter=Q(labels__ranking__isnull=True)
                             | Q(labels__ranking__held_back=False, labels__ranking__skipped=False), distinct=True),
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
        # no ordering: the model's ordering by id would join the SELECT DISTINCT and repeat a name once a pair
        PreferencePair.objects.filter(project__in=projects_visible_to(user), ranking__isnull=False)
        .order_by()
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
    ranking_id: int | None = None


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
            ranking_id=ranking.pk,
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
    rm_agreement: suggestion_agreement.HumanAgreement | None = None
    # per suggestion source with suggestions on the round's items: its agreement with the people on them
    suggestions: list["SourceAgreement"] = field(default_factory=list)


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
    measured = _suggestions_measured(project, in_rounds=True)
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
                             rm_agreement=round_score_agreement(round_, scores) if scores else None,
                             suggestions=measured.by_source(items=measured.round_items(round_.pk))))
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


def round_score_agreement(round_: Round, scores: dict[int, float]) -> suggestion_agreement.HumanAgreement | None:
    """How the people's answers (any mode, through `answers_as_tiers`) to the round's items agree with a reward
    model's scores, each item's scored responses read as tiers by score (suggestion_agreement's definitions); None
    when no human pair compares two scored responses."""
    items = Prompt.objects.filter(round_id=round_.pk)
    scored: dict[int, dict[int, float]] = defaultdict(dict)
    for prompt_id, pk in Response.objects.filter(prompt__in=items).values_list("prompt_id", "pk"):
        if pk in scores:
            scored[prompt_id][pk] = scores[pk]
    answers, left_out = _human_answers(Ranking.objects.filter(prompt__in=items))
    measured = suggestion_agreement.human_agreement(
        {item: feedback.tiers_from_scores(item_scores) for item, item_scores in scored.items()}, answers,
        left_out=left_out)
    return measured if measured.pairs else None


# Suggestions measured against the people ----------------------------------------------------------------


def _human_answers(rankings: QuerySet[Ranking]) -> tuple[dict[int, list[agreement.Tiers]], dict[int, int]]:
    """Per item, the tiers of the people's answers among `rankings` that a machine can be measured against (skips,
    held-back answers and those that accepted a suggestion left out), and per item the count of the last."""
    answers = rankings.filter(skipped=False, held_back=False)
    accepted = Q(suggestion__isnull=False) | Exists(
        ResponseLabel.objects.filter(ranking_id=OuterRef("pk"), suggestion__isnull=False))
    left_out = Counter(answers.filter(accepted).values_list("prompt_id", flat=True))
    tiers_by_item: dict[int, list[agreement.Tiers]] = defaultdict(list)
    for prompt_id, tiers, _ in answers_as_tiers(answers.exclude(accepted)):
        tiers_by_item[prompt_id].append(tiers)
    return tiers_by_item, dict(left_out)


def _suggested_tiers_by_source(items: QuerySet[Prompt]) -> dict[str, dict[int, agreement.Tiers]]:
    """Agent -> item -> its suggestion read as tiers (suggestion_agreement.suggested_tiers), the latest suggestion of
    a question winning where a source answered one twice."""
    ranking: dict[tuple[str, int], object] = {}
    per_response: dict[tuple[str, int], dict[int, dict[str, object]]] = defaultdict(lambda: defaultdict(dict))
    for agent, prompt_id, response_id, question, value in Suggestion.objects.filter(prompt__in=items).order_by(
        "id"
    ).values_list("agent", "prompt_id", "response_id", "question", "value"):
        if response_id is not None:
            per_response[(agent, prompt_id)][response_id][question] = value
        elif question == suggestion_agreement.RANKING_QUESTION:
            ranking[(agent, prompt_id)] = value
    by_source: dict[str, dict[int, agreement.Tiers]] = defaultdict(dict)
    for agent, prompt_id in ranking.keys() | per_response.keys():
        values = {response: questions.values() for response, questions in per_response[(agent, prompt_id)].items()}
        tiers = suggestion_agreement.suggested_tiers(ranking.get((agent, prompt_id)), values)
        if tiers is not None:
            by_source[agent][prompt_id] = tiers
    return by_source


@dataclass(frozen=True)
class SourceAgreement:
    """One suggestion source (an `agent`) against the people, over the items both answered."""

    agent: str
    suggested_items: int
    agreement: suggestion_agreement.HumanAgreement
    # the source's latest judge job, whose comparisons give its position bias (None for other sources)
    judge_job: SuggestionJob | None = None

    @property
    def position_bias(self) -> float | None:
        return self.judge_job.position_bias if self.judge_job is not None else None


@dataclass(frozen=True)
class SuggestionsMeasured:
    """What measuring a project's suggestion sources reads, read once: each source's tiers per item, the people's
    answers per item, the answers left out per item, each item's round and each judge source's latest job."""

    suggested: dict[str, dict[int, agreement.Tiers]]
    answers: dict[int, list[agreement.Tiers]]
    left_out: dict[int, int]
    item_rounds: dict[int, int | None]
    judge_jobs: dict[str, SuggestionJob]

    def round_items(self, round_id: int) -> set[int]:
        return {item for item, item_round in self.item_rounds.items() if item_round == round_id}

    def by_source(self, *, items: set[int] | None = None) -> list[SourceAgreement]:
        """Per source with a suggestion on one of `items` (every item when None), by agent."""
        rows = []
        for agent in sorted(self.suggested):
            machine = {item: tiers for item, tiers in self.suggested[agent].items() if items is None or item in items}
            if machine:
                rows.append(SourceAgreement(
                    agent=agent, suggested_items=len(machine), judge_job=self.judge_jobs.get(agent),
                    agreement=suggestion_agreement.human_agreement(machine, self.answers, left_out=self.left_out)))
        return rows


def _suggestions_measured(project: Project, *, in_rounds: bool = False) -> SuggestionsMeasured:
    """The project's items (only those a round made or filled, with `in_rounds`) measured; the answers are read only
    where some suggestion can be (the Rounds card reads this every few seconds)."""
    items = Prompt.objects.filter(project=project, **({"round__isnull": False} if in_rounds else {}))
    suggested = _suggested_tiers_by_source(items)
    if not suggested:
        return SuggestionsMeasured(suggested={}, answers={}, left_out={}, item_rounds={}, judge_jobs={})
    answers, left_out = _human_answers(Ranking.objects.filter(prompt__in=items))
    judge_jobs = {job.agent: job for job in SuggestionJob.objects.filter(
        project=project, source=SuggestionJob.Source.JUDGE).order_by("created_at", "id")}
    return SuggestionsMeasured(suggested=suggested, answers=answers, left_out=left_out,
                               item_rounds=dict(items.values_list("pk", "round_id")), judge_jobs=judge_jobs)


def suggestion_agreements(project: Project) -> list[SourceAgreement]:
    """Per suggestion source of the project (imported or computed), by agent: its agreement with the people over
    every item both answered (the Suggestions card, the API)."""
    return _suggestions_measured(project).by_source()


def round_suggestion_agreements(project: Project) -> dict[int, list[SourceAgreement]]:
    """Round number -> per suggestion source, its agreement with the people on that round's items."""
    measured = _suggestions_measured(project, in_rounds=True)
    return {round_.number: measured.by_source(items=measured.round_items(round_.pk))
            for round_ in project_rounds(project)}


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


# Label sources and adjudication (the rules: webapp.annotation.label_sources) ----------------------------------


@dataclass(frozen=True)
class ItemStanding:
    """One answered (or decided) item: its counted answers, their agreement, whether it waits for a researcher, and
    the source of its label."""

    prompt_id: int
    answers: list[label_sources.Answer]
    agreement: float | None
    queued: bool
    source: str


def item_standings(*, project_id: int) -> dict[int, ItemStanding]:
    """Prompt id -> its standing, for every item with a counted answer (not a skip, not held back) or a decision."""
    project = Project.objects.only("adjudication_min_answers", "adjudication_threshold").get(pk=project_id)
    answers: dict[int, list[label_sources.Answer]] = defaultdict(list)
    counted = Ranking.objects.filter(prompt__project_id=project_id, skipped=False, held_back=False)
    for prompt_id, tiers, all_bad in answers_as_tiers(counted):
        answers[prompt_id].append(label_sources.Answer(tiers=tiers, all_bad=all_bad))
    decided = set(Adjudication.objects.filter(prompt__project_id=project_id).values_list("prompt_id", flat=True))
    standings = {}
    for prompt_id in sorted(answers.keys() | decided):
        given, adjudicated = answers.get(prompt_id, []), prompt_id in decided
        rate = label_sources.item_agreement(given)
        queued = label_sources.in_queue(len(given), rate, min_answers=project.adjudication_min_answers,
                                        threshold=project.adjudication_threshold, adjudicated=adjudicated)
        standings[prompt_id] = ItemStanding(
            prompt_id=prompt_id, answers=given, agreement=rate, queued=queued,
            source=label_sources.item_source(given, queued=queued, adjudicated=adjudicated))
    return standings


def item_label_sources(*, project_id: int) -> dict[int, str]:
    """Prompt id -> the source of its label, for the items `item_standings` holds."""
    return label_sources_of(item_standings(project_id=project_id))


def label_sources_of(standings: dict[int, ItemStanding]) -> dict[int, str]:
    return {prompt_id: standing.source for prompt_id, standing in standings.items()}


def _queue_order(standings: Iterable[ItemStanding]) -> list[ItemStanding]:
    """The queued items, lowest agreement first (ties by id)."""
    return sorted((standing for standing in standings if standing.queued),
                  key=lambda standing: (standing.agreement, standing.prompt_id))


def adjudication_queue(project: Project, *, standings: dict[int, ItemStanding] | None = None) -> list[ItemStanding]:
    """The items waiting for a researcher's decision, lowest agreement first (ties by id). `standings`:
    item_standings, read when not given."""
    return _queue_order((item_standings(project_id=project.pk) if standings is None else standings).values())


@dataclass(frozen=True)
class AdjudicationItem:
    """An item on the adjudication page: everyone's answers side by side, its agreement, and its decision if any."""

    detail: ItemDetail
    agreement: float | None
    source: str
    queued: bool = False
    decision: Adjudication | None = None
    # the decision in words ("R2 > R1 = R3", or per response its labels), "" when none
    decision_words: str = ""


def _decision_words(decision: Adjudication, responses: list[ItemResponse]) -> str:
    named = {response.id: response.label for response in responses}
    if decision.tiers:
        return " > ".join(" = ".join(named.get(response, f"#{response}") for response in tier)
                          for tier in decision.tiers)
    return "; ".join(f"{named.get(response, f'#{response}')} "
                     + " · ".join(label_words(aspect, value) for aspect, value in given.items())
                     for response, given in decision_labels(decision).items())


def decision_labels(decision: Adjudication) -> dict[int, dict[str, float]]:
    """A decision's labels with response ids as numbers (JSON keeps them as text)."""
    return {int(response): {aspect: float(value) for aspect, value in given.items()}
            for response, given in decision.labels.items()}


@dataclass(frozen=True)
class AdjudicationPage:
    """The first `shown` items of the queue, in its order, and the latest decisions, with how many there are."""

    queue: list[AdjudicationItem]
    queued: int
    decided: list[AdjudicationItem]
    decisions: int
    # one item asked for by its id (from its item page): shown alone, whatever its standing
    focus: AdjudicationItem | None = None


def _adjudication_item(prompt: Prompt, standing: ItemStanding | None) -> AdjudicationItem:
    detail = item_detail(prompt=prompt)
    decision = Adjudication.objects.filter(prompt=prompt).select_related("decided_by").first()
    return AdjudicationItem(
        detail=detail, agreement=standing.agreement if standing else None,
        source=standing.source if standing else "", queued=bool(standing and standing.queued), decision=decision,
        decision_words=_decision_words(decision, detail.responses) if decision else "")


def adjudication_page(project: Project, *, shown: int = 25, focus: Prompt | None = None) -> AdjudicationPage:
    """The adjudication page's items: each with every answer side by side, so only the first `shown` of the queue
    and of the decisions (latest first); `focus`: that item alone."""
    standings = item_standings(project_id=project.pk)
    queued = _queue_order(standings.values())
    decisions = Adjudication.objects.filter(prompt__project=project)
    page = AdjudicationPage(queue=[], queued=len(queued), decided=[], decisions=decisions.count())
    if focus is not None:
        return dataclasses.replace(page, focus=_adjudication_item(focus, standings.get(focus.pk)))
    prompts = Prompt.objects.filter(project=project).select_related("project")
    decided_prompts = [decision.prompt for decision in decisions.select_related("prompt", "prompt__project")
                       .order_by("-decided_at", "-pk")[:shown]]
    return dataclasses.replace(
        page, queue=[_adjudication_item(prompts.get(pk=standing.prompt_id), standing) for standing in queued[:shown]],
        decided=[_adjudication_item(prompt, standings.get(prompt.pk)) for prompt in decided_prompts])
