"""Loading policies, reference and reward models and their tokenizer from a local directory or a hub id,
and building the tiny local models the tests and benchmarks train (there is no model hub here).

Every loader goes through transformers' from_pretrained; a bad path fails with ModelLoadError naming the
path and what is missing. The precision (`resolve_precision`) decides the dtypes: trained weights in fp32 unless
pure bf16 is asked for, frozen models (references, reward models that only score) in bf16 under bf16-mixed.
LoRA via peft when asked; with LoRA the reference is the policy with its adapters disabled (`Reference`).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import torch
from torch import Tensor, nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from trainer.config import BaseConfig, ConfigError
from trainer.modeling import products
from trainer.modeling.distributed import shard_model
from trainer.modeling.model_names import ACCEPTED, is_hub_id, looks_local

logger = logging.getLogger(__name__)


class ModelLoadError(ValueError):
    """A model or tokenizer could not be loaded; the message names the path and what is missing."""


@dataclass(frozen=True)
class LoraOptions:
    r: int
    alpha: int
    dropout: float
    target_modules: tuple[str, ...]

    @classmethod
    def from_config(cls, config: BaseConfig) -> LoraOptions | None:
        if not config.use_lora:
            return None
        return cls(config.lora_r, config.lora_alpha, config.lora_dropout, tuple(config.lora_target_modules))


def pick_device() -> torch.device:
    """The GPU of this process (torchrun's LOCAL_RANK: one process per GPU), else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def bf16_capable(device: torch.device) -> bool:
    """bf16 arithmetic is native here: a CUDA GPU that supports it. (The CPU computes bf16 too, but slowly,
    so `auto` keeps fp32 there; bf16-mixed can still be asked for, which is how it is tested.)"""
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


@dataclass(frozen=True)
class Precision:
    """A resolved precision: `mode` is fp32, bf16-mixed or bf16 (never auto); `requested` what the config said."""

    mode: str
    requested: str

    @property
    def trained_dtype(self) -> torch.dtype:
        """Weights that AdamW steps (and so its state): fp32 unless pure bf16 was asked for."""
        return torch.bfloat16 if self.mode == "bf16" else torch.float32

    @property
    def frozen_dtype(self) -> torch.dtype:
        """Weights that never change (a reference, a scoring reward model, LoRA's base): no update to round."""
        return torch.float32 if self.mode == "fp32" else torch.bfloat16

    @property
    def sampling_logprobs_exact(self) -> bool:
        """Sampling and the training forward give the same log-probs (to ~1e-5) only in fp32. In bf16 their different
        kernels and orders of summation differ (a GRPO step on SmolLM2 under bf16-mixed: policy ratios of 0.86 to
        1.25 before any update), so the old log-probs come from the training forward instead."""
        return self.mode == "fp32"

    def autocast(self, device: torch.device) -> AbstractContextManager:
        """The context every forward of the run goes under (training, scoring, generation): bf16 autocast
        under bf16-mixed, nothing otherwise. Backward and the optimizer step run outside it."""
        if self.mode != "bf16-mixed":
            return nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    def describe(self) -> str:
        return self.mode if self.requested == self.mode else f"{self.mode} ({self.requested})"


def resolve_precision(requested: str, device: torch.device) -> Precision:
    """`auto` becomes bf16-mixed on a bf16-capable GPU and fp32 elsewhere; bf16 modes on a GPU without bf16
    are a ConfigError."""
    if requested == "auto":
        return Precision("bf16-mixed" if bf16_capable(device) else "fp32", requested)
    if requested not in ("fp32", "bf16-mixed", "bf16"):
        raise ConfigError("precision", f"unknown precision {requested!r}; choose auto, fp32, bf16-mixed or bf16")
    if requested != "fp32" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("precision", f"{requested} needs bf16, which this GPU does not support; use fp32")
    return Precision(requested, requested)


def run_precision(config: BaseConfig, device: torch.device) -> Precision:
    """The run's resolved precision, said in the log (a warning for pure bf16, whose updates round)."""
    precision = resolve_precision(config.precision, device)
    logger.info("precision: %s on %s", precision.describe(), device.type)
    if precision.mode == "bf16":
        logger.warning(
            "precision bf16: AdamW steps bf16 weights, so updates smaller than about 2^-9 of a weight are rounded "
            "away (lr=%g); bf16-mixed keeps fp32 weights", config.lr
        )
    return precision


def check_model_path(path: str) -> None:
    """Fail early and clearly on a local path that cannot hold a model, or a name that is not a hub id."""
    if not path or not path.strip():
        raise ModelLoadError("no model path given")
    if not looks_local(path):
        if not is_hub_id(path):
            raise ModelLoadError(f"{path!r} is not a model: give {ACCEPTED}")
        return
    directory = Path(path).expanduser()
    if not directory.exists():
        raise ModelLoadError(f"model directory {directory} does not exist")
    if not directory.is_dir():
        raise ModelLoadError(f"model path {directory} is a file, expected a directory made by save_pretrained")
    if not (directory / "config.json").exists() and not (directory / "adapter_config.json").exists():
        raise ModelLoadError(f"{directory} holds no model: config.json is missing (expected a save_pretrained directory)")


# How long a finding that the hub cannot be reached holds before it is checked again (a network may come back).
HUB_CHECK_SECONDS = 60.0
_hub_checked: tuple[float, str | None] | None = None


def hub_unreachable() -> str | None:
    """Why the model hub cannot be reached from here (its host name does not resolve), or None. Without this,
    huggingface_hub retries each request five times with back-off on a machine without a network: 46 s to
    refuse an unknown id. Checked at most once a minute; HF_HUB_OFFLINE=1 says it outright."""
    global _hub_checked
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    now = time.monotonic()
    if _hub_checked is not None and now - _hub_checked[0] < HUB_CHECK_SECONDS:
        return _hub_checked[1]
    host = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
        reason = None
    except OSError as error:
        reason = f"{host} does not resolve: {error}"
    _hub_checked = (now, reason)
    return reason


def _from_pretrained(loader, path: str, what: str, **kwargs):
    check_model_path(path)
    offline = None if looks_local(path) else hub_unreachable()
    if offline:
        kwargs["local_files_only"] = True
    try:
        return loader.from_pretrained(str(Path(path).expanduser()) if looks_local(path) else path, **kwargs)
    except (OSError, ValueError) as error:
        if offline:
            raise ModelLoadError(
                f"cannot load the {what} from {path!r}: the model hub cannot be reached ({offline}) and {path!r} is "
                "not in the local hub cache (HF_HOME); download it where the hub is reachable, or give the "
                "directory a save_pretrained wrote") from error
        raise ModelLoadError(f"cannot load the {what} from {path!r}: {error}") from error


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer with a pad token (eos when it has none) and left padding for generation."""
    tokenizer = _from_pretrained(AutoTokenizer, path, "tokenizer")
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(f"the tokenizer in {path!r} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


class Float32Head(nn.Linear):
    """An output head (LM head, reward or value head) that autocast leaves in fp32: under bf16-mixed a bf16 LM head
    rounds logits of magnitude 16-32 to steps of 0.125, the largest part of the log-prob error (measured on
    SmolLM2: 0.18 -> 0.06 at most, 0.030 -> 0.019 on average per token), as MiniMax-M1 (2025) found too."""

    # trainer.decoding.fast_decode samples through a float32 copy of it, never a bf16 one
    keeps_float32 = True

    def forward(self, hidden: Tensor) -> Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            return products.linear(hidden.to(self.weight.dtype), self.weight, self.bias)


def _heads_in_fp32(model: PreTrainedModel) -> PreTrainedModel:
    """Under bf16-mixed, the fp32 output heads of a trained model become Float32Heads (same parameters; a plain
    Linear's class is swapped, so everything that calls the module gets fp32 outputs, the fast decoder included)."""
    for head in (model.get_output_embeddings(), getattr(model, "score", None)):
        if type(head) is nn.Linear and head.weight.dtype == torch.float32:
            head.__class__ = Float32Head
    return model


def _trained_in(model: PreTrainedModel, dtype: torch.dtype) -> PreTrainedModel:
    """Every trainable parameter in `dtype` (LoRA adapters and heads peft makes trainable over a bf16 base)."""
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)
    return model


def _prepare(model: PreTrainedModel, *, gradient_checkpointing: bool) -> PreTrainedModel:
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def _with_lora(model: PreTrainedModel, lora: LoraOptions, *, task_type: str, adapter: str | None) -> PreTrainedModel:
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter is not None:
        return PeftModel.from_pretrained(model, adapter, is_trainable=True)
    targets = "all-linear" if lora.target_modules == ("all-linear",) else list(lora.target_modules)
    peft_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        task_type=task_type,
    )
    return get_peft_model(model, peft_config)


