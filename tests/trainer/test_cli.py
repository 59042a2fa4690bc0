import json
import os
import subprocess
import sys
from pathlib import Path

from trainer.cli import main
from trainer.sink import read_jsonl


def _trainer(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])},
    )


def test_run_from_a_yaml_file_with_the_arithmetic_task(tiny_model, tmp_path):
    output_dir = tmp_path / "run"
    (tmp_path / "run.yaml").write_text(
        f"kind: sft\nmodel: {tiny_model}\noutput_dir: {output_dir}\nmax_steps: 3\nbatch_size: 4\n"
        "max_length: 64\nmax_prompt_length: 24\nsample_every: 3\neval_max_new_tokens: 8\n"
        "task: arithmetic\ntask_level: 1\ntask_train_size: 20\ntask_eval_size: 4\n"
    )
    completed = _trainer("run", "run.yaml", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "finished at step 3" in completed.stderr
    final = read_jsonl(output_dir / "metrics.jsonl")[-1]["metrics"]
    assert f"last values: eval/accuracy {final['eval/accuracy']:.3f}" in completed.stderr
    assert [row["step"] for row in read_jsonl(output_dir / "metrics.jsonl")] == [1, 2, 3]
    assert "eval/accuracy" in read_jsonl(output_dir / "metrics.jsonl")[-1]["metrics"]
    assert len(read_jsonl(output_dir / "samples.jsonl")) == 4
    assert (output_dir / "checkpoints" / "step-3" / "trainer_state.pt").exists()


def test_bad_config_and_bad_data_exit_2_with_one_line_messages(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "typo.json").write_text(json.dumps({"kind": "dpo", "model": tiny_model, "output_dir": "o", "bta": 0.1}))
    assert main(["run", "typo.json"]) == 2
    assert capsys.readouterr().err == "error: typo.json: bta: unknown field 'bta' for dpo; did you mean 'beta'?\n"

    (tmp_path / "pairs.jsonl").write_text(json.dumps({"prompt": "p", "chosen": "a"}) + "\n")
    (tmp_path / "bad_data.json").write_text(
        json.dumps({"kind": "reward_model", "model": tiny_model, "output_dir": "o", "train_file": "pairs.jsonl"})
    )
    assert main(["run", "bad_data.json"]) == 2
    assert capsys.readouterr().err.endswith("error: training data row 0: missing field 'rejected'\n")

    (tmp_path / "no_model.yaml").write_text("kind: sft\nmodel: ./missing\noutput_dir: o\ntask: arithmetic\n")
    assert main(["run", "no_model.yaml"]) == 2
    assert "error: model directory missing does not exist" in capsys.readouterr().err

    assert main(["run", "missing.yaml"]) == 2
    assert capsys.readouterr().err == "error: cannot read config file missing.yaml: No such file or directory\n"


def test_a_run_file_names_a_preset(tmp_path, capsys):
    from trainer.cli import read_run_file
    from trainer.config import GRPOConfig

    (tmp_path / "dapo.yaml").write_text("kind: grpo\npreset: dapo\nmodel: m\noutput_dir: o\nlr: 0.0004\ntask: arithmetic\n")
    run = read_run_file(tmp_path / "dapo.yaml")
    assert run.config == GRPOConfig.dapo(model="m", output_dir="o", lr=4e-4)
    assert run.data == {"task": "arithmetic"}
    (tmp_path / "typo.yaml").write_text("kind: grpo\npreset: dapo2\nmodel: m\noutput_dir: o\n")
    assert main(["run", str(tmp_path / "typo.yaml")]) == 2
    assert capsys.readouterr().err.endswith("typo.yaml: preset: unknown preset 'dapo2' for grpo; choose one of dapo\n")


def test_tiny_model_command(tmp_path):
    completed = _trainer("tiny-model", "tiny", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "tiny" / "config.json").exists() and (tmp_path / "tiny" / "tokenizer.json").exists()


def test_a_data_file_line_that_is_not_an_object_is_one_line_naming_file_and_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "rows.jsonl").write_text('{"prompt": "2 + 2", "completion": "4"}\n[1]\n')
    (tmp_path / "run.yaml").write_text(f"kind: sft\nmodel: m\noutput_dir: {tmp_path / 'o'}\ntrain_file: rows.jsonl\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "run.yaml"]) == 2
    assert capsys.readouterr().err == "error: rows.jsonl, line 2: expected a JSON object, got list\n"
    assert not (tmp_path / "o" / "metrics.jsonl").exists()


def test_a_run_file_on_several_nodes_says_to_start_torchrun_on_every_node(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodes.yaml").write_text("kind: sft\nmodel: m\noutput_dir: o\ntask: arithmetic\nnum_processes: 4\n"
                                         "num_nodes: 2\nbatch_size: 8\n")
    assert main(["run", "nodes.yaml"]) == 2
    assert capsys.readouterr().err == (
        "error: num_nodes=2: this command starts one node; start it on every node under torchrun yourself: torchrun "
        "--nnodes 2 --node-rank K --nproc-per-node 2 --rdzv-backend static --rdzv-endpoint HOST:PORT -m trainer run "
        "nodes.yaml (K = 0 on HOST, 1 on the other node)\n")
