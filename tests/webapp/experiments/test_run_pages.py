"""The run list, launch form, run page, metrics endpoint and compare page (no worker: runs stay queued)."""

import math

import pytest

from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from webapp.experiments import services
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


def _run(tiny_model, researcher, **overrides) -> Run:
    return services.run_create(kind="reward_model", config=small_config(tiny_model, **overrides),
                               data_source=ARITHMETIC, created_by=researcher, name="page run")


def test_launch_form_shows_defaults_and_help_and_hides_test_only_fields(researcher_client, tiny_model):
    page = researcher_client.get("/runs/new?kind=dpo").content.decode()
    assert 'name="beta"' in page and 'value="0.1"' in page
    assert "Strength of the implicit KL" in page
    assert "debug_nan_at_step" not in page and 'name="output_dir"' not in page
    assert tiny_model.path in page


def test_launch_form_creates_a_run_and_shows_errors_inline(researcher_client, tiny_model):
    form = {"name": "from form", "data_source": "arithmetic", "level": "1", "size": "16", "model": tiny_model.path,
            "batch_size": "4", "grad_accum_steps": "1", "max_length": "64", "max_prompt_length": "16",
            "lr_scheduler": "linear", "lora_target_modules": "all-linear", "max_steps": "3"}
    response = researcher_client.post("/runs/new?kind=reward_model", {**form, "grad_accum_steps": "3"})
    assert response.status_code == 422
    assert "is not divisible by grad_accum_steps=3" in response.content.decode()
    assert not Run.objects.exists()
    response = researcher_client.post("/runs/new?kind=reward_model", form)
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.config["max_steps"] == 3 and run.config["lora_target_modules"] == ["all-linear"]
    assert run.data_source == {"type": "arithmetic", "level": 1, "size": 16}


def test_the_dapo_preset_fills_the_grpo_form_and_unknown_presets_are_not_found(researcher_client, tiny_model):
    plain = researcher_client.get("/runs/new?kind=grpo")
    assert 'href="?kind=grpo&preset=dapo"' in plain.content.decode()
    assert plain.context["form"].initial["beta"] == 0.04
    response = researcher_client.get("/runs/new?kind=grpo&preset=dapo")
    initial = response.context["form"].initial
    assert (initial["beta"], initial["epsilon_high"], initial["loss_aggregation"]) == (0.0, 0.28, "token-mean")
    assert initial["dynamic_sampling"] is True and initial["overlong_filtering"] is True
    assert (initial["reward__answer_match"], initial["reward__soft_overlong"]) == (1.0, 1.0)
    assert "clip-higher (epsilon_high 0.28)" in response.content.decode()
    assert researcher_client.get("/runs/new?kind=grpo&preset=nope").status_code == 404
    assert researcher_client.get("/runs/new?kind=ppo&preset=dapo").status_code == 404
    assert "presets" not in researcher_client.get("/runs/new?kind=dpo").content.decode()


def test_an_uploaded_file_with_a_bad_line_is_refused_with_its_line_number(researcher_client, tiny_model):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("pairs.jsonl", b'{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": 1}\n')
    response = researcher_client.post("/runs/new?kind=reward_model", {
        "data_source": "upload", "upload": upload, "model": tiny_model.path, "lr_scheduler": "linear",
        "lora_target_modules": "all-linear"})
    assert "pairs.jsonl, line 2: missing text field &#x27;prompt&#x27;" in response.content.decode()


def test_run_list_page_and_metrics_endpoint(researcher_client, tiny_model, researcher):
    run = _run(tiny_model, researcher)
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": 100.0 + step, "tokens_seen": step * 7,
         "metrics": {"loss": math.nan if step == 2 else 1.0}} for step in range(1, 4)])
    page = researcher_client.get("/runs/").content.decode()
    assert f"#{run.pk} page run" in page and "loss_nan" in page
    rows = researcher_client.get("/runs/rows?status=queued").content.decode()
    assert f"#{run.pk} page run" in rows
    assert f"#{run.pk}" not in researcher_client.get("/runs/rows?status=failed").content.decode()
    answer = researcher_client.get(f"/runs/{run.pk}/metrics?x=tokens_seen").json()
    assert answer["series"]["loss"]["x"] == [7, 21] and answer["series"]["loss"]["nonfinite_x"] == [14]
    later = researcher_client.get(f"/runs/{run.pk}/metrics?after=2").json()
    assert later["series"]["loss"]["x"] == [3] and later["last_step"] == 3
    zoomed = researcher_client.get(f"/runs/{run.pk}/metrics?x_min=2&x_max=3").json()
    assert zoomed["series"]["loss"]["x"] == [3]
    detail = researcher_client.get(f"/runs/{run.pk}/").content.decode()
    assert "Cancel run" in detail and "charts.js" in detail