def _load_trainable(
    auto_class,
    path: str,
    what: str,
    *,
    task_type: str,
    lora: LoraOptions | None,
    adapter: str | None,
    gradient_checkpointing: bool,
    device: torch.device | None,
    precision: Precision | None,
    **kwargs,
) -> PreTrainedModel:
    device = device or pick_device()
    precision = precision or resolve_precision("auto", device)
    # with LoRA the loaded weights are frozen: bf16 under bf16-mixed; only the adapters train (in fp32)
    dtype = precision.frozen_dtype if lora is not None else precision.trained_dtype
    model = _from_pretrained(auto_class, path, what, dtype=dtype, **kwargs).to(device)
    model = _prepare(model, gradient_checkpointing=gradient_checkpointing)
    if precision.mode == "bf16-mixed":
        model = _heads_in_fp32(model)
    if lora is not None:
        model = _with_lora(model, lora, task_type=task_type, adapter=adapter)
    return shard_model(_trained_in(model, precision.trained_dtype).train())


def load_policy(
    path: str,
    *,
    lora: LoraOptions | None = None,
    adapter: str | None = None,
    gradient_checkpointing: bool = False,
    device: torch.device | None = None,
    precision: Precision | None = None,
) -> PreTrainedModel:
    """A causal LM in train mode. With `lora`, only adapters train; `adapter` resumes saved adapters.
    Without `precision`, that of `auto` on the device."""
    return _load_trainable(
        AutoModelForCausalLM,
        path,
        "policy",
        task_type="CAUSAL_LM",
        lora=lora,
        adapter=adapter,
        gradient_checkpointing=gradient_checkpointing,
        device=device,
        precision=precision,
    )


