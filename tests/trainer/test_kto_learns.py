"""KTO learns from thumbs on the arithmetic task: held-out exact match up by at least 10 points from its SFT start.

The SFT start is trained as the tiny model's usual SFT (TINY_MODEL_SFT_SETTINGS), on unfiltered data: each training
problem twice, once with the correct completion and once with correct steps but a final answer that contradicts them
(wrong_completion's "final_answer" mistake), as a chat product's logs hold both. It learns the format and makes that
mistake about half the time (held-out exact match 0.33 on this machine). The thumbs come from the task's checker:

- the default test: the same rows, each labelled by the checker (arithmetic.thumbs_rows): KTO learns which of the two
  completions of a problem to prefer (0.33 -> 0.73 here; 0.67 to 0.80 over KTO seeds 1 to 3);
- the slow one: the SFT model's own sampled answers, each labelled by the checker (sampled_thumbs_rows): 0.33 ->
  0.53 (0.40 to 0.60 over seeds 1 to 3, so not always 10 points: slow, not CI).

With a clean SFT start (0.87 held out, tests/trainer/conftest.py) there is no room for 10 points on 15 held-out
problems, and KTO there (like DPO without its RPO term, test_dpo_improves_preferences.py) loses a problem or two.
"""

import time

import pytest

from trainer.algorithms import kto, sft
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

KTO_SETTINGS = {"lr": 1e-4, "beta": 0.1, "max_steps": 60, "batch_size": 16, "max_length": 64, "max_prompt_length": 24,
                "eval_max_new_tokens": 24}


def _labelled_rows() -> list[dict]:
    """Per training problem, the correct completion and one whose final answer contradicts its steps, labelled by
    the task's checker."""
    return arithmetic.thumbs_rows(1, "train", mistakes=("final_answer",))


@pytest.fixture(scope="module")
def noisy_sft(tiny_model, tmp_path_factory):
    """(checkpoint, held-out accuracy) of SFT on correct and mistaken completions alike (the labels left out)."""
    rows = [{key: row[key] for key in ("prompt", "completion", "answer")} for row in _labelled_rows()]
    config = config_from_dict("sft", {"model": tiny_model, "output_dir": str(tmp_path_factory.mktemp("noisy-sft")),
                                      **arithmetic.TINY_MODEL_SFT_SETTINGS})
    sink = MemorySink()
    result = sft.train(config, rows, sink, eval_data=arithmetic.sft_rows(1, "test"))
    return result.checkpoint, sink.metrics[result.step]["eval/accuracy"]


def _kto(checkpoint, rows, output_dir) -> dict[str, float]:
    desirable = sum(row["label"] for row in rows)
    # the paper's balance: desirable_weight x desirable rows about equal to the undesirable rows' share
    weight = max(1.0, (len(rows) - desirable) / desirable)
    config = config_from_dict("kto", {"model": checkpoint, "output_dir": str(output_dir), **KTO_SETTINGS,
                                      "desirable_weight": weight})
    sink = MemorySink()
    result = kto.train(config, rows, sink, eval_data=arithmetic.sft_rows(1, "test"))
    return sink.metrics[result.step]


def test_kto_on_the_checkers_thumbs_raises_held_out_accuracy_by_ten_points(noisy_sft, tmp_path):
    checkpoint, sft_accuracy = noisy_sft
    started = time.perf_counter()
    final = _kto(checkpoint, _labelled_rows(), tmp_path)
    print(f"KTO on the checker's thumbs of the SFT rows: held-out accuracy {sft_accuracy:.3f} -> {final['eval/accuracy']:.3f}, "
          f"format rate {final['eval/format_rate']:.3f}, {time.perf_counter() - started:.1f} s")
    assert final["eval/accuracy"] >= sft_accuracy + 0.10
    # 12 of the 15 held-out answers in the format or more: the same seed gave 15 of 15 on 2026-11-29's packages and
    # 13 of 15 on 2026-12-02's (0.333 -> 0.733 then, 0.200 -> 0.533 now), the trainer's code unchanged
    assert final["eval/format_rate"] >= 0.8
    assert final["rewards/margin"] > 0


@pytest.mark.slow
def test_kto_on_thumbs_of_the_models_own_samples_raises_held_out_accuracy_by_ten_points(noisy_sft, tmp_path):
    checkpoint, sft_accuracy = noisy_sft
    started = time.perf_counter()
    rows = arithmetic.sampled_thumbs_rows(checkpoint, 1, "train", samples=4)
    final = _kto(checkpoint, rows, tmp_path)
    print(f"KTO on thumbs of {len(rows)} sampled answers ({sum(row['label'] for row in rows)} right): held-out "
          f"accuracy {sft_accuracy:.3f} -> {final['eval/accuracy']:.3f}, format rate {final['eval/format_rate']:.3f}, "
          f"{time.perf_counter() - started:.1f} s")
    assert final["eval/accuracy"] >= sft_accuracy + 0.10
    assert final["eval/format_rate"] >= 0.9
