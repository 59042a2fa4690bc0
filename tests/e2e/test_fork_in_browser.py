"""A researcher forks a finished run from its page, changes only the learning rate and launches: the fork trains,
on a real worker, on the parent's data (a project's preference pairs), not on the form's first choice (issue 29)."""

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import run_status, small_config, wait_for
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.experiments import services
from webapp.experiments.models import MetricRow, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_fork_launched_with_a_new_lr_trains_on_the_parents_project_pairs(
    page, live_server, researcher, tiny_model, celery_worker_factory
):
    worker = celery_worker_factory(queues=("gpu",))
    project = annotation_services.project_create(name="Pairs to fork", owner=researcher)
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"{index} + 1 =", chosen=str(index + 1),
                     rejected=str(index + 2)) for index in range(8)])
    parent = services.run_create(kind="reward_model", config=small_config(tiny_model, max_steps=2),
                                 data_source={"type": "project_pairs", "project_id": project.pk,
                                              "aggregation": "majority"},
                                 created_by=researcher, name="on pairs")
    wait_for(lambda: run_status(parent.pk) == Run.Status.SUCCEEDED, timeout_s=120,
             what=lambda: f"the parent run to succeed; worker log: {worker.log_tail()}")

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{parent.pk}/")
    page.click("a.button:text-is('Fork')")
    page.wait_for_url(f"**/runs/new?fork={parent.pk}")
    assert page.input_value("[name=data_source]") == "project_pairs"
    assert page.input_value("[name=project]") == str(project.pk)
    assert page.input_value("[name=aggregation]") == "majority"
    assert page.is_visible("[name=project]") and not page.is_visible("[name=level]")
    page.fill("[name=lr]", "0.0005")
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    fork = Run.objects.order_by("-pk").first()
    assert fork.pk != parent.pk and fork.parent_id == parent.pk
    page.wait_for_selector("#run-status-badge:text('succeeded')", timeout=120_000)

    fork.refresh_from_db()
    assert fork.status == Run.Status.SUCCEEDED, fork.error
    assert fork.data_source == parent.data_source == {"type": "project_pairs", "project_id": project.pk,
                                                      "aggregation": "majority"}
    assert fork.config["lr"] == 0.0005
    assert {key: value for key, value in fork.config.items() if key not in ("lr", "output_dir")} == {
        key: value for key, value in parent.config.items() if key not in ("lr", "output_dir")}
    assert MetricRow.objects.filter(run=fork).exists()
    assert page.js_errors == []