def _load_frozen(auto_class, path: str, what: str, *, device: torch.device | None, precision: Precision | None, **kwargs):
    device = device or pick_device()
    precision = precision or resolve_precision("auto", device)
    model = _from_pretrained(auto_class, path, what, dtype=precision.frozen_dtype, **kwargs).to(device)
    model.requires_grad_(False)
    return model.eval()


def load_reference(path: str, *, device: torch.device | None = None, precision: Precision | None = None) -> PreTrainedModel:
    """A frozen causal LM in eval mode (requires_grad False everywhere)."""
    return _load_frozen(AutoModelForCausalLM, path, "reference model", device=device, precision=precision)


@dataclass(frozen=True)
class Reference:
    """The frozen model reference log-probs come from: a model of its own, or (`adapters_off`) the LoRA policy
    itself with its adapters disabled, so that the base weights are held once."""

    model: PreTrainedModel
    adapters_off: bool = False

    @contextmanager
    def active(self) -> Iterator[PreTrainedModel]:
        """The model to run reference forwards with: the policy is put in eval mode, as a loaded reference is,
        with its adapters disabled, and restored afterwards."""
        if not self.adapters_off:
            yield self.model
            return
        was_training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter():
                yield self.model
        finally:
            self.model.train(was_training)


def is_lora_model(model: PreTrainedModel | None) -> bool:
    if model is None:
        return False
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _same_model(a: str, b: str) -> bool:
    if looks_local(a) and looks_local(b):
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    return a == b


def load_reference_for(
    path: str, policy: PreTrainedModel | None, *, device: torch.device | None = None, precision: Precision | None = None
) -> Reference:
    """The reference at `path`: when `policy` is a LoRA model on those very weights, the policy with its adapters
    disabled (no second copy); otherwise a frozen model loaded from `path`."""
    if is_lora_model(policy) and _same_model(path, policy.get_base_model().name_or_path):
        return Reference(policy, adapters_off=True)
    return Reference(load_reference(path, device=device, precision=precision))


def load_reward_model(
    path: str,
    *,
    pad_token_id: int,
    lora: LoraOptions | None = None,
    adapter: str | None = None,
    gradient_checkpointing: bool = False,
    device: torch.device | None = None,
    precision: Precision | None = None,
    frozen: bool = False,
) -> PreTrainedModel:
    """A sequence classifier with one output (the reward), scoring the last non-pad token; `frozen` (a reward
    model that only scores) loads it like a reference: eval mode, no gradients, the frozen dtype."""
    if frozen:
        return _load_frozen(
            AutoModelForSequenceClassification,
            path,
            "reward model",
            device=device,
            precision=precision,
            num_labels=1,
            pad_token_id=pad_token_id,
        )
    return _load_trainable(
        AutoModelForSequenceClassification,
        path,
        "reward model",
        task_type="SEQ_CLS",
        lora=lora,
        adapter=adapter,
        gradient_checkpointing=gradient_checkpointing,
        device=device,
        precision=precision,
        num_labels=1,
        pad_token_id=pad_token_id,
    )


def build_tiny_causal_lm(
    directory: str | Path,
    texts: Sequence[str],
    *,
    vocab_size: int = 384,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
) -> Path:
    """Train a byte-level BPE tokenizer on `texts` and save it with a random small Llama into `directory`.

    Digits are split one per token so arithmetic is learnable; byte-level means any text encodes.
    Both load back through AutoTokenizer / AutoModelForCausalLM.from_pretrained(directory).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bos_id = bpe.token_to_id("<s>")
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos_id)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )
    tokenizer.save_pretrained(directory)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        bos_token_id=bos_id,
        eos_token_id=bpe.token_to_id("</s>"),
        pad_token_id=bpe.token_to_id("<pad>"),
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def live_model_parameter_bytes() -> int:
    """Bytes of the distinct parameter storages of every transformers model alive in this process (a model that
    shares its weights with another, as a LoRA policy's reference does, counts once): what memory tests measure."""
    gc.collect()
    storages: dict[int, int] = {}
    for thing in gc.get_objects():
        if issubclass(type(thing), PreTrainedModel):
            for parameter in thing.parameters():
                storage = parameter.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())
