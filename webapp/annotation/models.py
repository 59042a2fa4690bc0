"""Annotation data: projects, prompts and their responses, leases on items, rankings and the derived pairs.

Counters on Prompt (`response_count`, `ranking_count`) are kept by the services under the prompt's row lock,
because Postgres refuses aggregates in a `SELECT ... FOR UPDATE SKIP LOCKED` query: the queue orders and
filters on these columns instead.
"""

from django.conf import settings
from django.db import models

from trainer.config import SEED_MAX, TEMPERATURE_MAX
from webapp.annotation.modes import DEFAULT_MODE, MODES
from webapp.text import counted


class Project(models.Model):
    # The choices come from the one list of annotation modes (webapp/annotation/modes), e.g. Mode.PAIRWISE.
    Mode = models.TextChoices("Mode", [(mode.name.upper(), (mode.name, mode.label)) for mode in MODES.values()])

    name = models.CharField(max_length=200, unique=True)
    guidelines = models.TextField(blank=True, help_text="Markdown, shown to annotators one key away (G).")
    mode = models.CharField(max_length=16, choices=Mode.choices, default=DEFAULT_MODE)
    responses_per_item = models.PositiveSmallIntegerField(default=4)
    annotators_per_item = models.PositiveSmallIntegerField(default=1, help_text="Overlap: rankings wanted per item.")
    lease_minutes = models.PositiveSmallIntegerField(default=30)
    # The ratings mode's aspects, each rated on the scale below: [{"name": "helpfulness", "description": "..."}],
    # names unique; empty for other modes (a ratings project without aspects has one, "overall").
    rating_aspects = models.JSONField(default=list, blank=True)
    rating_min = models.SmallIntegerField(default=1)
    rating_max = models.SmallIntegerField(default=5)

    class SuggestionDisplay(models.TextChoices):
        OFF = "off", "Not shown"
        SHOWN = "shown", "Shown with the item"
        AFTER_ANSWER = "after_answer", "Shown after the annotator answers"

    class QueueOrder(models.TextChoices):
        LEAST_ANNOTATED = "least_annotated", "Least-annotated first"
        UNCERTAINTY = "uncertainty", "Least confident suggestion first"

    # Machine suggestions (Suggestion rows): whether annotators see them, and when; the queue may put the items whose
    # suggestion is least confident first (Label Studio's uncertainty sampling).
    suggestions_display = models.CharField(max_length=16, choices=SuggestionDisplay.choices,
                                           default=SuggestionDisplay.SHOWN)
    queue_order = models.CharField(max_length=16, choices=QueueOrder.choices, default=QueueOrder.LEAST_ANNOTATED)
    # Gold items (GoldAnswer) mixed into each annotator's queue: the share of their items that are gold, how many come
    # first as onboarding, how many gold answers are needed before accuracy is judged, the accuracy below which an
    # annotator is paused (0: never), and the seconds under which an answer counts as fast.
    gold_rate = models.FloatField(default=0.0, help_text="Share of each annotator's items that are gold, 0 to 1.")
    gold_onboarding = models.PositiveSmallIntegerField(default=0, help_text="Gold items given first.")
    gold_min_answers = models.PositiveSmallIntegerField(default=5, help_text="Gold answers before accuracy counts.")
    gold_min_accuracy = models.FloatField(default=0.0, help_text="Below it an annotator is paused; 0 never pauses.")
    fast_answer_seconds = models.FloatField(default=3.0, help_text="Answers faster than this are counted as fast.")
    # Adjudication: an item with at least this many answers whose agreement is below the threshold waits for a
    # researcher's decision (Adjudication).
    adjudication_min_answers = models.PositiveSmallIntegerField(default=2)
    adjudication_threshold = models.FloatField(default=0.6, help_text="Agreement below it sends an item to "
                                                                        "adjudication, 0 to 1.")
    # Who reaches the project (selectors.projects_visible_to): its owner, who created it (empty for a project made
    # before owners were recorded, or whose owner's account was removed), and its members: annotators annotate it,
    # researchers among them see and manage it as its owner does. Admins reach every project.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="owned_projects")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="annotation_projects", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # hidden from the project list (and the API's) unless asked for; unarchiving clears it
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(responses_per_item__gte=2), name="project_two_responses_or_more"),
            models.CheckConstraint(condition=models.Q(annotators_per_item__gte=1), name="project_overlap_positive"),
            models.CheckConstraint(condition=models.Q(lease_minutes__gte=1), name="project_lease_positive"),
            models.CheckConstraint(condition=models.Q(rating_max__gt=models.F("rating_min")),
                                   name="project_rating_scale_ordered"),
            models.CheckConstraint(condition=models.Q(gold_rate__gte=0, gold_rate__lte=1), name="project_gold_rate_share"),
            models.CheckConstraint(condition=models.Q(gold_min_accuracy__gte=0, gold_min_accuracy__lte=1),
                                   name="project_gold_accuracy_share"),
            models.CheckConstraint(condition=models.Q(adjudication_threshold__gte=0, adjudication_threshold__lte=1),
                                   name="project_adjudication_threshold_share"),
            models.CheckConstraint(condition=models.Q(adjudication_min_answers__gte=2),
                                   name="project_adjudication_two_answers_or_more"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def aspects(self) -> list[dict[str, str]]:
        """The aspects a ratings answer rates, each {name, description}: the project's, else the one "overall"."""
        return list(self.rating_aspects) or [dict(DEFAULT_RATING_ASPECT)]


DEFAULT_RATING_ASPECT = {"name": "overall", "description": "How good the response is, all things considered."}


class Round(models.Model):
    """One batch of responses added to a project's prompts: a sampling job's, or responses added through the API.
    A round that finds a prompt already holding responses puts its own in new items, each beside the response of
    the round it is compared with (services/rounds.py), so already-ranked items never change."""

    class Source(models.TextChoices):
        SAMPLED = "sampled", "Sampled by a job"
        API = "api", "Added through the API"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rounds")
    number = models.PositiveIntegerField(help_text="1, 2, ... within the project.")
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.SAMPLED)
    model = models.CharField(max_length=500, blank=True, help_text="The model its responses came from, as named.")
    responses_per_prompt = models.PositiveSmallIntegerField(default=0)
    compared_with = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "number"]
        constraints = [models.UniqueConstraint(fields=["project", "number"], name="round_number_unique")]

    def __str__(self) -> str:
        return f"round {self.number}"