def test_run_page_cancel_and_compare(researcher_client, tiny_model, researcher):
    first, second = _run(tiny_model, researcher), _run(tiny_model, researcher, lr=0.002)
    researcher_client.post(f"/runs/{first.pk}/cancel")
    assert Run.objects.get(pk=first.pk).status == Run.Status.CANCELED
    page = researcher_client.get(f"/runs/compare?runs={first.pk}&runs={second.pk}").content.decode()
    assert 'data-key="lr"' in page and page.count("data-key=") == 1


def test_annotators_cannot_see_runs(annotator_client, tiny_model, researcher):
    run = _run(tiny_model, researcher)
    assert annotator_client.get(f"/runs/{run.pk}/").status_code == 403
    assert annotator_client.get(f"/runs/{run.pk}/metrics").status_code == 403


def test_samples_follow_the_newest_step_while_the_run_is_active(researcher_client, tiny_model, researcher):
    run = _run(tiny_model, researcher)
    polling = f'hx-get="/runs/{run.pk}/samples" hx-trigger="every 5s"'
    assert polling in researcher_client.get(f"/runs/{run.pk}/").content.decode()  # waits for the first samples
    for step in (10, 20):
        services.samples_write(run_id=run.pk, samples=[
            {"step": step, "prompt": "Calculate 1 + 1", "completion": f"answer at {step}",
             "rewards": {"answer_match": 1.0}, "advantage": -0.25716793513989}])
    latest = researcher_client.get(f"/runs/{run.pk}/samples").content.decode()
    assert "answer at 20" in latest and polling in latest
    assert "<td>-0.257</td>" in latest  # an advantage shows three decimals, as the rewards do
    earlier = researcher_client.get(f"/runs/{run.pk}/samples?step=10").content.decode()
    assert "answer at 10" in earlier and "every 5s" not in earlier  # a step the user picked stays put
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    assert "every 5s" not in researcher_client.get(f"/runs/{run.pk}/samples").content.decode()


def test_a_launch_refused_after_its_upload_was_read_leaves_no_file_behind(researcher_client, tiny_model, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    uploads = settings.DATA_DIR / "uploads"
    before = set(uploads.iterdir()) if uploads.exists() else set()
    upload = SimpleUploadedFile("pairs.jsonl", b'{"prompt": "a", "chosen": "b", "rejected": "c"}\n')
    response = researcher_client.post("/runs/new?kind=reward_model", {
        "data_source": "upload", "upload": upload, "model": tiny_model.path, "lr_scheduler": "linear",
        "lora_target_modules": "all-linear", "lr": "-1"})  # refused by the trainer's config, after the upload was read
    assert response.status_code == 422 and "must be &gt; 0, got -1" in response.content.decode()
    assert not Run.objects.exists()
    after = set(uploads.iterdir()) if uploads.exists() else set()
    assert after == before, after - before


def test_the_form_asks_for_nodes_and_the_run_page_says_how_many_processes_on_how_many_nodes(
    researcher_client, tiny_model
):
    form = researcher_client.get("/runs/new?kind=reward_model").context["form"]
    processes_group = next(fields for group, _, fields, _ in form.grouped_config_fields() if group == "processes")
    assert [field.name for field in processes_group] == ["num_processes", "num_nodes", "parallelism"]
    posted = {"name": "two nodes", "data_source": "arithmetic", "level": "1", "size": "16", "model": tiny_model.path,
              "batch_size": "4", "grad_accum_steps": "1", "max_length": "64", "max_prompt_length": "16",
              "lr_scheduler": "linear", "lora_target_modules": "all-linear", "max_steps": "3", "parallelism": "ddp"}
    refused = researcher_client.post("/runs/new?kind=reward_model", {**posted, "num_processes": "3", "num_nodes": "2"})
    assert refused.status_code == 422 and not Run.objects.exists()
    assert refused.context["form"].errors["num_nodes"] == [
        "num_processes=3 does not split evenly over num_nodes=2: every node runs the same number of processes, so "
        "num_processes (the total over all nodes) must be a multiple of 2"]
    response = researcher_client.post("/runs/new?kind=reward_model", {**posted, "num_processes": "4", "num_nodes": "2"})
    run = Run.objects.get()
    assert response.status_code == 302 and (run.config["num_processes"], run.config["num_nodes"]) == (4, 2)
    page = researcher_client.get(f"/runs/{run.pk}/").content.decode()
    assert '<dd id="run-processes">4 processes on 2 nodes · ddp' in page
