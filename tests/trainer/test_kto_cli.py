"""A KTO run through the command line: on the arithmetic task's thumbs and on an unpaired JSONL file (TRL's format);
a label that is not true or false is a one-line error naming the row and field."""

import json

from trainer.cli import main
from trainer.sink import read_jsonl

KTO_METRICS = ("loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margin", "logps/chosen", "logps/rejected")


def test_the_cli_runs_kto_on_the_arithmetic_task(tiny_model, tmp_path, monkeypatch, capsys):
    """In process (`python -m trainer` calls this main; test_cli.py runs that process for SFT)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kto.yaml").write_text(
        f"kind: kto\nmodel: {tiny_model}\noutput_dir: run\nmax_steps: 2\nbatch_size: 4\n"
        "max_length: 64\nmax_prompt_length: 24\neval_max_new_tokens: 8\n"
        "task: arithmetic\ntask_level: 1\ntask_train_size: 8\ntask_eval_size: 4\n"
    )
    assert main(["run", "kto.yaml"]) == 0
    assert "finished at step 2" in capsys.readouterr().err
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in metrics] == [1, 2]
    assert all(name in metrics[-1]["metrics"] for name in (*KTO_METRICS, "eval/accuracy", "eval/format_rate"))
    assert (tmp_path / "run" / "checkpoints" / "step-2" / "trainer_state.pt").exists()


def test_kto_trains_on_an_unpaired_jsonl_file(tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [
        {"prompt": "Calculate 2 + 2\n", "completion": "<answer>4</answer>", "label": True},
        {"prompt": "Calculate 2 + 3\n", "completion": "<answer>6</answer>", "label": False},
        {"prompt": "Calculate 3 + 3\n", "completion": "<answer>6</answer>", "label": True},
        {"prompt": "Calculate 1 + 3\n", "completion": "<answer>5</answer>", "label": False},
    ]
    (tmp_path / "thumbs.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    (tmp_path / "run.json").write_text(json.dumps({
        "kind": "kto", "model": tiny_model, "output_dir": "out", "max_steps": 2, "batch_size": 4, "max_length": 48,
        "train_file": "thumbs.jsonl",
    }))
    assert main(["run", "run.json"]) == 0
    assert all(name in read_jsonl(tmp_path / "out" / "metrics.jsonl")[-1]["metrics"] for name in KTO_METRICS)


def test_a_label_that_is_not_true_or_false_is_one_line_naming_row_and_field(tiny_model, tmp_path, monkeypatch,
                                                                           capsys):
    monkeypatch.chdir(tmp_path)
    rows = [
        {"prompt": "Calculate 2 + 2\n", "completion": "<answer>4</answer>", "label": True},
        {"prompt": "Calculate 2 + 3\n", "completion": "<answer>6</answer>", "label": "no"},
    ]
    (tmp_path / "thumbs.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    (tmp_path / "run.json").write_text(json.dumps(
        {"kind": "kto", "model": tiny_model, "output_dir": "out", "batch_size": 2, "train_file": "thumbs.jsonl"}))
    assert main(["run", "run.json"]) == 2
    assert capsys.readouterr().err.endswith(
        "error: training data row 1: field 'label' must be true (desirable, a thumbs up) or false (undesirable), "
        "got 'no'\n")
