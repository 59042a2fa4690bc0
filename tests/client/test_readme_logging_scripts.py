"""The README's three logging scripts (your own loop, transformers' Trainer, TRL's GRPOTrainer, each with
report_to="preflab" where it trains), cut out of the README and run each in its own process against the live
server, as a user would run them: only the model's hub name is replaced by the tiny local model. The Trainer's
script evaluates after train() and ends without finishing its run: the run must hold the evaluation and succeed
when the program ends."""

import os
import re
import subprocess
import sys

import pytest

from tests.client.helpers import stored_metrics
from tests.conftest import REPO_ROOT
from webapp.experiments.models import Run, Sample

pytestmark = pytest.mark.django_db(transaction=True)

HUB_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def readme_script(name: str) -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    found = re.search(rf"<!-- logging-script: {name} -->\n```python\n(.*?)\n```", readme, re.DOTALL)
    assert found, f"no script {name!r} in the README"
    return found.group(1)


def run_script(name: str, *, live_server, api_token, tmp_path, model_dir=None) -> subprocess.CompletedProcess:
    script = readme_script(name)
    assert len(script.splitlines()) <= 16, "a README script stays about ten lines"
    if model_dir is not None:
        assert HUB_MODEL in script
        script = script.replace(HUB_MODEL, str(model_dir))
    (tmp_path / f"readme_{name}.py").write_text(script)  # not trl.py: it would shadow TRL
    completed = subprocess.run(
        [sys.executable, f"readme_{name}.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PREFLAB_URL": live_server.url, "PREFLAB_TOKEN": api_token, "HF_HUB_OFFLINE": "1",
             "PREFLAB_OUTBOX_DIR": str(tmp_path / "outbox"), "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false",
             "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "clients/python/src"), str(REPO_ROOT)])},
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed


def test_the_own_loop_script(live_server, api_token, tmp_path):
    run_script("own-loop", live_server=live_server, api_token=api_token, tmp_path=tmp_path)
    run = Run.objects.get(kind="external")
    assert (run.name, run.status, run.group, run.tags) == ("my loop", Run.Status.SUCCEEDED, "sweep-3",
                                                           ["baseline", "best"])
    assert run.config == {"lr": 1e-3, "epochs": 1} and run.summary == {"final_loss": 0.01}
    assert list(stored_metrics(run.pk)) == list(range(1, 101))


# `slow`: a process of its own importing transformers (and TRL); test_report_to_preflab.py runs the same
# trainers in CI
@pytest.mark.slow
def test_the_trainer_script_with_report_to_preflab(live_server, api_token, tmp_path, tiny_model_dir):
    run_script("trainer", live_server=live_server, api_token=api_token, tmp_path=tmp_path, model_dir=tiny_model_dir)
    run = Run.objects.get(kind="external")
    assert (run.name, run.status, run.total_steps) == ("my trainer run", Run.Status.SUCCEEDED, 3)
    stored = stored_metrics(run.pk)
    assert list(stored) == [1, 2, 3] and "loss" in stored[1]
    assert {"train_runtime", "total_flos", "train_loss", "eval/loss"} <= set(run.summary)
    assert stored[3]["eval/loss"] == run.summary["eval/loss"]  # the evaluation after train(), in the run


# `slow`: a process of its own importing transformers (and TRL); test_report_to_preflab.py runs the same
# trainers in CI
@pytest.mark.slow
def test_the_trl_script_with_report_to_preflab(live_server, api_token, tmp_path, tiny_model_dir):
    run_script("trl", live_server=live_server, api_token=api_token, tmp_path=tmp_path, model_dir=tiny_model_dir)
    run = Run.objects.get(kind="external")
    assert (run.name, run.status, run.config["trainer"]) == ("my grpo run", Run.Status.SUCCEEDED, "GRPOTrainer")
    stored = stored_metrics(run.pk)
    assert list(stored) == [1, 2, 3] and {"loss", "reward/mean", "reward/shorter_is_better"} <= set(stored[1])
    assert "train_runtime" in run.summary
    assert sorted({sample.step for sample in Sample.objects.filter(run=run)}) == [1, 2, 3]
