"""Only the newest checkpoint keeps the optimizer state a resume needs; keep_last deletes older checkpoints unless
the sink says they are in use; a resume from a stripped checkpoint restarts the optimizer and says so."""

import logging
from pathlib import Path

import pytest
import torch

from trainer.algorithms.sft import train
from trainer.builtin_datasets import arithmetic
from trainer.config import ConfigError
from trainer.kinds import config_from_dict
from trainer.loop import STATE_FILE
from trainer.sink import FileSink, MemorySink, read_jsonl


def _sft(tiny_model: str, output_dir: Path, sink, **overrides):
    config = config_from_dict("sft", {
        "model": tiny_model, "output_dir": str(output_dir), "max_steps": 6, "batch_size": 4, "max_length": 64,
        "max_prompt_length": 24, "eval_max_new_tokens": 4, "checkpoint_every": 1, **overrides})
    return train(config, arithmetic.sft_rows(1, "train", 16), sink)


def _on_disk(output_dir: Path) -> list[int]:
    return sorted(int(path.name.removeprefix("step-")) for path in (output_dir / "checkpoints").iterdir())


def _has_optimizer(directory: Path) -> bool:
    return "optimizer" in torch.load(directory / STATE_FILE, weights_only=True)


def _bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def test_keep_last_keeps_the_newest_and_only_the_newest_keeps_its_optimizer_state(tiny_model, tmp_path):
    sink = MemorySink()
    _sft(tiny_model, tmp_path, sink, keep_last=3)
    assert _on_disk(tmp_path) == [4, 5, 6]
    assert [step for step, _ in sink.removed] == [1, 2, 3]
    checkpoints = tmp_path / "checkpoints"
    assert _has_optimizer(checkpoints / "step-6")
    assert not _has_optimizer(checkpoints / "step-5") and not _has_optimizer(checkpoints / "step-4")
    with_optimizer, without = _bytes(checkpoints / "step-6"), _bytes(checkpoints / "step-5")
    print(f"tiny model checkpoint: {with_optimizer} bytes with optimizer state, {without} without")
    # AdamW keeps two moments per weight: stripping them takes about two thirds of a checkpoint away
    assert without < 0.5 * with_optimizer


def test_keep_last_zero_keeps_every_checkpoint(tiny_model, tmp_path):
    sink = MemorySink()
    _sft(tiny_model, tmp_path, sink, keep_last=0)
    assert _on_disk(tmp_path) == [1, 2, 3, 4, 5, 6] and sink.removed == []
    assert [_has_optimizer(tmp_path / "checkpoints" / f"step-{step}") for step in range(1, 7)] == [False] * 5 + [True]


def test_a_checkpoint_the_sink_keeps_is_not_deleted(tiny_model, tmp_path):
    in_use = str(tmp_path / "checkpoints" / "step-2")
    sink = MemorySink(in_use={in_use})
    _sft(tiny_model, tmp_path, sink, keep_last=2)
    assert _on_disk(tmp_path) == [2, 5, 6]
    assert [step for step, _ in sink.removed] == [1, 3, 4]


def test_the_file_sink_lists_removed_checkpoints(tiny_model, tmp_path):
    _sft(tiny_model, tmp_path, FileSink(tmp_path), max_steps=3, keep_last=1)
    rows = read_jsonl(tmp_path / "checkpoints.jsonl")
    assert [(row["step"], row.get("removed", False)) for row in rows] == [
        (1, False), (2, False), (1, True), (3, False), (2, True)]


def test_resuming_from_a_stripped_checkpoint_restarts_the_optimizer_and_says_so(tiny_model, tmp_path, caplog):
    _sft(tiny_model, tmp_path, MemorySink(), keep_last=0)
    resumed = MemorySink()
    with caplog.at_level(logging.WARNING, logger="trainer.loop"):
        result = _sft(tiny_model, tmp_path / "again", resumed, keep_last=0,
                      resume_from=str(tmp_path / "checkpoints" / "step-3"))
    assert resumed.starts == [(6, 3)] and result.step == 6
    assert "resuming from step 3 without optimizer state: AdamW's moments restart from zero" in caplog.text


def test_keep_last_must_not_be_negative():
    with pytest.raises(ConfigError, match="keep_last"):
        config_from_dict("sft", {"model": "m", "output_dir": "o", "keep_last": -1}).validate()
