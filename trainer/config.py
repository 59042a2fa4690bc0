"""One dataclass per run kind, with help texts for the web's launch forms and validation with clear messages.

This module must not import torch or transformers: the web process builds its forms from these classes.

Field metadata: "help" (shown in the form), "group" (model | optimisation | processes | data | logging | advanced),
"test_only" (hidden by the web; e.g. forcing a NaN loss to test the divergence path), "maximum" (the largest value
`validate` accepts; the bounds below say why each is what it is).

Every number is bounded, so that no value a form or a program sends can stall a worker or fail only once it trains:
a lower bound where the field's meaning has one, an upper bound from what holds the value (a run's step columns, the
seeds torch takes) or from what a larger value would cost, and for floats finiteness. Coefficients that only scale a
finite term (max_grad_norm, beta, the loss weights, the alert thresholds) have no upper bound but that one: any finite
value is a choice, and costs nothing more. The bounds that need the data's size are `check_data_size`'s.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from trainer.rewards import check_reward_weights

LrScheduler = Literal["linear", "cosine", "constant"]
DpoLossType = Literal["sigmoid", "ipo", "hinge"]
Precision = Literal["auto", "fp32", "bf16-mixed", "bf16"]
Parallelism = Literal["ddp", "fsdp"]

# Pure bf16 training is refused below this learning rate. AdamW moves a weight by about lr per step, and bf16
# keeps 8 significant bits, so a step is rounded away unless lr > |w| * 2^-9. Measured on 1,000 weights drawn
# N(0, 0.02) (the usual initializer range), one AdamW step changes 2% of them at 1e-6, 15% at 1e-5, 30% at
# 3e-5 and 87% at 1e-4 (fp32: all of them at every lr): below 1e-4 most of a model would not learn.
PURE_BF16_MIN_LR = 1e-4


# A run's steps are stored as Postgres integers (Run.current_step, total_steps, MetricRow.step): a run of more steps
# could not record its progress. Every step-valued field (max_steps, warmup_steps, the every-N-steps fields) shares it.
STEPS_MAX = 2**31 - 1
# torch.manual_seed takes a 64-bit number; a seed stays within the signed range every tool holds (numpy's legacy
# generator takes 32 bits: seed_everything folds the seed into them).
SEED_MAX = 2**63 - 1
# Examples in one step: a million is past what one step holds in memory on any device (the data's size bounds it
# further, check_data_size).
BATCH_SIZE_MAX = 2**20
# Tokens in one sequence (and generated per completion): past any model's context, and one sequence's activations
# at that length already fill a GPU.
SEQUENCE_MAX = 2**20
# Passes over the data: more repeat a data set a thousand times over, which max_steps says better.
EPOCHS_MAX = 10_000
# A LoRA rank (and alpha) past the widest hidden size of any model adapts nothing more than a full update does.
LORA_RANK_MAX = 2**16
# Processes: one per GPU on a node (a CPU-only node runs as many gloo processes, which 64 CPU cores already hold), and
# nodes: each one another gpu worker asked to join by a message of its own.
PROCESSES_PER_NODE_MAX = 64
NODES_MAX = 256
# Completions sampled per prompt (G) and completions recorded per log: each multiplies a step's generation work.
GROUP_SIZE_MAX = 1024
SAMPLES_PER_LOG_MAX = 1024
# Updates of one batch (GRPO's mu, PPO's epochs) and generation rounds of one step (DAPO): each repeats a step's work.
REPEATS_MAX = 1024
# Sampling among the k most likely tokens: past any vocabulary's size it is the same as off.
TOP_K_MAX = 2**20
# The sampling temperature: at 5 a small model's distribution is already close to uniform; the sampling form of a
# project takes the same bound.
TEMPERATURE_MAX = 5.0


class ConfigError(ValueError):
    """A config value is wrong; `field` names it so a form can show the message next to it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# Run alerts (raised by the web app from the logged metrics); the online kinds can set their own.
DEFAULT_ALERT_KL_ABOVE = 1.0
# a whole completion's KL (KTO's estimate): nats summed over its tokens
KTO_DEFAULT_ALERT_KL_ABOVE = 10.0
DEFAULT_ALERT_ENTROPY_BELOW = 0.05


def _option(default: Any, help: str, group: str, *, maximum: float | None = None, **extra: Any) -> Any:
    metadata = {"help": help, "group": group, **extra}
    if maximum is not None:
        metadata["maximum"] = maximum
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _share_prefix_option() -> Any:
    return _option(
        True,
        "Pack each pair into one sequence so the tokens chosen and rejected share (the prompt and any common "
        "start) are computed once; same results, fewer tokens. Used where the architecture allows it.",
        "advanced",
    )


