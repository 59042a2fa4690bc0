"""Models (base models and checkpoints), training runs, their metric rows and samples."""

from django.conf import settings
from django.db import models

from trainer.kinds import KINDS

# The config fields of a run that name a model (a ModelRef's path).
MODEL_FIELDS = ("model", "reference_model", "reward_model", "critic_model")
# A run logged through the API by a program outside Preflab: no trainer kind, no config class, never queued.
EXTERNAL_KIND = "external"


class ModelRef(models.Model):
    """A model usable as policy, reference, reward model or critic: a base model or a run's checkpoint."""

    class Source(models.TextChoices):
        LOCAL = "local", "local directory"
        HUB = "hub", "hub id"
        CHECKPOINT = "checkpoint", "checkpoint"

    class Architecture(models.TextChoices):
        """What the model computes, which decides the roles it can fill: a causal LM is a policy or a reference,
        a sequence classifier a reward model or a critic."""

        CAUSAL_LM = "causal_lm", "causal LM"
        CLASSIFIER = "classifier", "sequence classifier"
        UNKNOWN = "unknown", "kind unknown"

    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1000, unique=True, help_text="A directory under a model root, or a hub id.")
    source = models.CharField(max_length=20, choices=Source.choices)
    run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField(null=True, blank=True)
    architecture = models.CharField(max_length=20, choices=Architecture.choices, default=Architecture.UNKNOWN)
    has_optimizer_state = models.BooleanField(
        default=False, help_text="A checkpoint that still holds AdamW's moments (only a run's newest one does)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    # The choices come from the trainer's one list of kinds (trainer/kinds.py), e.g. Run.Kind.GRPO == "grpo",
    # plus the one kind the trainer knows nothing of: a run an outside program logs (Run.Kind.EXTERNAL).
    Kind = models.TextChoices("Kind", [
        *((kind.name.upper(), (kind.name, kind.label)) for kind in KINDS.values()),
        (EXTERNAL_KIND.upper(), (EXTERNAL_KIND, "external (logged through the API)")),
    ])

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELED = "canceled"

    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    config = models.JSONField(help_text="Validated by the trainer's dataclass for this kind.")
    data_source = models.JSONField(help_text='e.g. {"type": "arithmetic", "level": 1, "size": 64}')
    # The frozen snapshot of the training rows, written at launch (webapp.experiments.data_snapshot): the worker
    # trains from it, so rows annotated after the launch never change what the run trained on.
    data_rows = models.PositiveIntegerField(null=True, blank=True, help_text="Training rows in the snapshot.")
    data_sha256 = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the snapshot file's bytes.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    alerts = models.JSONField(default=list, blank=True)
    metric_names = models.JSONField(default=list, blank=True, help_text="Every metric name the run logged.")
    # An external run's metadata, as W&B's run.summary / run.tags / group: set at its start and updated while it
    # runs (services.external_run_update merges the summary; the tags are replaced as a whole).
    summary = models.JSONField(default=dict, blank=True, help_text="Final or latest figures, {name: JSON value}.")
    tags = models.JSONField(default=list, blank=True, help_text="Labels to find the run by, e.g. [\"baseline\"].")
    group = models.CharField(max_length=200, blank=True, help_text="Runs belonging together, e.g. a sweep's name.")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # failed by the reconcile because its heartbeats stopped (not by its program or an error): an external run so
    # failed still takes late rows and samples, and its program's next heartbeat or finish reopens or ends it
    heartbeat_lost = models.BooleanField(default=False)
    current_step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(null=True, blank=True)
    tokens_seen = models.BigIntegerField(default=0)
    checkpoint_path = models.CharField(max_length=1000, blank=True)
    # A run on several nodes, its last launch: {"id", "endpoint": "HOST:PORT", "nodes": N, "joined": {"0": worker,
    # ...}}; node 0 writes it and each joining worker claims its node rank in it (webapp.experiments.services.rendezvous).
    rendezvous = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="runs")
    created_at = models.DateTimeField(auto_now_add=True)
    # when it was last put on the queue: the reconcile's clock for a queued run whose message may be gone
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # hidden from the run list (and the API's) unless asked for; unarchiving clears it
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def is_external(self) -> bool:
        """Logged by a program outside Preflab: it cannot be launched, resumed or forked here."""
        return self.kind == EXTERNAL_KIND


class MetricRow(models.Model):
    """One logged step. Non-finite values are stored as the strings "NaN", "Infinity", "-Infinity"."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_rows")
    step = models.PositiveIntegerField()
    wall_time = models.FloatField(help_text="Unix time when the step was logged.")
    tokens_seen = models.BigIntegerField()
    metrics = models.JSONField()

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="metric_row_unique_step")]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step}"


class Sample(models.Model):
    """What the model actually wrote at a step, with its rewards per function."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="samples")
    step = models.PositiveIntegerField()
    prompt = models.TextField()
    completion = models.TextField()
    rewards = models.JSONField(default=dict)
    advantage = models.JSONField(null=True, blank=True, help_text="A float, or its non-finite spelling.")

    class Meta:
        ordering = ["run", "step", "id"]
        indexes = [models.Index(fields=["run", "step"])]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step} sample {self.pk}"


class SampleBatch(models.Model):
    """A batch of samples an external run's client sent, by the id the client gave it: a batch sent again (a
    retried request) is recognised and written once. Stored in the same transaction as its samples."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="sample_batches")
    batch_id = models.CharField(max_length=100)
    sample_count = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "batch_id"], name="sample_batch_unique_id")]

    def __str__(self) -> str:
        return f"run {self.run_id} sample batch {self.batch_id}"


class PeriodicJobClaim(models.Model):
    """When a periodic job (the reconcile of jobs, webapp.jobs) last acted, by the database's clock, and how often it
    has: a beat's tick that comes less than most of a period after the last act does nothing, so two beats (two
    default workers with -B, or a beat that outlived its worker) act once per period between them."""

    name = models.CharField(max_length=100, primary_key=True)
    acted_at = models.DateTimeField()
    acts = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}: acted {self.acts} times, last at {self.acted_at}"


class ChartPins(models.Model):
    """The charts a user pinned to the top of run pages, per run kind: a chart pinned on one GRPO run is pinned on
    every GRPO run this user opens, in any browser."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chart_pins")
    kind = models.CharField(max_length=20)
    metrics = models.JSONField(default=list, help_text="Metric names, in the order they were pinned.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "kind"], name="chart_pins_one_per_user_and_kind")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.kind}: {', '.join(self.metrics)}"
