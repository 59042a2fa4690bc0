"""Loading policies, reference and reward models and their tokenizer from a local directory or a hub id,
and building the tiny local models the tests and benchmarks train (there is no model hub here).

Every loader goes through transformers' from_pretrained; a bad path fails with ModelLoadError naming the
path and what is missing. bf16 on GPUs that support it, else float32; LoRA via peft when asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
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

from trainer.config import BaseConfig


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
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or Path(path).exists() or path.count("/") > 1


def check_model_path(path: str) -> None:
    """Fail early and clearly on a local path that cannot hold a model; hub ids pass through."""
    if not path or not path.strip():
        raise ModelLoadError("no model path given")
    if not _looks_local(path):
        return
    directory = Path(path).expanduser()
    if not directory.exists():
        raise ModelLoadError(f"model directory {directory} does not exist")
    if not directory.is_dir():
        raise ModelLoadError(f"model path {directory} is a file, expected a directory made by save_pretrained")
    if not (directory / "config.json").exists() and not (directory / "adapter_config.json").exists():
        raise ModelLoadError(f"{directory} holds no model: config.json is missing (expected a save_pretrained directory)")


def _from_pretrained(loader, path: str, what: str, **kwargs):
    check_model_path(path)
    try:
        return loader.from_pretrained(str(Path(path).expanduser()) if _looks_local(path) else path, **kwargs)
    except (OSError, ValueError) as error:
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
    **kwargs,
) -> PreTrainedModel:
    device = device or pick_device()
    model = _from_pretrained(auto_class, path, what, dtype=pick_dtype(device), **kwargs).to(device)
    model = _prepare(model, gradient_checkpointing=gradient_checkpointing)
    if lora is not None:
        model = _with_lora(model, lora, task_type=task_type, adapter=adapter)
    return model.train()


def load_policy(
    path: str,
    *,
    lora: LoraOptions | None = None,
    adapter: str | None = None,
    gradient_checkpointing: bool = False,
    device: torch.device | None = None,
) -> PreTrainedModel:
    """A causal LM in train mode. With `lora`, only adapters train; `adapter` resumes saved adapters."""
    return _load_trainable(
        AutoModelForCausalLM,
        path,
        "policy",
        task_type="CAUSAL_LM",
        lora=lora,
        adapter=adapter,
        gradient_checkpointing=gradient_checkpointing,
        device=device,
    )


def load_reference(path: str, *, device: torch.device | None = None) -> PreTrainedModel:
    """A frozen causal LM in eval mode (requires_grad False everywhere)."""
    device = device or pick_device()
    model = _from_pretrained(AutoModelForCausalLM, path, "reference model", dtype=pick_dtype(device)).to(device)
    model.requires_grad_(False)
    return model.eval()


def load_reward_model(
    path: str,
    *,
    pad_token_id: int,
    lora: LoraOptions | None = None,
    adapter: str | None = None,
    gradient_checkpointing: bool = False,
    device: torch.device | None = None,
) -> PreTrainedModel:
    """A sequence classifier with one output (the reward), scoring the last non-pad token."""
    return _load_trainable(
        AutoModelForSequenceClassification,
        path,
        "reward model",
        task_type="SEQ_CLS",
        lora=lora,
        adapter=adapter,
        gradient_checkpointing=gradient_checkpointing,
        device=device,
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
