"""The runs API: launch (validated and queued as the launch form), list, read, cancel, fork, resume, the whole
metric history and the samples (no worker: launched runs stay queued)."""

import math
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.webapp.api.run_api_helpers import api_client_of
from tests.webapp.experiments.helpers import (
    ARITHMETIC,
    finished_run_with_checkpoints,
    small_config,
)
from webapp.experiments import services
from webapp.experiments.models import MetricRow, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(researcher):
    return api_client_of(researcher)


def _launch_body(tiny_model, **config):
    return {"kind": "reward_model", "name": "from the api", "config": {**small_config(tiny_model), **config},
            "data_source": ARITHMETIC}


def test_a_refused_launch_names_the_field_and_creates_nothing(api, tiny_model, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as published:
        refusals = [
            (_launch_body(tiny_model, lr=-1.0), 'config.lr: must be > 0'),
            (_launch_body(tiny_model, lr_typo=0.1), 'config.lr_typo: unknown field'),
            ({**_launch_body(tiny_model), "kind": "rlhf"}, "kind: Input should be 'reward_model', 'sft'"),
            ({**_launch_body(tiny_model), "data_source": {"type": "arithmetic", "level": 7, "size": 8}},
             'data_source.level: must be 1, 2 or 3'),
            ({**_launch_body(tiny_model), "data_source": {"type": "upload", "path": "/etc/passwd"}},
             'data_source: an uploaded file is given through the launch form'),
            ({**_launch_body(tiny_model), "data_source": {"type": "project_pairs", "project_id": 999}},
             'data_source.project_id: there is no project 999'),
            (_launch_body(tiny_model, model="/nowhere/model"), 'config.model: /nowhere/model is outside'),
            (_launch_body(tiny_model, debug_nan_at_step=2), 'config.debug_nan_at_step: is a switch for'),
            (_launch_body(tiny_model, output_dir="/tmp/elsewhere"), 'config.output_dir: is set by Preflab'),
            ({key: value for key, value in _launch_body(tiny_model).items() if key != "data_source"},
             'data_source: give the data to train on'),
        ]
        for body, detail in refusals:
            response = api.post("/runs", body)
            assert response.status_code == 422, (body, response.content)
            assert response.json()["detail"].startswith(detail), response.json()
    assert not Run.objects.exists() and not published


def test_a_good_launch_is_a_queued_run_with_the_validated_config(api, tiny_model, researcher,
                                                                django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as published:
        response = api.post("/runs", _launch_body(tiny_model, max_steps=3))
    assert response.status_code == 201, response.content
    run = Run.objects.get()
    answer = response.json()
    assert (answer["id"], answer["status"], answer["kind"], answer["name"]) == (run.pk, "queued", "reward_model",
                                                                                 "from the api")
    assert answer["url"] == f"http://testserver/runs/{run.pk}/"
    assert (run.status, run.created_by, run.data_source) == (Run.Status.QUEUED, researcher, ARITHMETIC)
    assert run.config["max_steps"] == 3 and run.config["output_dir"].endswith(f"/runs/{run.pk}")
    assert run.config["lr_scheduler"] == "linear"  # the trainer's default filled in
    assert run.queued_at is not None and len(published) == 1  # the worker's message, sent once committed
    assert api.get(f"/runs/{run.pk}").json() == answer


def test_the_runs_api_is_for_researchers_with_a_token(client, annotator, tiny_model):
    assert client.get("/api/v1/runs").status_code == 401
    annotator_api = api_client_of(annotator)
    assert annotator_api.get("/runs").status_code == 403
    assert annotator_api.post("/runs", _launch_body(tiny_model)).status_code == 403
    assert not Run.objects.exists()


def _run(tiny_model, researcher, name: str, kind: str = "reward_model", **config) -> Run:
    return services.run_create(kind=kind, config=small_config(tiny_model, **config), data_source=ARITHMETIC,
                               created_by=researcher, name=name)


def test_the_list_filters_by_status_kind_and_name_and_pages(api, tiny_model, researcher):
    first = _run(tiny_model, researcher, "alpha one")
    second = _run(tiny_model, researcher, "beta two", kind="sft")
    third = _run(tiny_model, researcher, "alpha three")
    Run.objects.filter(pk=third.pk).update(status=Run.Status.FAILED)
    external = services.external_run_create(name="alpha outside", config={}, created_by=researcher)

    def ids(**params) -> list[int]:
        response = api.get("/runs", **params)
        assert response.status_code == 200, response.content
        return [run["id"] for run in response.json()["items"]]

    assert ids() == [external.pk, third.pk, second.pk, first.pk]
    assert ids(status="queued") == [second.pk, first.pk]
    assert ids(kind="sft") == [second.pk]
    assert ids(kind="external") == [external.pk]
    assert ids(q="ALPHA") == [external.pk, third.pk, first.pk]
    assert ids(q="alpha", status="failed") == [third.pk]
    page = api.get("/runs", limit=2, offset=1).json()
    assert ([run["id"] for run in page["items"]], page["count"], page["next"]) == ([third.pk, second.pk], 4, 3)
    assert api.get("/runs", limit=2, offset=2).json()["next"] is None
    refused = api.get("/runs", status="finished")
    assert refused.status_code == 422 and refused.json()["detail"].startswith("status: Input should be '', 'queued'")


def test_cancel_cancels_a_queued_run_and_refuses_a_finished_one(api, tiny_model, researcher):
    run = _run(tiny_model, researcher, "to cancel")
    response = api.post(f"/runs/{run.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "canceled"
    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == (Run.Status.CANCELED, True) and run.finished_at is not None
    assert api.post(f"/runs/{run.pk}/cancel").status_code == 200  # again: nothing changes
    done = _run(tiny_model, researcher, "done")
    Run.objects.filter(pk=done.pk).update(status=Run.Status.SUCCEEDED)
    assert api.post(f"/runs/{done.pk}/cancel").status_code == 409
    done.refresh_from_db()
    assert (done.status, done.cancel_requested) == (Run.Status.SUCCEEDED, False)
    assert api.post("/runs/999999/cancel").status_code == 404


def test_a_running_run_is_asked_to_stop(api, tiny_model, researcher):
    run = _run(tiny_model, researcher, "running")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    answer = api.post(f"/runs/{run.pk}/cancel").json()
    assert (answer["status"], answer["cancel_requested"]) == ("running", True)


def test_fork_starts_from_the_parents_config_with_overrides(api, tiny_model, researcher,
                                                           django_capture_on_commit_callbacks):
    parent = _run(tiny_model, researcher, "parent", lr=0.001)
    refused = api.post(f"/runs/{parent.pk}/fork", {"config": {"batch_size": 4, "grad_accum_steps": 3}})
    assert refused.status_code == 422
    assert refused.json()["detail"] == 'config.batch_size: 4 is not divisible by grad_accum_steps=3'
    assert Run.objects.count() == 1
    with django_capture_on_commit_callbacks() as published:
        response = api.post(f"/runs/{parent.pk}/fork", {"config": {"seed": 7}})
    assert response.status_code == 201, response.content
    fork = Run.objects.get(pk=response.json()["id"])
    assert (fork.parent, fork.name, fork.status, fork.kind) == (parent, "parent (fork)", Run.Status.QUEUED,
                                                                "reward_model")
    assert (fork.config["seed"], fork.config["lr"], fork.data_source) == (7, 0.001, parent.data_source)
    assert fork.config["output_dir"].endswith(f"/runs/{fork.pk}") and len(published) == 1
    assert response.json()["parent_id"] == parent.pk


def test_resume_asks_before_removing_later_checkpoints(api, tiny_model, tiny_model_dir, researcher, monkeypatch):
    run = finished_run_with_checkpoints(tiny_model, tiny_model_dir, researcher)
    published: list[int] = []
    monkeypatch.setattr("webapp.queueing.publish", lambda task, *, kind, object_id, args=(): published.append(object_id))
    checkpoint = run.checkpoints.get(step=2)
    asked = api.post(f"/runs/{run.pk}/resume", {"checkpoint_id": checkpoint.pk})
    assert asked.status_code == 422
    assert asked.json()["detail"].startswith('checkpoint_id: resuming from step 2 removes the later '
                                             "checkpoints step 4, step 6")
    assert run.checkpoints.count() == 3
    resumed = api.post(f"/runs/{run.pk}/resume", {"checkpoint_id": checkpoint.pk, "remove_later": True})
    assert resumed.status_code == 200, resumed.content
    assert (resumed.json()["status"], resumed.json()["current_step"]) == ("queued", 2)
    assert published == [run.pk]  # the worker's message, sent before the resume commits
    assert list(run.checkpoints.values_list("step", flat=True)) == [2]
    again = api.post(f"/runs/{run.pk}/resume", {"checkpoint_id": checkpoint.pk})
    assert again.status_code == 409 and "only a finished run can be resumed" in again.json()["detail"]


def test_the_metric_history_is_every_row_in_step_order_with_non_finite_values(api, tiny_model, researcher):
    run = _run(tiny_model, researcher, "long")
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": 1000.0 + step, "tokens_seen": 8 * step,
         "metrics": {"loss": math.nan if step == 1500 else 1.0 / step, "kl": math.inf if step == 7 else 0.5,
                     "reward/mean": -math.inf if step == 2500 else 0.25}}
        for step in range(1, 2501)])
    rows, after, pages = [], None, 0
    while True:
        params = {"limit": 1000} | ({"after_step": after} if after is not None else {})
        response = api.get(f"/runs/{run.pk}/metrics", **params)
        assert response.status_code == 200
        answer = response.json()
        rows += answer["rows"]
        pages += 1
        after = answer["next_after_step"]
        if after is None:
            break
    assert pages == 3 and [row["step"] for row in rows] == list(range(1, 2501))
    assert rows[1499]["metrics"]["loss"] == "nan" and rows[6]["metrics"]["kl"] == "inf"
    assert rows[2499]["metrics"]["reward/mean"] == "-inf"
    assert rows[9] == {"step": 10, "wall_time": 1010.0, "tokens_seen": 80,
                       "metrics": {"loss": 0.1, "kl": 0.5, "reward/mean": 0.25}}
    assert len(rows) == MetricRow.objects.filter(run=run).count()
    tail = api.get(f"/runs/{run.pk}/metrics", after_step=2400).json()
    assert len(tail["rows"]) == 100 and tail["next_after_step"] is None
    assert api.get(f"/runs/{run.pk}/metrics", limit=1001).status_code == 422