class Prompt(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="prompts")
    external_id = models.CharField(max_length=200)
    text = models.TextField()
    messages = models.JSONField(null=True, blank=True, help_text="Chat messages [{role, content}], when imported so.")
    reference_answer = models.TextField(blank=True, help_text="For verifiable rewards; empty when there is none.")
    metadata = models.JSONField(default=dict, blank=True)
    # False for imported {prompt, chosen, rejected} rows: their preference exists already.
    annotatable = models.BooleanField(default=True)
    response_count = models.PositiveIntegerField(default=0)
    ranking_count = models.PositiveIntegerField(default=0, help_text="Submitted rankings, skips excluded.")
    # An item made for a round (null for one made before rounds, or imported); `origin` is the prompt it repeats
    # when a later round made a new item of an already-answered prompt.
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="items")
    origin = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="round_items")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["project", "external_id"], name="prompt_external_id_unique")]
        indexes = [models.Index(fields=["project", "annotatable", "ranking_count", "id"], name="prompt_queue_idx")]

    def __str__(self) -> str:
        return f"{self.external_id}: {self.text[:60]}"


class Response(models.Model):
    class Source(models.TextChoices):
        IMPORTED = "imported", "Imported"
        MODEL = "model", "Sampled from a model"
        RUN = "run", "Sampled from a run"
        API = "api", "Added through the API"

    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="responses")
    text = models.TextField()
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.IMPORTED)
    source_detail = models.JSONField(default=dict, blank=True, help_text="Model path and generation settings.")
    # the round it came from; a copy (copy_of) keeps the round of the response it copies
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="responses")
    copy_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="copies")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.text[:60]

    @property
    def model_name(self) -> str:
        """The model it came from: its round's, else the one its sampling recorded (empty when unknown)."""
        if self.round_id is not None:
            return self.round.model
        return str(self.source_detail.get("model", "")) if isinstance(self.source_detail, dict) else ""


