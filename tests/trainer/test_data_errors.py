import pytest

from trainer.formats.data import DataError, read_jsonl_rows
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink


def _train(kind: str, tiny_model: str, tmp_path, data, **fields):
    import importlib

    config = config_from_dict(
        kind,
        {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 1, "max_length": 32, "max_prompt_length": 16, **fields},
    )
    return importlib.import_module(f"trainer.algorithms.{kind}").train(config, data, MemorySink())


@pytest.mark.parametrize("kind", ["reward_model", "dpo"])
def test_pair_row_missing_a_field_names_row_and_field(kind, tiny_model, tmp_path):
    rows = [{"prompt": "Calculate 1 + 1\n", "chosen": "2", "rejected": "3"}, {"prompt": "Calculate 1 + 2\n", "chosen": "3"}]
    with pytest.raises(DataError, match=r"training data row 1: missing field 'rejected'"):
        _train(kind, tiny_model, tmp_path, rows)


def test_sft_row_missing_completion_and_empty_dataset(tiny_model, tmp_path):
    with pytest.raises(DataError, match=r"row 0: missing field 'completion'"):
        _train("sft", tiny_model, tmp_path, [{"prompt": "Calculate 1 + 1\n"}])
    with pytest.raises(DataError, match="training data is empty"):
        _train("sft", tiny_model, tmp_path, [])


def test_prompt_longer_than_the_limit_is_an_error(tiny_model, tmp_path):
    long_prompt = "Calculate " + " + ".join(["1"] * 40) + "\n"
    with pytest.raises(DataError, match=r"row 0: prompt is \d+ tokens, longer than max_prompt_length=16"):
        _train("sft", tiny_model, tmp_path, [{"prompt": long_prompt, "completion": "40"}])


def test_wrong_types_in_rows(tiny_model, tmp_path):
    with pytest.raises(DataError, match=r"row 0: field 'chosen' must be text"):
        _train("dpo", tiny_model, tmp_path, [{"prompt": "p", "chosen": 2, "rejected": "3"}])
    with pytest.raises(DataError, match=r"row 0: field 'weight' must be a number"):
        _train("reward_model", tiny_model, tmp_path, [{"prompt": "p", "chosen": "2", "rejected": "3", "weight": "x"}])


def test_eval_data_errors_say_eval_data(tiny_model, tmp_path):
    import importlib

    config = config_from_dict("sft", {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 1})
    with pytest.raises(DataError, match=r"eval data row 0: missing field 'prompt'"):
        importlib.import_module("trainer.algorithms.sft").train(
            config, [{"prompt": "a", "completion": "b"}], MemorySink(), eval_data=[{"completion": "b"}]
        )


def test_jsonl_reader_names_file_and_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"prompt": "a"}\n\n[1, 2]\n')
    with pytest.raises(DataError, match=r"pairs.jsonl, line 3: expected a JSON object"):
        read_jsonl_rows(path)
    path.write_text('{"prompt": \n')
    with pytest.raises(DataError, match=r"line 1: not valid JSON"):
        read_jsonl_rows(path)


def test_an_empty_prompt_without_a_bos_token_is_an_error(tiny_model):
    from transformers import AutoTokenizer

    from trainer.formats.data import Limits, tokenize_pairs

    tokenizer = AutoTokenizer.from_pretrained(tiny_model, add_bos_token=False)
    rows = [{"prompt": "Calculate 1 + 1\n", "chosen": "2", "rejected": "3"}, {"prompt": "", "chosen": "2", "rejected": "3"}]
    with pytest.raises(DataError, match=r"training data row 1: prompt is empty"):
        tokenize_pairs(rows, tokenizer, Limits(max_length=32, max_prompt_length=16), add_eos=True)


@pytest.mark.parametrize("kind", ["grpo", "ppo"])
def test_online_prompts_longer_than_the_limit_are_refused_before_any_sampling(kind, tiny_model, tmp_path):
    long_prompt = "Calculate " + " + ".join(["1"] * 40) + "\n"
    rows = [{"prompt": "Calculate 1 + 1\n", "answer": "2"}, {"prompt": long_prompt, "answer": "40"}]
    with pytest.raises(DataError, match=r"training data row 1: prompt is \d+ tokens, longer than max_prompt_length=16"):
        _train(kind, tiny_model, tmp_path, rows, max_new_tokens=4)