def test_samples_are_paged_and_filtered_by_step(api, tiny_model, researcher):
    run = _run(tiny_model, researcher, "sampled")
    services.samples_write(run_id=run.pk, samples=[
        {"step": step, "prompt": f"p{step}.{index}", "completion": "c", "rewards": {"answer_match": 1.0},
         "advantage": math.nan if index == 0 else 0.5}
        for step in (10, 20) for index in range(3)])
    page = api.get(f"/runs/{run.pk}/samples", limit=4).json()
    assert [sample["prompt"] for sample in page["items"]] == ["p10.0", "p10.1", "p10.2", "p20.0"]
    assert (page["count"], page["next"]) == (6, 4)
    assert page["items"][0] == {"step": 10, "prompt": "p10.0", "completion": "c", "rewards": {"answer_match": 1.0},
                                "advantage": "nan"}
    assert [sample["prompt"] for sample in api.get(f"/runs/{run.pk}/samples", step=20).json()["items"]] == [
        "p20.0", "p20.1", "p20.2"]


def _use_broker(read_url: str | None, write_url: str | None) -> None:
    from workers.app import app

    app.conf.update(broker_read_url=read_url, broker_write_url=write_url)
    app._pool = None  # the cached connections
    app.amqp._producer_pool = None


@contextmanager
def _unreachable_broker() -> Iterator[None]:
    """This process's Celery app pointed at a port nothing listens on, for the time of the block."""
    from tests.webapp.upload_server import free_port
    from workers.app import app

    previous = (app.conf.broker_read_url, app.conf.broker_write_url)
    closed = f"redis://127.0.0.1:{free_port()}/0"
    _use_broker(closed, closed)
    try:
        yield
    finally:
        _use_broker(*previous)


@pytest.mark.django_db(transaction=True)
def test_a_launch_while_the_queue_is_unreachable_is_a_503_and_leaves_no_row(researcher, tiny_model):
    api = api_client_of(researcher)
    with _unreachable_broker():
        response = api.post("/runs", _launch_body(tiny_model))
    assert response.status_code == 503
    assert "could not be reached" in response.json()["detail"] and "Nothing was queued" in response.json()["detail"]
    assert not Run.objects.exists()