class Assignment(models.Model):
    """A lease of one prompt to one annotator; an expired lease no longer holds a place in the overlap."""

    class Status(models.TextChoices):
        LEASED = "leased", "Leased"
        SUBMITTED = "submitted", "Submitted"
        SKIPPED = "skipped", "Skipped"

    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.LEASED)
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["prompt", "annotator"], name="assignment_once_per_person")]
        indexes = [models.Index(fields=["prompt", "status", "expires_at"], name="assignment_lease_idx")]

    def __str__(self) -> str:
        return f"{self.prompt_id} → {self.annotator_id} ({self.status})"


class Ranking(models.Model):
    """Tiers of response ids, best first; responses in one tier are tied."""

    assignment = models.OneToOneField(Assignment, on_delete=models.CASCADE, related_name="ranking")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="rankings")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="rankings")
    tiers = models.JSONField(default=list)
    all_bad = models.BooleanField(default=False)
    skipped = models.BooleanField(default=False)
    rationale = models.TextField(blank=True)
    seconds_spent = models.FloatField(default=0.0)
    # the machine suggestion the annotator accepted as this answer (a key), null when they answered themselves
    suggestion = models.ForeignKey("Suggestion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # an answer of a paused annotator (AnnotatorPause): out of training data and exports' training rows until a
    # researcher releases it
    held_back = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["prompt", "annotator"], name="ranking_once_per_person")]

    def __str__(self) -> str:
        return f"ranking {self.pk} of prompt {self.prompt_id} by {self.annotator_id}"


class ResponseLabel(models.Model):
    """One label on one response: a thumb (aspect "", value 1.0 up or 0.0 down) or a rating on one of the project's
    aspects (value on its scale). Given in an annotator's answer (`ranking` set: the Ranking row is the answer's
    envelope, with its assignment, skip, rationale and time; its tiers are empty in the thumbs and ratings modes) or
    imported (`ranking` and `annotator` null, `external_annotator` the file's name for who gave it, if any)."""

    THUMB = ""  # the aspect of a thumb

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="labels")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="labels")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="labels")
    ranking = models.ForeignKey(Ranking, null=True, blank=True, on_delete=models.CASCADE, related_name="labels")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    external_annotator = models.CharField(max_length=200, blank=True)
    aspect = models.CharField(max_length=100, blank=True)
    value = models.FloatField()
    # the machine suggestion this label took its value from (accepted by a key), null when the annotator gave it
    suggestion = models.ForeignKey("Suggestion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["ranking", "response", "aspect"], name="label_once_per_answer",
                                    condition=models.Q(ranking__isnull=False)),
        ]
        indexes = [models.Index(fields=["project", "prompt"], name="label_project_prompt_idx")]

    def __str__(self) -> str:
        return f"label {self.aspect or 'thumb'}={self.value:g} on response {self.response_id}"


class Suggestion(models.Model):
    """A machine's suggested answer to one question of an item, never an annotator's: imported (Argilla's
    `<question>.suggestion`, `.suggestion.score`, `.suggestion.agent`) or computed by a job. `question` names
    what it answers ("ranking", "thumb", an aspect, or the imported question's name); `value` is that answer as
    the question takes it (tiers, 1/0, a rating, a label)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="suggestions")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="suggestions")
    response = models.ForeignKey(Response, null=True, blank=True, on_delete=models.CASCADE, related_name="suggestions")
    question = models.CharField(max_length=200)
    value = models.JSONField()
    # the confidence of a computed suggestion, 0 to 1 (an imported one keeps the file's score)
    score = models.FloatField(null=True, blank=True)
    agent = models.CharField(max_length=200, blank=True)
    # the job that computed it (null when imported)
    job = models.ForeignKey("SuggestionJob", null=True, blank=True, on_delete=models.CASCADE, related_name="suggestions")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"suggestion for {self.question} of prompt {self.prompt_id} by {self.agent or 'unknown'}"


class PreferencePair(models.Model):
    """A chosen/rejected pair: derived from a ranking (all C(K,2) pairs minus ties) or imported as such."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="pairs")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="pairs")
    ranking = models.ForeignKey(Ranking, on_delete=models.CASCADE, related_name="pairs", null=True, blank=True)
    chosen = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    rejected = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="+")
    weight = models.FloatField()
    margin = models.FloatField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(chosen=models.F("rejected")), name="pair_distinct_responses")
        ]

    def __str__(self) -> str:
        return f"pair {self.pk}: {self.chosen_id} > {self.rejected_id}"


