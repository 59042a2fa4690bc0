"""A run's training data frozen at launch (issue 29): its row count and SHA-256 on the run, the rows downloadable
from the page and the API, and the worker training from that file, not from the database again."""

import hashlib
import json

import pytest

from tests.webapp.annotation.factories import DISPUTED_PAIR_COUNTS, make_disputed_project
from tests.webapp.api.conftest import ApiClient
from tests.webapp.experiments.helpers import run_status, small_config, wait_for
from webapp.accounts.services import api_token_create
from webapp.annotation.models import PreferencePair
from webapp.experiments import services
from webapp.experiments.data_snapshot import snapshot_path
from webapp.experiments.data_sources import training_rows
from webapp.experiments.models import MetricRow, Run

FINISHED = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELED)


def _launch(tiny_model, researcher, project, aggregation: str, **overrides) -> Run:
    source = {"type": "project_pairs", "project_id": project.pk, "aggregation": aggregation}
    config = small_config(tiny_model, max_steps=2, checkpoint_every=0, **overrides)
    return services.run_create(kind="reward_model", config=config, data_source=source, created_by=researcher,
                               name=f"rm {aggregation}")


def _download(response) -> bytes:
    return b"".join(response.streaming_content)


@pytest.mark.django_db
@pytest.mark.parametrize("aggregation", ["all", "majority", "drop_conflicts", "resolved", "annotator:ann2"])
def test_the_launch_freezes_the_rows_with_their_count_and_hash(tiny_model, researcher, researcher_client, client,
                                                              aggregation):
    project = make_disputed_project(owner=researcher)
    source = {"type": "project_pairs", "project_id": project.pk, "aggregation": aggregation}
    expected_rows = training_rows("reward_model", source)[0]
    run = _launch(tiny_model, researcher, project, aggregation, batch_size=2)
    data = snapshot_path(run.pk).read_bytes()
    assert run.data_rows == DISPUTED_PAIR_COUNTS[aggregation] == len(data.splitlines())
    assert run.data_sha256 == hashlib.sha256(data).hexdigest()
    assert [json.loads(line) for line in data.splitlines()] == expected_rows

    page = researcher_client.get(f"/runs/{run.pk}/data.jsonl")
    assert page.status_code == 200 and _download(page) == data
    assert page["Content-Disposition"].startswith("attachment;")
    api = ApiClient(client, api_token_create(user=researcher, name="tests")[1])
    assert _download(api.get(f"/runs/{run.pk}/data")) == data
    described = api.get(f"/runs/{run.pk}").json()
    assert (described["data_rows"], described["data_sha256"]) == (run.data_rows, run.data_sha256)
    assert described["data_source"]["aggregation"] == aggregation
    shown = researcher_client.get(f"/runs/{run.pk}/").content.decode()
    assert f"aggregation: {aggregation}" in shown and run.data_sha256 in shown


@pytest.mark.django_db
def test_a_run_without_a_snapshot_has_no_download(researcher, researcher_client, client, tiny_model):
    run = services.run_create(kind="reward_model", config=small_config(tiny_model),
                              data_source={"type": "arithmetic", "level": 1, "size": 32}, created_by=researcher)
    assert (run.data_rows, run.data_sha256) == (None, "")
    assert researcher_client.get(f"/runs/{run.pk}/data.jsonl").status_code == 404
    api = ApiClient(client, api_token_create(user=researcher, name="tests")[1])
    missing = api.get(f"/runs/{run.pk}/data")
    assert missing.status_code == 404 and "no frozen training data" in missing.json()["detail"]


@pytest.mark.django_db
def test_a_bad_aggregation_is_refused_at_launch_naming_it(tiny_model, researcher):
    from django.core.exceptions import ValidationError

    project = make_disputed_project(owner=researcher)
    with pytest.raises(ValidationError) as refused:
        _launch(tiny_model, researcher, project, "most")
    assert "unknown aggregation 'most'" in refused.value.message_dict["aggregation"][0]
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_worker_trains_on_the_snapshot_not_on_the_database(celery_worker_factory, tiny_model, researcher):
    project = make_disputed_project(owner=researcher)
    frozen = _launch(tiny_model, researcher, project, "drop_conflicts")  # 4 rows, one batch of 4
    tampered = _launch(tiny_model, researcher, project, "majority")
    # After the launch the project's pairs are gone: a run reading the database now would have no rows at all.
    PreferencePair.objects.filter(project=project).delete()
    path = snapshot_path(tampered.pk)
    path.write_bytes(path.read_bytes().replace(b'"chosen": "a"', b'"chosen": "z"'))
    worker = celery_worker_factory(queues=("gpu",))
    wait_for(lambda: run_status(frozen.pk) in FINISHED and run_status(tampered.pk) in FINISHED, timeout_s=240,
             what=lambda: f"both runs\n{worker.log_tail()}")
    frozen.refresh_from_db()
    assert frozen.status == Run.Status.SUCCEEDED, frozen.error
    assert MetricRow.objects.filter(run=frozen).count() == 2
    # the worker checks the file's hash against the run's before training: what it trained on is the download
    tampered.refresh_from_db()
    assert tampered.status == Run.Status.FAILED
    assert "SnapshotError" in tampered.error and "changed since the launch" in tampered.error, tampered.error


@pytest.mark.django_db
def test_the_launch_form_names_the_aggregation_and_the_run_page_shows_it(researcher_client, researcher, tiny_model):
    project = make_disputed_project(owner=researcher)
    page = researcher_client.get("/runs/new?kind=reward_model").content.decode()
    assert 'name="aggregation"' in page and 'value="drop_conflicts"' in page and 'value="annotator:ann1"' in page
    form = {"name": "majority rm", "data_source": "project_pairs", "project": str(project.pk),
            "aggregation": "majority", "model": tiny_model.path, "batch_size": "4", "grad_accum_steps": "1",
            "max_length": "64", "max_prompt_length": "16", "lr_scheduler": "linear",
            "lora_target_modules": "all-linear", "max_steps": "2"}
    response = researcher_client.post("/runs/new?kind=reward_model", form)
    run = Run.objects.get()
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert run.data_source == {"type": "project_pairs", "project_id": project.pk, "aggregation": "majority"}
    assert run.data_rows == DISPUTED_PAIR_COUNTS["majority"]
    shown = researcher_client.get(f"/runs/{run.pk}/").content.decode()
    assert "Project «Disputed»: preference pairs, aggregation: majority" in shown
    assert f'href="/runs/{run.pk}/data.jsonl"' in shown
