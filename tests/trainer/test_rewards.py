"""Rule-based rewards: registry, each function, weighted combination, and no torch at import."""

import subprocess
import sys

import pytest

from trainer.rewards import (
    REWARD_FUNCTIONS,
    REWARD_MODEL,
    Rewarder,
    check_reward_weights,
    reward_inputs,
    soft_overlong_punishment,
)


def _inputs(completions, answers, lengths=None, *, max_length=16, overlong_buffer=4):
    lengths = lengths or [len(c) for c in completions]
    return reward_inputs(
        ["q"] * len(completions),
        completions,
        answers,
        lengths=lengths,
        truncated=[n >= max_length for n in lengths],
        max_length=max_length,
        overlong_buffer=overlong_buffer,
    )


def test_importing_rewards_does_not_import_torch():
    code = "import sys, trainer.rewards as r; assert r.REWARD_FUNCTIONS; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_registry_has_help_text_for_every_function():
    assert {"answer_match", "format_tags", "length_penalty", "soft_overlong"} <= set(REWARD_FUNCTIONS)
    for name, (function, help_text) in REWARD_FUNCTIONS.items():
        assert callable(function), name
        assert len(help_text) > 20, name


def test_answer_match_compares_the_tagged_answer_numerically():
    samples = _inputs(
        ["<think>2*6=12, 2+12=14</think><answer>14</answer>", "<think>x</think><answer>14.0</answer>",
         "<think>x</think><answer>10</answer>", "<answer>10</answer> then <answer> 14 </answer>"],
        ["14"] * 4,
    )
    function = REWARD_FUNCTIONS["answer_match"][0]
    assert [function(s) for s in samples] == [1.0, 1.0, 0.0, 1.0]


def test_answer_match_reads_a_boxed_answer():
    samples = _inputs(
        [r"2 + 12 = 14, so \boxed{14}", r"\boxed{10} no, \boxed{14.0}", r"<answer>\boxed{14}</answer>",
         r"\boxed{\frac{28}{2}}", r"\boxed{10}", r"cut off: \boxed{14"],
        ["14"] * 6,
    )
    function = REWARD_FUNCTIONS["answer_match"][0]
    assert [function(s) for s in samples] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


# The completions the dapo preset shrank to in the demo (issue 15): no answer tag, the right number last.
DEGENERATE = "<think>8 + 9 = 17</think><"
WITHOUT_ANSWER = [DEGENERATE, "the answer is 17", "<think>8 + 9 = 17</think><answer></answer>", "<answer>17"]


def test_strict_answer_match_gives_0_without_an_answer_tag_or_boxed():
    function = REWARD_FUNCTIONS["answer_match"][0]
    assert [function(s) for s in _inputs(WITHOUT_ANSWER, ["17"] * 4)] == [0.0, 0.0, 0.0, 0.0]


def test_the_lenient_option_reads_the_last_number_when_there_is_no_answer():
    lenient = reward_inputs(
        ["q"] * 6, [*WITHOUT_ANSWER, "no number", "<answer>16</answer> 17"], ["17"] * 6, lengths=[8] * 6,
        truncated=[False] * 6, max_length=16, overlong_buffer=4, answer_fallback_last_number=True,
    )
    function = REWARD_FUNCTIONS["answer_match"][0]
    # a tagged answer still wins over a later number
    assert [function(s) for s in lenient] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


def test_strict_is_the_default_of_online_runs_and_lenient_an_option():
    from trainer.config import GRPOConfig, PPOConfig

    where = {"model": "m", "output_dir": "out"}
    assert GRPOConfig(**where).answer_fallback_last_number is False
    assert GRPOConfig.dapo(**where).answer_fallback_last_number is False
    assert PPOConfig(**where).answer_fallback_last_number is False
    assert GRPOConfig(**where, answer_fallback_last_number=True).answer_fallback_last_number is True


def test_answer_match_without_an_answer_says_so():
    (sample,) = _inputs(["<answer>3</answer>"], [None])
    with pytest.raises(ValueError, match="needs an 'answer'"):
        REWARD_FUNCTIONS["answer_match"][0](sample)


def test_format_tags_rewards_the_seed_format_most():
    function = REWARD_FUNCTIONS["format_tags"][0]
    perfect, swapped, half, none, doubled = _inputs(
        ["<think>2+12</think><answer>14</answer>", "<answer>14</answer><think>2+12</think>",
         "<think>2+12</think> 14", "14", "<think>a</think><think>b</think><answer>1</answer>"],
        ["14"] * 5,
    )
    assert function(perfect) == pytest.approx(1.0)
    assert function(swapped) == pytest.approx(0.8)
    assert function(half) == pytest.approx(0.4)
    assert function(none) == 0.0
    assert function(doubled) == pytest.approx(0.4)