# A sampling job's generation settings (its JSON field) and the least and most each may be: the sampling form's fields
# and sampling_job_create check them alike, so no value can fail only on the worker. The seed and temperature are
# bounded as a run's are (trainer.config); 16 responses per prompt and 4,096 new tokens bound a job's work per prompt,
# and 256 prompts (4,096 sequences) one generation batch's.
GENERATION_SETTING_BOUNDS: dict[str, tuple[int | float, int | float]] = {
    "responses_per_prompt": (2, 16),
    "max_new_tokens": (1, 4096),
    "temperature": (0.0, TEMPERATURE_MAX),
    "top_p": (0.01, 1.0),
    "seed": (0, SEED_MAX),
    "batch_size": (1, 256),
}
WHOLE_NUMBER_SETTINGS = ("responses_per_prompt", "max_new_tokens", "seed", "batch_size")
# set by a program, not the form: the worker's default when left out (workers/sampling.py)
OPTIONAL_SETTINGS = {"batch_size": 8}


class GpuJob(models.Model):
    """What a job on the gpu queue records of its life (webapp/job_lifecycle.py): a sampling job, a round scoring."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELED = "canceled", "Canceled"

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # when it was last put on the queue: the reconcile's clock for a queued job whose message may be gone
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # the worker's last sign of life while running; a stale one means the worker was killed or lost
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def percent(self) -> int:
        return round(100 * self.progress_done / self.progress_total) if self.progress_total else 0


class SamplingJob(GpuJob):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sampling_jobs")
    round = models.OneToOneField(Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="sampling_job")
    model_path = models.CharField(max_length=500)
    generation_settings = models.JSONField(default=dict)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"sampling job {self.pk} ({self.status})"


class ImportJob(models.Model):
    """An uploaded import file and the job that imports it on the default queue (workers/importing.py): every
    row is read and checked first, with progress, then all are written in one transaction. The kept upload is
    removed when the job ends."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    class Stage(models.TextChoices):
        CHECKING = "checking", "Checking rows"
        WRITING = "writing", "Writing"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="import_jobs")
    file_name = models.CharField(max_length=255, help_text="As uploaded.")
    file_format = models.CharField(max_length=8)
    upload_path = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    stage = models.CharField(max_length=16, choices=Stage.choices, blank=True)
    bytes_total = models.PositiveBigIntegerField(default=0)
    bytes_done = models.PositiveBigIntegerField(default=0)
    rows_checked = models.PositiveIntegerField(default=0)
    created_count = models.PositiveIntegerField(default=0, help_text="Prompts added.")
    already_present = models.PositiveIntegerField(default=0, help_text="Rows whose id the project holds already.")
    responses_count = models.PositiveIntegerField(default=0)
    pairs_count = models.PositiveIntegerField(default=0)
    labels_count = models.PositiveIntegerField(default=0, help_text="Imported thumbs and ratings.")
    suggestions_count = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # where a refused file is at fault: 0 for the file as a whole, None when the job failed for another reason
    error_line = models.PositiveIntegerField(null=True, blank=True)
    error_field = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # the reconcile's clocks, as for sampling jobs: when it was put on the queue, the worker's last sign of life
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import job {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def outcome(self) -> str:
        """What a finished job did, in words."""
        if self.status == self.Status.FAILED:
            return f"Nothing was imported from {self.file_name}: {self.error}"
        contents = [counted(self.responses_count, "response"), counted(self.pairs_count, "preference pair")]
        contents += [counted(count, noun) for count, noun in ((self.labels_count, "label"),
                                                              (self.suggestions_count, "suggestion")) if count]
        return (f"Imported {counted(self.created_count, 'prompt')} ({', '.join(contents)}) from {self.file_name}; "
                f"{self.already_present} were already in the project.")


class RoundScoring(GpuJob):
    """A reward model's scores for every response of a round's items, computed on a GPU worker
    (workers/scoring.py): the round's win rate by the reward model is read from them (selectors.round_rows)."""

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="scorings")
    reward_run = models.ForeignKey("experiments.Run", null=True, on_delete=models.SET_NULL, related_name="+")
    # the checkpoint scored with, as it was when the job was made: the run's checkpoint may move later
    checkpoint_path = models.CharField(max_length=1000)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"round scoring {self.pk} ({self.status})"


