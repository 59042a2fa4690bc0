"""The closed loop in the browser, on a real Celery worker: an SFT run's checkpoint, picked by name in a
project's sampling form, samples responses into the project; a run launched from that checkpoint succeeds."""

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import register_tiny_model, run_status, tiny_model_roots, wait_for
from trainer.builtin_datasets import arithmetic
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Response, SamplingJob
from webapp.experiments import services
from webapp.experiments.models import ModelRef, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SFT_STEPS = 4
PROMPTS = 3


def test_a_checkpoint_picked_by_name_samples_into_a_project_and_starts_the_next_run(
    page, live_server, researcher, settings, tiny_model_dir, celery_worker_factory
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    base = register_tiny_model(tiny_model_dir)
    celery_worker_factory(queues=("default", "gpu"), PREFLAB_MODEL_ROOTS=str(tiny_model_dir.parent),
                          OMP_NUM_THREADS="1")
    # 1. a short SFT run like the demo's, checkpoint at the end
    sft = services.run_create(
        kind="sft", config={"model": base.path, **arithmetic.TINY_MODEL_SFT_SETTINGS, "max_steps": SFT_STEPS,
                            "batch_size": 8, "eval_max_new_tokens": 8},
        data_source={"type": "arithmetic", "level": 1, "size": 32}, created_by=researcher, name="closed loop sft")
    wait_for(lambda: run_status(sft.pk) not in (Run.Status.QUEUED, Run.Status.RUNNING), timeout_s=240, what="the SFT run")
    assert run_status(sft.pk) == Run.Status.SUCCEEDED, Run.objects.get(pk=sft.pk).error
    checkpoint = ModelRef.objects.get(run=sft, step=SFT_STEPS)
    assert checkpoint.architecture == ModelRef.Architecture.CAUSAL_LM

    # 2. picked by name in the project's sampling form, it samples responses on the worker
    project = annotation_services.project_create(name="loop project", responses_per_item=2, owner=researcher)
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=i, external_id=f"p{i}", text=problem.prompt)
        for i, problem in enumerate(arithmetic.problems(1, "test", PROMPTS))])
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    suggested = page.locator("#known-models option").evaluate_all("options => options.map(o => o.value)")
    assert suggested[:2] == [base.name, checkpoint.name]  # base models, then the newest checkpoint
    page.fill("[name=model_path]", checkpoint.name)
    page.fill("[name=responses_per_prompt]", "2")
    page.fill("[name=max_new_tokens]", "8")
    page.click("#sampling button[type=submit]")
    page.wait_for_selector(".job .badge.succeeded", timeout=120_000)
    job = SamplingJob.objects.get(project=project)
    assert job.status == SamplingJob.Status.SUCCEEDED and job.model_path == checkpoint.path
    responses = Response.objects.filter(prompt__project=project)
    assert responses.count() == PROMPTS * 2
    assert {response.source for response in responses} == {Response.Source.MODEL}
    assert {(r.source_detail["model"], r.source_detail["sampling_job"]) for r in responses} == {(checkpoint.path, job.pk)}

    # 3. a run launched from that checkpoint, chosen in the launch form, succeeds
    page.goto(f"{live_server.url}/runs/new?kind=sft")
    page.select_option("[name=model]", label=f"{checkpoint.name} (causal LM)")
    closed = page.locator("details:not([open]) > summary")
    while closed.count():
        closed.first.click()  # open the collapsed groups, as a researcher would
    for name, value in {"name": "from the checkpoint", "size": "16", "max_steps": "2", "batch_size": "4",
                        "max_length": "64", "max_prompt_length": "24", "eval_max_new_tokens": "4"}.items():
        page.fill(f"[name={name}]", value)
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    follow_up = Run.objects.get(name="from the checkpoint")
    assert follow_up.config["model"] == checkpoint.path
    page.wait_for_selector("#run-status-badge:text('succeeded')", timeout=180_000)
    assert run_status(follow_up.pk) == Run.Status.SUCCEEDED
    assert ModelRef.objects.filter(run=follow_up, step=2).exists()
    assert page.js_errors == []
