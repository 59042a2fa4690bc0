"""Run metadata as W&B users know it, through the client against the live server: the summary, tags and group,
the config updated after the start, system metrics on request; and the callback's message without transformers."""

import math
import os
import subprocess
import sys
import time

import pytest
from preflab_client import ApiError

from tests.client.helpers import stored_metrics, wait_for
from tests.conftest import REPO_ROOT
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_summary_tags_group_and_config_updates_are_stored_merged_and_read_back(preflab, client, researcher):
    run = preflab.init_run("sweep member", config={"lr": 1e-3, "seed": 1}, tags=["baseline", "tiny"],
                           group="sweep-3")
    run.log({"loss": 1.0}, step=1)
    run.summary["eval/accuracy"] = 0.8
    run.summary.update({"best_step": 1, "note": "first", "diverged": math.nan})
    run.summary.update({"note": "second"})  # merged: the other keys stay
    run.config.update({"lr": 5e-4, "warmup": 10})
    run.tags += ("best",)
    run.log({"loss": 0.5}, step=2)
    assert run.finish()["status"] == "succeeded"

    stored = Run.objects.get(pk=run.id)
    assert stored.summary == {"eval/accuracy": 0.8, "best_step": 1, "note": "second", "diverged": "nan"}
    assert stored.config == {"lr": 5e-4, "seed": 1, "warmup": 10}
    assert (stored.tags, stored.group) == (["baseline", "tiny", "best"], "sweep-3")
    assert stored_metrics(run.id) == {1: {"loss": 1.0}, 2: {"loss": 0.5}}  # the update kept the rows in order

    read = preflab.run(run.id)
    assert (read["summary"], read["config"], read["tags"], read["group"]) == (
        stored.summary, stored.config, stored.tags, stored.group)

    other = preflab.init_run("other", tags=["tiny"])
    other.finish()
    assert [found["id"] for found in preflab.runs(tag="baseline")] == [run.id]
    assert [found["id"] for found in preflab.runs(tag="tiny")] == [other.id, run.id]
    assert [found["id"] for found in preflab.runs(group="sweep-3")] == [run.id]
    assert list(preflab.runs(group="sweep-4")) == []

    client.force_login(researcher)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert 'id="run-summary"' in page and "eval/accuracy" in page and 'data-tag="best"' in page
    assert 'data-group="sweep-3"' in page and "warmup" in page
    listed = client.get("/runs/?tag=best").content.decode()
    assert f"/runs/{run.id}/" in listed and f"/runs/{other.id}/" not in listed


def test_an_update_the_server_refuses_names_the_field(preflab):
    with pytest.raises(ApiError) as refused:
        preflab.post("runs/external", {"name": "bad tags", "tags": ["ok", "   "]})
    assert refused.value.status == 422 and "tags" in str(refused.value)
    run = preflab.init_run("finished")
    run.finish()
    with pytest.raises(ApiError) as late:
        preflab.post(f"runs/{run.id}/update", {"summary": {"x": 1}})
    assert late.value.status == 409 and "no longer running" in str(late.value)
    assert preflab.post(f"runs/{run.id}/update", {"tags": []})["written"] == 0  # a replay of what it holds


def test_system_metrics_are_logged_at_the_latest_step_on_request(preflab):
    run = preflab.init_run("with system metrics", system_metrics=0.2)
    run.log({"loss": 1.0}, step=7)
    wait_for(lambda: "system/cpu_percent" in stored_metrics(run.id).get(7, {}), what="system metrics at step 7")
    run.finish()
    metrics = stored_metrics(run.id)
    assert list(metrics) == [7]
    assert {"system/cpu_percent", "system/ram_used_gb", "system/ram_percent", "system/process_cpu_percent",
            "system/process_ram_gb"} <= set(metrics[7])
    assert 0 < metrics[7]["system/process_ram_gb"] < metrics[7]["system/ram_used_gb"]
    assert not run.system_metrics._thread.is_alive()

    quiet = preflab.init_run("without")
    quiet.log({"loss": 1.0}, step=1)
    time.sleep(0.5)
    quiet.finish()
    assert quiet.system_metrics is None and stored_metrics(quiet.id) == {1: {"loss": 1.0}}


def test_the_callback_without_transformers_says_which_extra_to_install():
    completed = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['transformers'] = None\n"
                               "import preflab_client\nfrom preflab_client import PreflabCallback"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'clients/python/src'}"},
    )
    assert completed.returncode == 1
    assert "PreflabCallback needs transformers" in completed.stderr
    assert "pip install 'preflab-client[transformers]'" in completed.stderr