class RewardScore(models.Model):
    """One response's score by the reward model of a round scoring."""

    scoring = models.ForeignKey(RoundScoring, on_delete=models.CASCADE, related_name="scores")
    response = models.ForeignKey(Response, on_delete=models.CASCADE, related_name="reward_scores")
    score = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scoring", "response"], name="reward_score_unique")]

    def __str__(self) -> str:
        return f"response {self.response_id}: {self.score:g}"


class SuggestionJob(GpuJob):
    """Machine suggestions for a round's items (or every item of a project), computed on a GPU worker
    (workers/suggesting.py): by a reward-model run's scores, or by a judge model comparing each two responses in
    both orders. A judge's comparisons and how many of them the order decided are kept: its position bias."""

    class Source(models.TextChoices):
        REWARD_MODEL = "reward_model", "Reward model"
        JUDGE = "judge", "Judge model"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="suggestion_jobs")
    round = models.ForeignKey(Round, null=True, blank=True, on_delete=models.CASCADE, related_name="suggestion_jobs")
    source = models.CharField(max_length=16, choices=Source.choices)
    reward_run = models.ForeignKey("experiments.Run", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    # the reward model's checkpoint or the judge model's path or hub id, as it was when the job was made
    model_path = models.CharField(max_length=1000)
    # what its suggestions' `agent` says, e.g. "reward model run #12" or "judge SmolLM2-135M-Instruct"
    agent = models.CharField(max_length=200)
    judge_comparisons = models.PositiveIntegerField(default=0, help_text="Comparisons made in both orders.")
    judge_order_decided = models.PositiveIntegerField(default=0, help_text="Of them, those whose two orders "
                                                                           "disagreed: the position decided.")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"suggestion job {self.pk} ({self.status})"

    @property
    def position_bias(self) -> float | None:
        """The share of a judge's comparisons that the order of the two responses decided; None before any."""
        return self.judge_order_decided / self.judge_comparisons if self.judge_comparisons else None


class GoldAnswer(models.Model):
    """An item marked gold by a researcher, with its right answer: `tiers` of response ids (ranking modes) or
    `labels` {response id: {aspect: value}} (thumbs: aspect ""). Annotators' answers to it are checked against it."""

    prompt = models.OneToOneField(Prompt, on_delete=models.CASCADE, related_name="gold")
    tiers = models.JSONField(default=list, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    explanation = models.TextField(blank=True, help_text="Shown to an annotator who answered it otherwise.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"gold answer of prompt {self.prompt_id}"


class AnnotatorPause(models.Model):
    """An annotator paused in a project because their quality fell below its threshold: no more items, and their
    answers held back (Ranking.held_back) until a researcher decides to release them (the annotator resumes) or to
    drop them from training for good."""

    class Decision(models.TextChoices):
        PENDING = "pending", "Waiting for a researcher"
        RELEASED = "released", "Answers released, annotator resumed"
        DROPPED = "dropped", "Answers kept out of training"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="pauses")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.TextField()
    decision = models.CharField(max_length=16, choices=Decision.choices, default=Decision.PENDING)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["project", "annotator"], condition=models.Q(decision="pending"),
                                               name="one_pending_pause_per_annotator")]

    def __str__(self) -> str:
        return f"pause of {self.annotator_id} in project {self.project_id} ({self.decision})"


class Adjudication(models.Model):
    """A researcher's decision on an item whose annotators disagreed: the answer that stands (`tiers` of response
    ids, or `labels` {response id: {aspect: value}}) and why. Its item's training rows are the decided answer's."""

    prompt = models.OneToOneField(Prompt, on_delete=models.CASCADE, related_name="adjudication")
    tiers = models.JSONField(default=list, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    reason = models.TextField()
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    decided_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"adjudication of prompt {self.prompt_id}"