def _required(help: str, group: str) -> Any:
    return field(metadata={"help": help, "group": group})


@dataclass(kw_only=True)
class BaseConfig:
    """Fields every offline and online training run shares."""

    model: str = _required("Policy / base model: a local directory or a Hugging Face hub id.", "model")
    output_dir: str = _required("Directory for metrics.jsonl, samples.jsonl and checkpoints/.", "logging")
    seed: int = _option(0, "Seed for data order, initialisation and sampling; same seed, same numbers.", "advanced",
                        maximum=SEED_MAX)

    # AdamW moves each weight by about lr per step: past 1, a step is larger than any weight a model holds
    lr: float = _option(1e-5, "Peak learning rate (AdamW).", "optimisation", maximum=1.0)
    # AdamW multiplies each weight by 1 - lr * weight_decay per step: at most 1 (with lr <= 1), never past zero
    weight_decay: float = _option(0.0, "AdamW weight decay.", "optimisation", maximum=1.0)
    lr_scheduler: LrScheduler = _option("linear", "Decay after warm-up: linear to 0, cosine to 0, or constant.", "optimisation")
    warmup_steps: int = _option(0, "Linear warm-up steps; when 0, warmup_ratio is used.", "optimisation",
                                maximum=STEPS_MAX)
    warmup_ratio: float = _option(0.0, "Warm-up as a fraction of all steps (used when warmup_steps is 0).", "optimisation")
    max_steps: int | None = _option(None, "Optimizer steps to run; when empty, `epochs` passes over the data.",
                                    "optimisation", maximum=STEPS_MAX)
    epochs: float = _option(1.0, "Passes over the training data (used when max_steps is empty).", "optimisation",
                            maximum=EPOCHS_MAX)
    batch_size: int = _option(8, "Examples per optimizer step (split into grad_accum_steps micro-batches); at most "
                              "the data's rows.", "optimisation", maximum=BATCH_SIZE_MAX)
    # at most batch_size, which bounds it: each micro-batch holds at least one example
    grad_accum_steps: int = _option(1, "Micro-batches per optimizer step; must divide batch_size.", "optimisation")
    max_grad_norm: float = _option(1.0, "Clip the global gradient norm to this; 0 turns clipping off.", "optimisation")

    max_length: int = _option(512, "Longest prompt + completion in tokens; longer completions are cut.", "data",
                              maximum=SEQUENCE_MAX)
    max_prompt_length: int | None = _option(
        None, "Longest prompt in tokens; a longer prompt is a data error. Empty: half of max_length.", "data"
    )

    log_every: int = _option(1, "Log metrics every N steps.", "logging", maximum=STEPS_MAX)
    sample_every: int = _option(0, "Record model samples every N steps (0: never).", "logging", maximum=STEPS_MAX)
    eval_every: int = _option(0, "Evaluate on the held-out data every N steps (0: only at the end).", "logging",
                              maximum=STEPS_MAX)
    checkpoint_every: int = _option(0, "Write a resumable checkpoint every N steps (0: only at the end).", "logging",
                                    maximum=STEPS_MAX)
    keep_last: int = _option(
        3, "Checkpoints kept on disk: older ones are deleted unless another run uses them (0: keep all).", "logging",
        maximum=STEPS_MAX,
    )
    resume_from: str | None = _option(None, "Checkpoint directory (…/checkpoints/step-N) to continue from.", "advanced")

    use_lora: bool = _option(False, "Train LoRA adapters instead of all weights (peft).", "model")
    lora_r: int = _option(16, "LoRA rank.", "model", maximum=LORA_RANK_MAX)
    lora_alpha: int = _option(32, "LoRA alpha (scaling = alpha / r).", "model", maximum=LORA_RANK_MAX)
    lora_dropout: float = _option(0.05, "Dropout on the LoRA path, in [0, 1).", "model")
    lora_target_modules: list[str] = _option(
        ["all-linear"], "Module names to adapt; 'all-linear' adapts every linear layer but the head.", "model"
    )
    gradient_checkpointing: bool = _option(False, "Recompute activations in backward to save memory.", "model")
    precision: Precision = _option(
        "auto",
        "auto: bf16-mixed on a GPU with bf16, else fp32. bf16-mixed: fp32 weights and optimizer state, the "
        "forward in bf16 (autocast), frozen models in bf16. bf16: everything in bf16, refused at learning rates "
        f"below {PURE_BF16_MIN_LR:g}, where bf16 rounds AdamW's updates away.",
        "model",
    )

    num_processes: int = _option(
        1,
        "Training processes in all (over every node), one per GPU (on a machine without GPUs, CPU processes talking "
        "over gloo). Above 1 the worker starts the run with torchrun; batch_size stays the batch of the whole step, "
        "split among them.",
        "processes",
        maximum=NODES_MAX * PROCESSES_PER_NODE_MAX,
    )
    num_nodes: int = _option(
        1,
        "Machines the run spans, one gpu worker each: each runs num_processes / num_nodes processes (so "
        "num_processes must be a multiple of it). Above 1 the worker that takes the run asks num_nodes - 1 idle gpu "
        "workers to join it (torchrun's rendezvous across nodes); the run fails if they do not join in time.",
        "processes",
        maximum=NODES_MAX,
    )
    parallelism: Parallelism = _option(
        "ddp",
        "ddp: every process holds the whole model and gradients are summed across processes. fsdp: weights, "
        "gradients and optimizer state are sharded per decoder layer (FSDP2), for models one device cannot hold. "
        "Ignored with one process.",
        "processes",
    )

    debug_nan_at_step: int | None = _option(
        None, "Force the loss to NaN at this step (tests the divergence path).", "advanced", test_only=True,
        maximum=STEPS_MAX,
    )
    debug_hang_at_step: int | None = _option(
        None, "Hang at the start of this step for ever, deaf to a cancel (tests that the worker ends such a run).",
        "advanced", test_only=True, maximum=STEPS_MAX,
    )

    def __post_init__(self) -> None:
        # limits left empty follow the ones they depend on, so changing max_length alone stays valid
        if self.max_prompt_length is None and _is_int(self.max_length):
            self.max_prompt_length = self.derived_max_prompt_length()

    def derived_max_prompt_length(self) -> int:
        return self.max_length // 2

    @property
    def processes_per_node(self) -> int:
        return self.num_processes // self.num_nodes

    def validate(self) -> None:
        """Raise ConfigError naming the first wrong field."""
        _check_types(self)
        _check_finite_and_maxima(self)
        for name in ("model", "output_dir"):
            if not getattr(self, name).strip():
                raise ConfigError(name, "is required")
        _positive(self, "lr", "batch_size", "grad_accum_steps", "max_length", "max_prompt_length", "log_every")
        _non_negative(self, "seed", "weight_decay", "warmup_steps", "max_grad_norm", "sample_every", "eval_every")
        _non_negative(self, "checkpoint_every", "keep_last")
        if self.max_steps is not None and self.max_steps <= 0:
            raise ConfigError("max_steps", f"must be > 0 (or empty to use epochs), got {self.max_steps}")
        if self.max_steps is None and self.epochs <= 0:
            raise ConfigError("epochs", f"must be > 0, got {self.epochs}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError("warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        if self.grad_accum_steps > self.batch_size:
            raise ConfigError(
                "grad_accum_steps",
                f"must be <= batch_size={self.batch_size} (each micro-batch holds at least one example), "
                f"got {self.grad_accum_steps}",
            )
        if self.batch_size % self.grad_accum_steps:
            raise ConfigError(
                "batch_size",
                f"{self.batch_size} is not divisible by grad_accum_steps={self.grad_accum_steps}",
            )
        _check_processes(self)
        if self.max_prompt_length >= self.max_length:
            raise ConfigError(
                "max_prompt_length",
                f"must be smaller than max_length={self.max_length} (leave room for the completion)",
            )
        if self.use_lora:
            _positive(self, "lora_r", "lora_alpha")
            if not self.lora_target_modules:
                raise ConfigError("lora_target_modules", "needs at least one module name")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError("lora_dropout", f"must be in [0, 1), got {self.lora_dropout}")
        for name in ("debug_nan_at_step", "debug_hang_at_step"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(name, "must be >= 1 (steps count from 1)")
        _check_pure_bf16(self, "lr", self.lr)


@dataclass(kw_only=True)
class RewardModelConfig(BaseConfig):
    """Bradley-Terry reward model on preference pairs (InstructGPT): one scalar per sequence."""

    lr: float = _option(1e-4, "Peak learning rate (AdamW).", "optimisation", maximum=1.0)
    center_coef: float = _option(
        0.0, "Weight of mean((r_chosen + r_rejected)^2), which keeps rewards centred on 0 (0.01 in TRL).", "optimisation"
    )
    share_prefix: bool = _share_prefix_option()

    def validate(self) -> None:
        super().validate()
        _non_negative(self, "center_coef")


@dataclass(kw_only=True)
class SFTConfig(BaseConfig):
    """Supervised fine-tuning on prompt / completion rows; the loss covers completion tokens only."""

    lr: float = _option(2e-5, "Peak learning rate (AdamW).", "optimisation", maximum=1.0)
    eval_max_new_tokens: int = _option(64, "Tokens generated per held-out prompt for eval/accuracy.", "logging",
                                       maximum=SEQUENCE_MAX)

    def validate(self) -> None:
        super().validate()
        _positive(self, "eval_max_new_tokens")


@dataclass(kw_only=True)
class ReferenceConfig(BaseConfig):
    """The fields of the offline kinds that train a policy against a frozen reference model (DPO, KTO)."""

    lr: float = _option(1e-6, "Peak learning rate (AdamW); training against a reference wants a small one.",
                        "optimisation", maximum=1.0)
    beta: float = _option(0.1, "Strength of the implicit KL to the reference (0.1 in the papers).", "optimisation")
    reference_model: str | None = _option(None, "Reference model; empty means the starting policy.", "model")
    share_prefix: bool = _share_prefix_option()
    eval_max_new_tokens: int = _option(64, "Tokens generated per held-out prompt for eval/accuracy.", "logging",
                                       maximum=SEQUENCE_MAX)

    def validate(self) -> None:
        super().validate()
        _positive(self, "beta", "eval_max_new_tokens")


@dataclass(kw_only=True)
class DPOConfig(ReferenceConfig):
    """Direct Preference Optimisation (Rafailov et al. 2023) against a frozen reference model."""

    loss_type: DpoLossType = _option("sigmoid", "sigmoid (DPO), ipo (IPO, length-averaged log-probs) or hinge (SLiC).", "optimisation")
    label_smoothing: float = _option(0.0, "Assumed label noise for conservative DPO (sigmoid loss only).", "optimisation")
    rpo_alpha: float = _option(
        0.0,
        "Weight of a per-token NLL loss on the chosen completions (RPO, Pang et al. 2024); keeps their likelihood up.",
        "optimisation",
    )
    precompute_ref_logps: bool = _option(
        True, "Compute reference log-probs once before training and free the reference model.", "advanced"
    )

    def validate(self) -> None:
        super().validate()
        _non_negative(self, "rpo_alpha")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ConfigError("label_smoothing", f"must be in [0, 0.5), got {self.label_smoothing}")
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ConfigError("label_smoothing", f"applies to the sigmoid loss only, not {self.loss_type!r}")


@dataclass(kw_only=True)
class KTOConfig(ReferenceConfig):
    """Kahneman-Tversky Optimisation (Ethayarajh et al. 2024) on unpaired rows, each completion labelled desirable
    (a thumbs up) or undesirable, against a frozen reference model kept for the whole run: the batch's KL estimate
    pairs each prompt with another row's completion, and those pairs change every step."""

    desirable_weight: float = _option(
        1.0,
        "Weight of the losses of desirable (thumbs-up) rows. With unbalanced data, the paper keeps "
        "desirable_weight x desirable rows / (undesirable_weight x undesirable rows) in [1, 4/3].",
        "optimisation",
    )
    undesirable_weight: float = _option(1.0, "Weight of the losses of undesirable (thumbs-down) rows.", "optimisation")
    # KTO's "kl" is a whole completion's log-ratio (summed over its tokens), where the online kinds log a per-token
    # mean: the alert's default is on that scale, or a normal run would be flagged
    alert_kl_above: float = _option(
        KTO_DEFAULT_ALERT_KL_ABOVE,
        "Flag the run (on its page) when KTO's KL estimate (the policy's log-ratio to the reference on mismatched "
        "completions, summed over a completion's tokens) rises above this. 0 turns the alert off.",
        "logging",
    )
    share_prefix: bool = _option(
        True,
        "In the reference's forward, pack each row's sequence and its KL sequence (its prompt with another row's "
        "completion) into one, so their shared prompt is computed once; same results, fewer tokens. Used where the "
        "architecture allows it.",
        "advanced",
    )

    def validate(self) -> None:
        super().validate()
        _non_negative(self, "desirable_weight", "undesirable_weight", "alert_kl_above")
        if not self.desirable_weight and not self.undesirable_weight:
            raise ConfigError("desirable_weight", "desirable_weight and undesirable_weight are both 0: nothing to learn")
        if self.batch_size // (self.grad_accum_steps * self.num_processes) < 2:
            raise ConfigError(
                "batch_size",
                f"KTO's KL estimate pairs each prompt with another completion of its micro-batch, so each micro-batch "
                f"needs at least 2 rows; batch_size {self.batch_size} over grad_accum_steps={self.grad_accum_steps} x "
                f"num_processes={self.num_processes} gives {self.batch_size // (self.grad_accum_steps * self.num_processes)}",
            )


def config_to_dict(config: BaseConfig) -> dict[str, Any]:
    """Plain JSON-ready dict of every field (the inverse of config_from_dict)."""
    return dataclasses.asdict(config)


def _check_processes(config: BaseConfig) -> None:
    """The step's batch splits evenly: each process takes batch_size / num_processes examples (prompts, for the
    online kinds, whose groups never span processes), in grad_accum_steps micro-batches."""
    _positive(config, "num_processes", "num_nodes")
    processes = config.num_processes
    if processes // config.num_nodes > PROCESSES_PER_NODE_MAX:
        raise ConfigError(
            "num_processes",
            f"{processes} processes on {config.num_nodes} node(s) are {processes // config.num_nodes} per node, more "
            f"than {PROCESSES_PER_NODE_MAX} (one per GPU of a machine)",
        )
    if processes % config.num_nodes:
        raise ConfigError(
            "num_nodes",
            f"num_processes={processes} does not split evenly over num_nodes={config.num_nodes}: every node runs "
            f"the same number of processes, so num_processes (the total over all nodes) must be a multiple of "
            f"{config.num_nodes}",
        )
    per_process = processes * config.grad_accum_steps
    if config.batch_size % per_process:
        raise ConfigError(
            "batch_size",
            f"{config.batch_size} does not split evenly over num_processes={processes} x grad_accum_steps="
            f"{config.grad_accum_steps} (= {per_process}); choose a multiple of {per_process}",
        )
    if processes > 1 and config.parallelism == "fsdp" and config.use_lora:
        raise ConfigError("parallelism", "LoRA runs hold few trainable weights: use ddp, not fsdp")


def check_data_size(config: BaseConfig, rows: int) -> None:
    """The bounds that follow from the data's size (`rows` training rows: examples, pairs or prompts), which the web
    knows at launch and the trainer once it has read the data: a step draws its batch without taking a row twice, and
    the steps that `epochs` passes make fit a run's step counter."""
    if rows < 1:
        raise ConfigError("batch_size", "the data has no rows to train on")
    if config.batch_size > rows:
        raise ConfigError(
            "batch_size",
            f"{config.batch_size} is more than the data's {rows} rows: a step would take rows twice; choose at most "
            f"{rows}",
        )
    if config.max_steps is None:
        steps = math.ceil(config.epochs * rows / config.batch_size)
        if steps > STEPS_MAX:
            raise ConfigError(
                "epochs",
                f"{config.epochs:g} passes over {rows} rows in batches of {config.batch_size} are {steps} steps, more "
                f"than a run counts ({STEPS_MAX}); set max_steps or fewer epochs",
            )


def _check_finite_and_maxima(config: BaseConfig) -> None:
    """Every float finite, every number at most its field's maximum (the bounds of this module's docstring)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f.name, f"must be a finite number, got {value}")
        maximum = f.metadata.get("maximum")
        if maximum is not None and value is not None and value > maximum:
            raise ConfigError(f.name, f"must be <= {maximum:g}, got {value}" if isinstance(maximum, float)
                              else f"must be <= {maximum}, got {value}")


def _positive(config: BaseConfig, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value <= 0:
            raise ConfigError(name, f"must be > 0, got {value}")


def _non_negative(config: BaseConfig, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value < 0:
            raise ConfigError(name, f"must be >= 0, got {value}")


def _check_pure_bf16(config: BaseConfig, name: str, lr: float) -> None:
    if config.precision == "bf16" and lr < PURE_BF16_MIN_LR:
        raise ConfigError(
            "precision",
            f"pure bf16 is refused at {name}={lr:g} (below {PURE_BF16_MIN_LR:g}): AdamW would step bf16 weights, "
            "whose 8-bit mantissa rounds away updates smaller than about 2^-9 of a weight, so most weights would "
            "never change; use 'bf16-mixed' (fp32 weights and optimizer state, bf16 compute)",
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_types(config: BaseConfig) -> None:
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        expected = hints[f.name]
        if not _matches(value, expected):
            raise ConfigError(f.name, f"expected {_describe(expected)}, got {value!r} ({type(value).__name__})")


def _matches(value: Any, expected: Any) -> bool:
    origin = typing.get_origin(expected)
    if origin is Literal:
        return isinstance(value, str) and value in typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(expected))
    if origin is list:
        (item_type,) = typing.get_args(expected)
        return isinstance(value, list) and all(_matches(item, item_type) for item in value)
    if origin is dict:
        key_type, value_type = typing.get_args(expected)
        return isinstance(value, dict) and all(
            _matches(key, key_type) and _matches(item, value_type) for key, item in value.items()
        )
    if expected is type(None):
        return value is None
    if expected is float:
        # JSON writes 1.0 as 1, so ints are fine where floats are expected (bools are not numbers here)
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return _is_int(value)
    return isinstance(value, expected)


def _describe(expected: Any) -> str:
    origin = typing.get_origin(expected)
    if origin is Literal:
        return "one of " + ", ".join(repr(option) for option in typing.get_args(expected))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in typing.get_args(expected))
    if origin is list:
        return f"a list of {_describe(typing.get_args(expected)[0])}"
    if origin is dict:
        key_type, value_type = typing.get_args(expected)
        return f"a mapping of {_describe(key_type)} to {_describe(value_type)}"
    if expected is type(None):
        return "empty (null)"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(expected, str(expected))


# --- Online kinds (GRPO with its DAPO / Dr. GRPO options, PPO): sampling from the policy and rewards ---

LossAggregation = Literal["sequence-mean", "token-mean", "constant"]
AdvantageScale = Literal["group", "batch", "none"]
# trainer.decoding.generation.DECODING_MODES
Decoding = Literal["auto", "eager", "static"]


@dataclass(kw_only=True)
class OnlineConfig(BaseConfig):
    """Fields shared by the kinds that sample completions and score them with rewards."""

    lr: float = _option(1e-6, "Peak learning rate (AdamW); 1e-6 in DeepSeekMath and DAPO.", "optimisation",
                        maximum=1.0)
    batch_size: int = _option(8, "Prompts per step (each is sampled, then scored); at most the data's prompts.",
                              "optimisation", maximum=BATCH_SIZE_MAX)
    max_new_tokens: int = _option(256, "Longest completion in tokens; longer ones are cut (truncated).", "data",
                                  maximum=SEQUENCE_MAX)
    max_prompt_length: int | None = _option(
        None, "Longest prompt in tokens; a longer prompt is a data error. Empty: max_length - max_new_tokens.", "data"
    )
    temperature: float = _option(1.0, "Sampling temperature; log-probs are taken at the same temperature.", "data",
                                 maximum=TEMPERATURE_MAX)
    top_p: float = _option(1.0, "Nucleus sampling: keep the most likely tokens up to this mass (1: off).", "data")
    top_k: int = _option(0, "Sample among the k most likely tokens only (0: off).", "data", maximum=TOP_K_MAX)
    reference_model: str | None = _option(None, "Frozen reference for the KL term; empty means the starting policy.", "model")
    rewards: dict[str, float] = field(
        default_factory=lambda: {"answer_match": 1.0},
        metadata={"help": "Rule-based reward functions and their weights (trainer.rewards.REWARD_FUNCTIONS).",
                  "group": "optimisation"},
    )
    reward_model: str | None = _option(None, "A trained reward model whose score is added to the rewards.", "model")
    reward_model_weight: float = _option(1.0, "Weight of the reward model's score in the total reward.", "optimisation")
    answer_fallback_last_number: bool = _option(
        False,
        "Lenient answer_match: a completion without an <answer> tag or \\boxed{} is read by its last number. Off, "
        "such a completion scores 0: with it on, a policy can learn to drop the format (`<think>8 + 9 = 17</think><` "
        "scores 1).",
        "optimisation",
    )
    overlong_buffer: int | None = _option(
        None,
        "L_cache of the soft_overlong reward: the penalty ramps from max_new_tokens - this to max_new_tokens. "
        "Empty: a quarter of max_new_tokens.",
        "data",
        maximum=SEQUENCE_MAX,
    )
    # the step's own completions: recording them costs no generation, so it is on by default
    sample_every: int = _option(
        10, "Record a few of the step's completions every N steps and at the last step (0: never).", "logging",
        maximum=STEPS_MAX,
    )
    samples_per_log: int = _option(4, "Completions recorded (with rewards and advantage) each time.", "logging",
                                   maximum=SAMPLES_PER_LOG_MAX)
    decoding: Decoding = _option(
        "auto",
        "How completions are decoded. static: a static KV cache, each token's step captured once as a CUDA graph on a "
        "GPU and replayed (the same tokens as eager, far fewer kernel launches). eager: one Python-driven step a "
        "token. auto: static on a GPU, eager on the CPU.",
        "advanced",
    )
    alert_kl_above: float = _option(
        DEFAULT_ALERT_KL_ABOVE,
        "Flag the run (on its page) when the KL to the reference rises above this: the policy has left the "
        "reference far behind. 0 turns the alert off.",
        "logging",
    )
    alert_entropy_below: float = _option(
        DEFAULT_ALERT_ENTROPY_BELOW,
        "Flag the run when the mean token entropy falls below this: sampling has collapsed onto a few "
        "completions. 0 turns the alert off.",
        "logging",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.overlong_buffer is None and _is_int(self.max_new_tokens):
            self.overlong_buffer = max(1, self.max_new_tokens // 4)

    def derived_max_prompt_length(self) -> int:
        return self.max_length - self.max_new_tokens if _is_int(self.max_new_tokens) else self.max_length // 2

    def validate(self) -> None:
        _check_types(self)
        _check_finite_and_maxima(self)
        if self.max_new_tokens >= self.max_length:
            raise ConfigError(
                "max_new_tokens", f"must be smaller than max_length={self.max_length} (leave room for the prompt)"
            )
        super().validate()
        _positive(self, "max_new_tokens", "samples_per_log")
        _non_negative(self, "temperature", "top_k", "alert_kl_above", "alert_entropy_below")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.max_prompt_length + self.max_new_tokens > self.max_length:
            raise ConfigError(
                "max_new_tokens",
                f"max_prompt_length ({self.max_prompt_length}) + max_new_tokens ({self.max_new_tokens}) "
                f"exceeds max_length ({self.max_length})",
            )
        try:
            check_reward_weights(self.rewards, field="rewards")
        except ValueError as error:
            raise ConfigError("rewards", str(error).removeprefix("rewards: ")) from error
        if not self.rewards and self.reward_model is None:
            raise ConfigError("rewards", "give at least one reward function or a reward_model")
        if "soft_overlong" in self.rewards and not 0 < self.overlong_buffer <= self.max_new_tokens:
            raise ConfigError("overlong_buffer", f"must be in [1, max_new_tokens={self.max_new_tokens}], got {self.overlong_buffer}")


@dataclass(kw_only=True)
class GRPOConfig(OnlineConfig):
    """GRPO (DeepSeekMath) with the DAPO and Dr. GRPO options; `GRPOConfig.dapo(...)` turns DAPO's on."""

    group_size: int = _option(8, "G: completions sampled per prompt (8 in the seeds).", "optimisation",
                              maximum=GROUP_SIZE_MAX)
    num_iterations: int = _option(1, "mu: optimizer updates per batch of samples, with the old log-probs kept.",
                                  "optimisation", maximum=REPEATS_MAX)
    beta: float = _option(0.04, "Weight of the k3 KL to the reference (0.04 in DeepSeekMath; 0 skips the reference).", "optimisation")
    share_prompt: bool = _option(
        True,
        "Compute each prompt once for its whole group in the training and reference forwards (one sequence: the "
        "prompt, then the G completions, each seeing only the prompt and itself); same results, fewer tokens. "
        "Used where the architecture allows it.",
        "advanced",
    )
    # past 1 the lower clip (1 - epsilon_low) is below 0, where no ratio is: no clip at all
    epsilon_low: float = _option(0.2, "Lower clip range: ratio >= 1 - epsilon_low.", "optimisation", maximum=1.0)
    epsilon_high: float = _option(0.2, "Upper clip range: ratio <= 1 + epsilon_high (DAPO clip-higher: 0.28).", "optimisation")
    loss_aggregation: LossAggregation = _option(
        "sequence-mean", "sequence-mean (GRPO), token-mean (DAPO) or constant (Dr. GRPO: / (B * max_new_tokens)).", "optimisation"
    )
    advantage_scale: AdvantageScale = _option(
        "group", "Divide centred rewards by the group std (GRPO), the batch std, or nothing (Dr. GRPO).", "optimisation"
    )
    dynamic_sampling: bool = _option(False, "DAPO: resample until every group's rewards differ (capped rounds).", "optimisation")
    max_generation_rounds: int = _option(3, "Dynamic sampling: most generation rounds per step.", "optimisation",
                                         maximum=REPEATS_MAX)
    overlong_filtering: bool = _option(False, "DAPO: truncated completions are left out of the loss.", "optimisation")

    def validate(self) -> None:
        super().validate()
        _positive(self, "num_iterations", "max_generation_rounds")
        _non_negative(self, "beta", "epsilon_low", "epsilon_high")
        if self.group_size < 2:
            raise ConfigError("group_size", f"must be >= 2 (advantages compare completions of a group), got {self.group_size}")

    @classmethod
    def dapo(cls, **fields: Any) -> GRPOConfig:
        """The DAPO preset (clip-higher, token-mean, dynamic sampling, overlong filtering and soft punishment,
        no KL); `fields` are set on top of it."""
        return cls(**DAPO.under(cls, fields))


DAPO_OPTIONS: dict[str, Any] = {
    "beta": 0.0,
    "epsilon_high": 0.28,
    "loss_aggregation": "token-mean",
    "dynamic_sampling": True,
    "overlong_filtering": True,
}


@dataclass(frozen=True)
class Preset:
    """A named starting point for a run kind: its fields first, the run's own fields on top of them."""

    description: str
    fields: dict[str, Any]
    # added to the run's reward functions unless the run gives that function's weight itself
    rewards: dict[str, float] = field(default_factory=dict)

    def under(self, config_class: type[BaseConfig], fields: dict[str, Any]) -> dict[str, Any]:
        """`fields` on top of this preset's, for a config of `config_class` (whose default rewards the preset's
        rewards join)."""
        merged = {**self.fields, **fields}
        if self.rewards:
            own = fields.get("rewards")
            merged["rewards"] = {**self.rewards, **(_default_rewards(config_class) if own is None else own)}
        return merged


def _default_rewards(config_class: type[BaseConfig]) -> dict[str, float]:
    (rewards,) = (f.default_factory() for f in dataclasses.fields(config_class) if f.name == "rewards")
    return rewards


DAPO = Preset(
    "DAPO (Yu et al., 2025): clip-higher (epsilon_high 0.28), token-mean loss, dynamic sampling, "
    "overlong filtering and the soft overlong punishment, with no KL term (beta 0).",
    DAPO_OPTIONS,
    {"soft_overlong": 1.0},
)


@dataclass(kw_only=True)
class PPOConfig(OnlineConfig):
    """PPO with a critic (InstructGPT style): per-token KL penalty in the reward, GAE, clipped losses."""

    ppo_epochs: int = _option(4, "Passes over each rollout.", "optimisation", maximum=REPEATS_MAX)
    num_mini_batches: int = _option(1, "Minibatches per pass; must divide batch_size.", "optimisation")
    kl_coef: float = _option(0.05, "Per-token KL penalty to the reference, added to the reward.", "optimisation")
    gamma: float = _option(1.0, "Discount factor of GAE.", "optimisation")
    lam: float = _option(0.95, "GAE lambda.", "optimisation")
    # past 1 the lower clip (1 - epsilon) is below 0, where no ratio is
    epsilon: float = _option(0.2, "Clip range of the policy ratio.", "optimisation", maximum=1.0)
    value_clip: float = _option(0.2, "Clip range of the value update.", "optimisation")
    vf_coef: float = _option(0.1, "Weight of the value loss.", "optimisation")
    entropy_coef: float = _option(0.0, "Weight of the entropy bonus.", "optimisation")
    whiten_advantages: bool = _option(True, "Normalise advantages to mean 0, std 1 per rollout.", "optimisation")
    critic_model: str | None = _option(
        None, "Critic's starting weights; empty means the reward model if there is one, else the policy.", "model"
    )
    critic_lr: float | None = _option(None, "Critic learning rate; empty means lr.", "optimisation", maximum=1.0)

    def validate(self) -> None:
        super().validate()
        _positive(self, "ppo_epochs", "num_mini_batches")
        _non_negative(self, "kl_coef", "epsilon", "value_clip", "vf_coef", "entropy_coef")
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, f"must be in [0, 1], got {getattr(self, name)}")
        if self.batch_size % self.num_mini_batches:
            raise ConfigError("num_mini_batches", f"must divide batch_size={self.batch_size}")
        if self.critic_lr is not None and self.critic_lr <= 0:
            raise ConfigError("critic_lr", f"must be > 0, got {self.critic_lr}")
        if self.critic_lr is not None:
            _check_pure_bf16(self, "critic_lr", self.critic_lr)

