"""An empty or whitespace-only completion, chosen or rejected is refused before training, naming row and field:
a model learns nothing from it but to stop at once (a DPO run on "" vs "" pairs used to train without a word)."""

import importlib

import pytest

from trainer.formats.data import DataError
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink


def _train(kind: str, tiny_model: str, tmp_path, data):
    config = config_from_dict(
        kind, {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 1, "max_length": 32, "max_prompt_length": 16}
    )
    return importlib.import_module(f"trainer.algorithms.{kind}").train(config, data, MemorySink())


@pytest.mark.parametrize("kind", ["dpo", "reward_model"])
@pytest.mark.parametrize("field, value", [("chosen", ""), ("rejected", " \n\t")])
def test_pair_rows_with_an_empty_answer_are_refused(kind, field, value, tiny_model, tmp_path):
    rows = [{"prompt": "Calculate 1 + 1\n", "chosen": "2", "rejected": "3"},
            {"prompt": "Calculate 1 + 2\n", "chosen": "3", "rejected": "4", field: value}]
    with pytest.raises(DataError, match=rf"training data row 1: field '{field}' is empty \(or only whitespace\)"):
        _train(kind, tiny_model, tmp_path, rows)
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_sft_rows_with_an_empty_completion_are_refused(tiny_model, tmp_path):
    rows = [{"prompt": "Calculate 1 + 1\n", "completion": "  "}]
    with pytest.raises(DataError, match=r"training data row 0: field 'completion' is empty"):
        _train("sft", tiny_model, tmp_path, rows)


def test_eval_rows_are_checked_alike(tiny_model, tmp_path):
    config = config_from_dict("sft", {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 1})
    with pytest.raises(DataError, match=r"eval data row 0: field 'completion' is empty"):
        importlib.import_module("trainer.algorithms.sft").train(
            config, [{"prompt": "a", "completion": "b"}], MemorySink(), eval_data=[{"prompt": "a", "completion": ""}]
        )
