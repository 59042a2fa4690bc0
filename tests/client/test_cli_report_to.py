"""`python -m trainer run CONFIG --report-to URL`: the command line's run, reported to Preflab as an external run
whose rows and samples are those the run wrote to its own files."""

import os
import subprocess
import sys

import pytest

from tests.client.helpers import stored_metrics
from tests.conftest import REPO_ROOT
from trainer.cli import main
from trainer.sink import read_jsonl
from webapp.experiments.models import MetricRow, Run, Sample

pytestmark = pytest.mark.django_db(transaction=True)


def _run_file(tmp_path, model_dir) -> str:
    (tmp_path / "tiny-sft.yaml").write_text(
        f"kind: sft\nmodel: {model_dir}\noutput_dir: {tmp_path / 'run'}\nmax_steps: 2\nbatch_size: 4\n"
        "max_length: 64\nmax_prompt_length: 24\nsample_every: 2\neval_max_new_tokens: 8\n"
        "task: arithmetic\ntask_level: 1\ntask_train_size: 20\ntask_eval_size: 4\n"
    )
    return "tiny-sft.yaml"


def test_a_two_step_cli_run_is_reported_to_the_server(live_server, api_token, tiny_model_dir, tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "trainer", "run", _run_file(tmp_path, tiny_model_dir), "--report-to", live_server.url],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT), "PREFLAB_TOKEN": api_token,
             "PREFLAB_OUTBOX_DIR": str(tmp_path / "outbox")},
    )
    assert completed.returncode == 0, completed.stderr
    run = Run.objects.get(kind="external")
    assert f"reporting to {live_server.url} as run #{run.pk}" in completed.stderr
    assert api_token not in completed.stderr + completed.stdout
    assert (run.name, run.status, run.total_steps) == ("tiny-sft", Run.Status.SUCCEEDED, 2)
    assert run.config["kind"] == "sft" and run.config["max_steps"] == 2 and run.config["task"] == "arithmetic"

    written = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert stored_metrics(run.pk) == {row["step"]: row["metrics"] for row in written}
    assert list(MetricRow.objects.filter(run=run).values_list("tokens_seen", flat=True)) == [
        row["tokens_seen"] for row in written]
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 4
    stored = Sample.objects.filter(run=run).order_by("id")
    assert [(sample.step, sample.prompt, sample.completion, sample.rewards) for sample in stored] == [
        (row["step"], row["prompt"], row["completion"], row["rewards"]) for row in samples]
    assert not (tmp_path / "outbox").exists() or not list((tmp_path / "outbox").iterdir())


def test_report_to_without_a_token_is_one_line_and_no_run(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PREFLAB_TOKEN", raising=False)
    assert main(["run", _run_file(tmp_path, tiny_model_dir), "--report-to", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err == (
        "error: --report-to needs a personal token in PREFLAB_TOKEN (create one on your Preflab account page)\n")
    assert not Run.objects.exists()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
