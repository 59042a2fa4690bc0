"""Runs and models through the client: register and list models, launch / fork / cancel runs as the launch form
does, and read a run's whole history back (every metric row over pages, its samples)."""

import math

import pytest
from preflab_client import ApiError

from tests.webapp.experiments.helpers import ARITHMETIC, tiny_model_roots
from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 1200  # more than two pages of the metrics endpoint as the client asks for them


def test_models_and_launched_runs_through_the_client(preflab, settings, tiny_model_dir):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = preflab.register_model(str(tiny_model_dir), name="tiny")
    assert ModelRef.objects.get(pk=model["id"]).name == "tiny"
    assert model["id"] in [item["id"] for item in preflab.models()]

    config = {"model": model["path"], "batch_size": 4, "max_length": 64, "max_prompt_length": 16, "max_steps": 6}
    launched = preflab.create_run("reward_model", "from a script", config, ARITHMETIC)
    assert launched["status"] == "queued"
    assert Run.objects.get(pk=launched["id"]).config["max_steps"] == 6
    forked = preflab.fork_run(launched["id"], name="a fork", config={"lr": 0.0005})
    assert forked["parent_id"] == launched["id"] and forked["config"]["lr"] == 0.0005
    for run in (launched, forked):
        assert preflab.cancel_run(run["id"])["status"] == "canceled"
        assert Run.objects.get(pk=run["id"]).status == Run.Status.CANCELED
    assert preflab.run(forked["id"])["name"] == "a fork"

    with pytest.raises(ApiError) as refused:
        preflab.create_run("reward_model", "bad", {**config, "lr": -1}, ARITHMETIC)
    assert refused.value.status == 422 and "lr" in refused.value.detail
    assert not Run.objects.filter(name="bad").exists()
    with pytest.raises(ApiError) as refused:
        preflab.resume_run(launched["id"], checkpoint_id=999_999)
    assert refused.value.status == 422 and "checkpoint_id" in refused.value.detail


def test_a_runs_whole_history_reads_back_over_pages(preflab):
    run = preflab.init_run("many rows", total_steps=ROWS)
    for step in range(1, ROWS + 1):
        run.log({"loss": 1 / step, "kl": math.nan if step == 7 else 0.0}, step=step)
    run.log_samples([{"prompt": f"p{index}", "completion": f"c{index}"} for index in range(3)], step=600)
    # a model can write a NUL, which the server refuses: the client stores it as U+FFFD, as Preflab's workers do
    run.log_samples([{"prompt": "last", "completion": "wor\x00ds", "rewards": {"match": 1.0}}], step=ROWS)
    assert run.finish()["status"] == "succeeded"

    rows = list(preflab.metrics(run.id))
    assert [row["step"] for row in rows] == list(range(1, ROWS + 1))
    assert [row["metrics"]["loss"] for row in rows] == [1 / step for step in range(1, ROWS + 1)]
    assert math.isnan(rows[6]["metrics"]["kl"]) and rows[7]["metrics"]["kl"] == 0.0

    samples = list(preflab.samples(run.id))
    assert [(sample["step"], sample["completion"]) for sample in samples] == [
        (600, "c0"), (600, "c1"), (600, "c2"), (ROWS, "wor\ufffdds")]
    assert [sample["rewards"] for sample in preflab.samples(run.id, step=ROWS)] == [{"match": 1.0}]
    assert [item["id"] for item in preflab.runs(kind="external")] == [run.id]
    assert preflab.run(run.id)["status"] == "succeeded"
