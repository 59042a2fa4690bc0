"""Conversational rows through every trainer kind: the tiny arithmetic model given a chat template trains on
`messages`, conversational and implicit-prompt rows (SFT, reward model, DPO) and samples conversational prompts
(GRPO); a conversation for a model without a template is a clear error naming the row."""

import math

import pytest
from transformers import AutoTokenizer

from trainer.algorithms.rollout import RewardModelScorer
from trainer.builtin_datasets import arithmetic
from trainer.formats.chat import encode_prompt
from trainer.formats.data import DataError, Limits, tokenize_pairs
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

# ChatML's shape written with the tiny tokenizer's own special tokens: <s> opens a turn, </s> (its eos) ends it
TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
SYSTEM = {"role": "system", "content": "Answer with the number."}


def user(text):
    return {"role": "user", "content": text.strip()}


def assistant(text):
    return {"role": "assistant", "content": text}


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> str:
    directory = arithmetic.build_tiny_model(tmp_path_factory.mktemp("tiny-chat") / "model")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(directory)
    return str(directory)


def _train(kind, model, tmp_path, rows, **fields):
    import importlib

    settings = {"model": model, "output_dir": str(tmp_path), "max_steps": 2, "max_length": 96, "max_prompt_length": 64}
    config = config_from_dict(kind, {**settings, **fields})
    sink = MemorySink()
    result = importlib.import_module(f"trainer.algorithms.{kind}").train(config, rows, sink)
    return result, sink


def _assert_finite(sink):
    assert sorted(sink.metrics) == [1, 2]
    for metrics in sink.metrics.values():
        assert all(math.isfinite(value) for value in metrics.values()), metrics


def _pairs(count=8):
    return [
        {"prompt": [SYSTEM, user(row["prompt"])], "chosen": [assistant(row["chosen"])], "rejected": [assistant(row["rejected"])]}
        for row in arithmetic.preference_rows(1, "train", count)
    ]


def test_sft_on_messages_rows(chat_model, tmp_path):
    rows = [
        {"messages": [SYSTEM, user(row["prompt"]), assistant(row["completion"])], "answer": row["answer"]}
        for row in arithmetic.sft_rows(1, "train", 8)
    ]
    _, sink = _train("sft", chat_model, tmp_path, rows, batch_size=4, sample_every=2, eval_max_new_tokens=4)
    _assert_finite(sink)
    # the samples show the conversation's turns, not the template's special tokens
    assert sink.samples and all(sample["prompt"].startswith("system: Answer") for sample in sink.samples)
    assert not any("<s>" in sample["prompt"] + sample["completion"] for sample in sink.samples)


def test_reward_model_on_conversational_pairs_scores_samples_as_it_trained(chat_model, tmp_path):
    pairs = _pairs()
    result, sink = _train("reward_model", chat_model, tmp_path, pairs, batch_size=4)
    _assert_finite(sink)
    scorer = RewardModelScorer(result.checkpoint)
    trained = tokenize_pairs(pairs[:1], scorer.tokenizer, Limits(max_length=96, max_prompt_length=64), add_eos=True)
    # a GRPO/PPO sample (decoded text) for a conversational prompt is scored as the assistant's turn
    assert scorer._example(pairs[0]["prompt"], pairs[0]["chosen"][0]["content"]) == trained[0].chosen
    assert all(math.isfinite(score) for score in scorer([pairs[0]["prompt"]] * 2, ["2", "3"]))


def test_dpo_on_implicit_prompt_pairs(chat_model, tmp_path):
    rows = [{"chosen": [*row["prompt"], *row["chosen"]], "rejected": [*row["prompt"], *row["rejected"]]} for row in _pairs()]
    _, sink = _train("dpo", chat_model, tmp_path, rows, batch_size=4)
    _assert_finite(sink)


def test_grpo_samples_conversational_prompts(chat_model, tmp_path):
    rows = [{"prompt": [SYSTEM, user(row["prompt"])], "answer": row["answer"]} for row in arithmetic.sft_rows(1, "train", 8)]
    _, sink = _train(
        "grpo",
        chat_model,
        tmp_path,
        rows,
        batch_size=2,
        group_size=2,
        max_new_tokens=6,
        rewards={"answer_match": 1.0},
        sample_every=1,
        samples_per_log=2,
    )
    _assert_finite(sink)
    assert sink.samples and all(sample["prompt"].startswith("system: Answer with the number.\nuser: ") for sample in sink.samples)


def test_a_conversation_for_a_model_without_a_chat_template_names_the_row(tiny_model, tmp_path):
    assert AutoTokenizer.from_pretrained(tiny_model).chat_template is None
    rows = [
        {"prompt": "Calculate 1 + 1\n", "chosen": "2", "rejected": "3"},
        {"prompt": [user("Calculate 1 + 2")], "chosen": [assistant("3")], "rejected": [assistant("4")]},
    ]
    with pytest.raises(DataError, match=r"training data row 1: the prompt is a conversation but the model's tokenizer"):
        _train("dpo", tiny_model, tmp_path, rows)
    with pytest.raises(DataError, match=r"training data row 0: the prompt is a conversation"):
        _train("grpo", tiny_model, tmp_path, [{"prompt": [user("Calculate 1 + 2")], "answer": "3"}], max_new_tokens=4)


def test_the_templated_prompt_is_tokenised_without_a_second_bos(chat_model):
    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    ids = encode_prompt(tokenizer, [user("Calculate 1 + 2")])
    assert ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id
    assert tokenizer(tokenizer.apply_chat_template([user("x")], tokenize=False))["input_ids"][:2] == [tokenizer.bos_token_id] * 2