def test_length_penalty_is_minus_the_used_fraction():
    short, full = _inputs(["ab", "x" * 16], ["1", "1"], lengths=[4, 16], max_length=16)
    function = REWARD_FUNCTIONS["length_penalty"][0]
    assert function(short) == pytest.approx(-0.25)
    assert function(full) == pytest.approx(-1.0)


def test_soft_overlong_matches_the_losses_tensor_version():
    torch = pytest.importorskip("torch")
    from trainer.algorithms.losses import soft_overlong_penalty

    lengths = list(range(0, 25))
    expected = soft_overlong_penalty(torch.tensor(lengths), max_length=20, cache_length=8).tolist()
    ours = [soft_overlong_punishment(n, max_length=20, cache_length=8) for n in lengths]
    assert ours == pytest.approx(expected)
    assert ours[12] == 0.0 and ours[16] == pytest.approx(-0.5) and ours[20] == -1.0 and ours[24] == -1.0


def test_rewarder_combines_by_weight_and_reports_each_function():
    samples = _inputs(["<think>a</think><answer>14</answer>", "15"], ["14", "14"], lengths=[8, 2])
    breakdown = Rewarder({"answer_match": 1.0, "format_tags": 0.5})(samples)
    assert breakdown.per_function["answer_match"] == [1.0, 0.0]
    assert breakdown.per_function["format_tags"] == pytest.approx([1.0, 0.0])
    assert breakdown.total == pytest.approx([1.5, 0.0])


def test_rewarder_adds_a_reward_model_score_under_its_own_name():
    def scorer(prompts, completions):
        return [float(len(c)) for c in completions]

    samples = _inputs(["<answer>14</answer>", "1"], ["14", "14"])
    breakdown = Rewarder({"answer_match": 2.0}, scorer=scorer, scorer_weight=0.1)(samples)
    assert breakdown.per_function[REWARD_MODEL] == [19.0, 1.0]
    assert breakdown.total == pytest.approx([2.0 + 1.9, 0.1])


def test_unknown_reward_names_and_bad_weights_are_rejected_with_the_field():
    with pytest.raises(ValueError, match="rewards: unknown reward function 'exact'"):
        check_reward_weights({"exact": 1.0})
    with pytest.raises(ValueError, match=r"rewards\.format_tags: weight must be a number"):
        check_reward_weights({"format_tags": "high"})
    with pytest.raises(ValueError, match="at least one"):
        Rewarder({})


def test_the_format_rate_counts_completions_with_an_answer_strict_checking_reads():
    from trainer.algorithms.evaluation import format_rate

    assert format_rate(["<think>1 + 2 = 3</think><answer>3</answer>", r"\boxed{3}", *WITHOUT_ANSWER]) == 2 / 6


def test_each_reward_declares_the_row_fields_it_reads():
    from trainer.rewards import REWARD_FUNCTIONS, REWARD_ROW_FIELDS, reward_row_fields, row_has_field

    assert set(REWARD_ROW_FIELDS) <= set(REWARD_FUNCTIONS)
    assert reward_row_fields({"answer_match": 0.0, "format_tags": 1.0}) == {"answer_match": ("answer",)}
    assert reward_row_fields({"length_penalty": 1.0}) == {}
    assert row_has_field({"answer": "0"}, "answer") and row_has_field({"answer": 3}, "answer")
    assert not row_has_field({"answer": None}, "answer") and not row_has_field({"answer": " "}, "answer")
    assert not row_has_field({}, "answer")


def test_the_trainer_refuses_rows_without_what_a_reward_reads_naming_row_and_reward():
    from types import SimpleNamespace

    from trainer.algorithms.rollout import check_prompt_rows
    from trainer.formats.data import DataError

    config = SimpleNamespace(rewards={"answer_match": 1.0})
    check_prompt_rows([{"prompt": "1 + 1 =", "answer": "2"}, {"prompt": "2 + 2 =", "answer": 4}], config)
    for missing in (None, "", "  "):
        with pytest.raises(DataError, match=r"training data row 1: missing field 'answer' \(the answer_match reward"):
            check_prompt_rows([{"prompt": "1 + 1 =", "answer": "2"}, {"prompt": "2 + 2 =", "answer": missing}], config)
    check_prompt_rows([{"prompt": "no answer"}], SimpleNamespace(rewards={"format_tags": 1.0}))
