"""External runs: a program outside Preflab creates a run, logs rows and samples (idempotently), beats and
finishes it through the API; the run page shows it as one of ours; a stale one is failed by the reconcile."""

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.webapp.api.run_api_helpers import api_client_of
from tests.webapp.experiments.helpers import ARITHMETIC, register_tiny_model, small_config, tiny_model_roots
from webapp.experiments import services
from webapp.experiments.models import MetricRow, Run, Sample, SampleBatch

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(researcher):
    return api_client_of(researcher)


@pytest.fixture
def external(api) -> Run:
    response = api.post("/runs/external", {"name": "hf trainer", "config": {"lr": 2e-5, "model": "my/model"},
                                           "total_steps": 100})
    assert response.status_code == 201, response.content
    return Run.objects.get(pk=response.json()["id"])


def _rows(run: Run) -> list[tuple]:
    return list(MetricRow.objects.filter(run=run).order_by("step").values_list("step", "wall_time", "tokens_seen",
                                                                                "metrics"))


def test_an_external_run_is_created_running_and_never_queued(api, researcher, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as published:
        response = api.post("/runs/external", {"name": "outside", "config": {"lr": 1e-5, "nested": {"a": [1, 2]}}})
    assert response.status_code == 201 and not published
    answer = response.json()
    run = Run.objects.get(pk=answer["id"])
    assert (answer["kind"], answer["status"], answer["cancel_requested"]) == ("external", "running", False)
    assert (run.kind, run.status, run.created_by, run.queued_at) == ("external", Run.Status.RUNNING, researcher, None)
    assert run.config == {"lr": 1e-5, "nested": {"a": [1, 2]}} and run.data_source == {"type": "external"}
    assert run.heartbeat_at is not None and run.started_at is not None
    # POST /runs with kind "external" is the same
    assert api.post("/runs", {"kind": "external", "name": "also", "config": {}}).json()["kind"] == "external"
    refused = api.post("/runs/external", {"name": "x", "project_id": 12345})
    assert refused.status_code == 422 and refused.json()["detail"] == 'project_id: there is no project 12345'
    assert Run.objects.count() == 2


def test_rows_are_stored_and_a_replayed_batch_changes_nothing(api, external):
    batch = {"rows": [{"step": step, "metrics": {"loss": 1.0 / step, "grad_norm": "nan" if step == 2 else 0.5},
                       "wall_time": 1700000000.0 + step, "tokens_seen": 100 * step} for step in range(1, 4)]}
    first = api.post(f"/runs/{external.pk}/log", batch)
    assert first.status_code == 200 and first.json() == {"written": 3}
    stored = _rows(external)
    assert stored[1] == (2, 1700000002.0, 200, {"loss": 0.5, "grad_norm": "NaN"})
    replay = api.post(f"/runs/{external.pk}/log", batch)
    assert replay.status_code == 200 and replay.json() == {"written": 0}
    assert _rows(external) == stored
    external.refresh_from_db()
    assert (external.current_step, external.tokens_seen) == (3, 300)
    assert external.metric_names == ["grad_norm", "loss"]
    history = api.get(f"/runs/{external.pk}/metrics").json()["rows"]
    assert history[1]["metrics"] == {"loss": 0.5, "grad_norm": "nan"}


def test_train_and_eval_metrics_of_one_step_in_two_calls_are_merged(api, external):
    api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 50, "metrics": {"loss": 0.7}, "tokens_seen": 5000,
                                                     "wall_time": 10.0}]})
    api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 51, "metrics": {"loss": 0.6}, "tokens_seen": 5100}]})
    answer = api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 50, "metrics": {"eval/accuracy": 0.25,
                                                                                      "loss": None}}]})
    assert answer.json() == {"written": 1}
    row = MetricRow.objects.get(run=external, step=50)
    assert row.metrics == {"loss": 0.7, "eval/accuracy": 0.25}  # null: no value sent, the stored one stays
    assert (row.wall_time, row.tokens_seen) == (10.0, 5000)
    external.refresh_from_db()
    assert (external.current_step, external.tokens_seen) == (51, 5100)  # an earlier step does not move it back
    assert external.metric_names == ["eval/accuracy", "loss"]


def test_non_finite_values_are_kept_and_raise_alerts(api, external):
    api.post(f"/runs/{external.pk}/log", {"rows": [
        {"step": 1, "metrics": {"loss": "nan", "kl": "inf", "entropy": "-inf"}},
        {"step": 2, "metrics": {"loss": 1.0, "kl": 99.0}},
    ]})
    assert MetricRow.objects.get(run=external, step=1).metrics == {"loss": "NaN", "kl": "Infinity",
                                                                   "entropy": "-Infinity"}
    # Python's json module writes NaN and Infinity as bare words (not JSON, but what a Python client sends)
    literal = api.client.post(f"/api/v1/runs/{external.pk}/log", '{"rows": [{"step": 3, "metrics": {"loss": NaN, '
                              '"kl": -Infinity}}]}', content_type="application/json", headers=api.headers)
    assert literal.json() == {"written": 1}
    assert MetricRow.objects.get(run=external, step=3).metrics == {"loss": "NaN", "kl": "-Infinity"}
    external.refresh_from_db()
    assert [(alert["kind"], alert["step"]) for alert in external.alerts] == [("loss_nan", 1), ("kl_high", 2)]


def test_a_bad_row_is_refused_with_its_index_and_field_and_nothing_is_written(api, external):
    refusals = [
        ([{"step": 1, "metrics": {"loss": 1.0}}, {"step": -1, "metrics": {}}], 'row 1, field "step"'),
        ([{"step": 1, "metrics": {"loss": "high"}}], 'row 0, field "metrics.loss": expected a number'),
        ([{"step": 1, "metrics": {"loss": True}}], 'row 0, field "metrics.loss"'),
        ([{"step": 1, "metrics": [1.0]}], 'row 0, field "metrics"'),
        ([{"step": 1, "metrics": {}, "lr": 0.1}], 'row 0, field "lr": unknown field'),
        ([{"step": 1, "metrics": {"": 1.0}}], 'row 0, field "metrics": a metric name must be a non-empty string'),
        ([{"step": 1, "metrics": {}, "wall_time": "inf"}], 'row 0, field "wall_time": must be a finite number'),
        ([{"step": 1, "metrics": {}, "tokens_seen": 1.5}], 'row 0, field "tokens_seen"'),
    ]
    for rows, detail in refusals:
        response = api.post(f"/runs/{external.pk}/log", {"rows": rows})
        assert response.status_code == 422, (rows, response.content)
        assert response.json()["detail"].startswith(detail), response.json()
    assert not MetricRow.objects.filter(run=external).exists()


def test_a_samples_batch_sent_twice_is_written_once(api, external):
    batch = {"batch_id": str(uuid.uuid4()), "samples": [
        {"step": 10, "prompt": "2+2?", "completion": "4", "rewards": {"exact": 1.0}, "advantage": 0.5},
        {"step": 10, "prompt": "3+3?", "completion": "7\ufffd", "rewards": {"exact": "nan"}},
    ]}
    assert api.post(f"/runs/{external.pk}/samples", batch).json() == {"written": 2}
    assert api.post(f"/runs/{external.pk}/samples", batch).json() == {"written": 0}
    assert Sample.objects.filter(run=external).count() == 2
    assert SampleBatch.objects.get(run=external).sample_count == 2
    stored = Sample.objects.get(run=external, prompt="3+3?")
    assert (stored.completion, stored.rewards, stored.advantage) == ("7\ufffd", {"exact": "NaN"}, None)
    page = api.get(f"/runs/{external.pk}/samples").json()
    assert page["count"] == 2 and page["items"][1]["rewards"] == {"exact": "nan"}
    refused = api.post(f"/runs/{external.pk}/samples", {"batch_id": "b2", "samples": [{"step": 1, "prompt": "p"}]})
    assert refused.status_code == 422 and refused.json()["detail"].startswith('sample 0, field "completion"')
    assert not SampleBatch.objects.filter(batch_id="b2").exists()


def test_text_the_database_cannot_hold_is_refused_naming_the_field_and_nothing_is_written(api, external):
    """The rule of the import, for every text the API takes: the client makes a model's text storable before it
    sends it (preflab_client.values.storable_text), as Preflab's own workers do."""
    refusals = [
        (f"/runs/{external.pk}/samples", {"batch_id": "b3", "samples": [
            {"step": 1, "prompt": "p", "completion": "ok"}, {"step": 1, "prompt": "p", "completion": "7\x00"}]},
         "samples[1].completion: contains a NUL character"),
        (f"/runs/{external.pk}/samples", {"batch_id": "b\ud800", "samples": []}, "batch_id: contains a lone"),
        (f"/runs/{external.pk}/log", {"rows": [{"step": 1, "metrics": {"lo\x00ss": 1.0}}]},
         "rows[0].metrics: contains a NUL character"),
        (f"/runs/{external.pk}/finish", {"status": "failed", "error": "\ud800"}, "error: contains a lone"),
        ("/runs/external", {"name": "n", "config": {"lr": float("nan")}}, "config.lr: is nan, which JSON cannot hold"),
    ]
    for path, body, detail in refusals:
        response = api.post(path, body)
        assert response.status_code == 422 and response.json()["detail"].startswith(detail), response.json()
    external.refresh_from_db()
    assert external.status == "running" and not Sample.objects.filter(run=external).exists()
    assert not MetricRow.objects.filter(run=external).exists() and Run.objects.count() == 1


def test_heartbeat_cancel_and_finish(api, external):
    old = timezone.now() - timedelta(minutes=5)
    Run.objects.filter(pk=external.pk).update(heartbeat_at=old)
    assert api.post(f"/runs/{external.pk}/heartbeat").status_code == 204
    external.refresh_from_db()
    assert external.heartbeat_at > old
    assert api.post(f"/runs/{external.pk}/cancel").json()["cancel_requested"] is True
    read = api.get(f"/runs/{external.pk}").json()
    assert (read["status"], read["cancel_requested"]) == ("running", True)  # the program stops, then finishes
    finished = api.post(f"/runs/{external.pk}/finish", {"status": "canceled"})
    assert finished.status_code == 200 and finished.json()["status"] == "canceled"
    external.refresh_from_db()
    assert external.status == Run.Status.CANCELED and external.finished_at is not None
    assert api.post(f"/runs/{external.pk}/finish", {"status": "canceled"}).status_code == 200  # a retry
    assert api.post(f"/runs/{external.pk}/finish", {"status": "succeeded"}).status_code == 409
    assert Run.objects.get(pk=external.pk).status == Run.Status.CANCELED
    bad = api.post(f"/runs/{external.pk}/finish", {"status": "done"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("status: Input should be 'succeeded', 'failed' or 'canceled'")


def test_writes_after_finish_are_refused_but_replays_answer_as_before(api, external):
    rows = {"rows": [{"step": 1, "metrics": {"loss": 1.0}, "wall_time": 5.0}]}
    samples = {"batch_id": "first", "samples": [{"step": 1, "prompt": "p", "completion": "c"}]}
    api.post(f"/runs/{external.pk}/log", rows)
    api.post(f"/runs/{external.pk}/samples", samples)
    failed = api.post(f"/runs/{external.pk}/finish", {"status": "failed", "error": "CUDA out of memory"})
    assert (failed.json()["status"], failed.json()["error"]) == ("failed", "CUDA out of memory")
    stored = _rows(external)
    for path, body in ((f"/runs/{external.pk}/log", {"rows": [{"step": 2, "metrics": {"loss": 0.5}}]}),
                       (f"/runs/{external.pk}/log", {"rows": [{"step": 1, "metrics": {"loss": 0.9}}]}),
                       (f"/runs/{external.pk}/samples", {**samples, "batch_id": "second"}),
                       (f"/runs/{external.pk}/heartbeat", {})):
        response = api.post(path, body)
        assert response.status_code == 409, (path, body, response.content)
        assert "is failed, no longer running" in response.json()["detail"]
    assert api.post(f"/runs/{external.pk}/log", rows).json() == {"written": 0}
    assert api.post(f"/runs/{external.pk}/samples", samples).json() == {"written": 0}
    assert _rows(external) == stored and Sample.objects.filter(run=external).count() == 1


def test_a_run_preflab_runs_takes_no_writes_from_a_client(api, settings, tiny_model_dir, researcher):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    ours = services.run_create(kind="reward_model", config=small_config(register_tiny_model(tiny_model_dir)),
                               data_source=ARITHMETIC, created_by=researcher, name="ours")
    Run.objects.filter(pk=ours.pk).update(status=Run.Status.RUNNING)
    for path, body in ((f"/runs/{ours.pk}/log", {"rows": [{"step": 1, "metrics": {"loss": 1.0}}]}),
                       (f"/runs/{ours.pk}/samples", {"batch_id": "b", "samples": []}),
                       (f"/runs/{ours.pk}/heartbeat", {}), (f"/runs/{ours.pk}/finish", {"status": "succeeded"})):
        response = api.post(path, body)
        assert response.status_code == 409 and "only external runs" in response.json()["detail"]
    assert not MetricRow.objects.filter(run=ours).exists()
    assert Run.objects.get(pk=ours.pk).status == Run.Status.RUNNING
    assert api.post("/runs/999999/log", {"rows": []}).status_code == 404


def test_a_stale_external_run_is_failed_because_its_client_stopped(api, external, settings):
    fresh = services.external_run_create(name="alive", config={}, created_by=None)
    assert services.runs_fail_stale() == []
    later = timezone.now() + timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S + 5)
    Run.objects.filter(pk=fresh.pk).update(heartbeat_at=later)
    assert services.runs_fail_stale(now=later) == [external.pk]
    external.refresh_from_db()
    assert external.status == Run.Status.FAILED
    assert external.error.startswith("the client stopped sending heartbeats; last at ")
    assert [alert["kind"] for alert in external.alerts] == ["stale_heartbeat"]
    assert Run.objects.get(pk=fresh.pk).status == Run.Status.RUNNING
    assert external.heartbeat_lost

    # failed for its missing heartbeats only: late rows and samples go in, the run stays failed
    late = api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 1, "metrics": {"loss": 1.0}}]})
    assert late.status_code == 200 and late.json() == {"written": 1}
    samples = {"batch_id": "late", "samples": [{"step": 1, "prompt": "p", "completion": "c"}]}
    assert api.post(f"/runs/{external.pk}/samples", samples).json() == {"written": 1}
    assert Run.objects.get(pk=external.pk).status == Run.Status.FAILED
    # its program beats again: running, reopened
    assert api.post(f"/runs/{external.pk}/heartbeat", {}).status_code == 204
    external.refresh_from_db()
    assert (external.status, external.error, external.finished_at, external.heartbeat_lost) == (
        Run.Status.RUNNING, "", None, False)
    reopened = next(alert for alert in external.alerts if alert["kind"] == "reopened")
    assert re.fullmatch(r"reopened after \d+ s: its program beat again after the heartbeat timeout had failed it",
                        reopened["message"])
    assert api.post(f"/runs/{external.pk}/finish", {"status": "succeeded"}).json()["status"] == "succeeded"
    assert api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 2, "metrics": {"loss": 1.0}}]}).status_code == 409


def test_a_finish_from_the_journal_ends_a_run_failed_for_missing_heartbeats_with_its_status(api, external, settings):
    later = timezone.now() + timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S + 5)
    assert services.runs_fail_stale(now=later) == [external.pk]
    answer = api.post(f"/runs/{external.pk}/finish", {"status": "failed", "error": "CUDA out of memory"})
    assert (answer.json()["status"], answer.json()["error"]) == ("failed", "CUDA out of memory")
    assert not Run.objects.get(pk=external.pk).heartbeat_lost
    # ended by its program now: no more late rows, no reopening
    assert api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 1, "metrics": {"loss": 1.0}}]}).status_code == 409
    assert api.post(f"/runs/{external.pk}/heartbeat", {}).status_code == 409


def test_the_requeue_never_publishes_an_external_run(external):
    # an external run is never queued; even a row that says so (by hand) is left to the stale check
    Run.objects.filter(pk=external.pk).update(status=Run.Status.QUEUED, queued_at=timezone.now() - timedelta(days=1))
    assert services.runs_requeue_lost(message_ids=set()) == []


def test_resume_and_fork_are_not_offered_for_an_external_run(api, external, researcher_client):
    assert api.post(f"/runs/{external.pk}/fork", {}).status_code == 409
    Run.objects.filter(pk=external.pk).update(status=Run.Status.SUCCEEDED)
    resumed = api.post(f"/runs/{external.pk}/resume", {"checkpoint_id": 1})
    assert resumed.status_code == 409 and "external run" in resumed.json()["detail"]
    assert researcher_client.get(f"/runs/new?fork={external.pk}").status_code == 400
    page = researcher_client.get(f"/runs/{external.pk}/").content.decode()
    assert "?fork=" not in page and 'id="resume-run"' not in page
    assert Run.objects.count() == 1


def test_the_run_page_list_and_compare_show_an_external_run(api, external, researcher_client, researcher):
    api.post(f"/runs/{external.pk}/log", {"rows": [
        {"step": step, "metrics": {"loss": "nan" if step == 3 else 1.0 / step}} for step in range(1, 6)]})
    api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 5, "metrics": {"eval/accuracy": 0.75}}]})
    api.post(f"/runs/{external.pk}/samples", {"batch_id": "b", "samples": [
        {"step": 5, "prompt": "What is 6 x 7?", "completion": "It is 42.", "rewards": {"exact": 1.0}}]})
    page = researcher_client.get(f"/runs/{external.pk}/").content.decode()
    assert "It is 42." in page and "What is 6 x 7?" in page
    assert "Logged through the API by a program outside Preflab" in page
    assert 'data-alert="loss_nan"' in page and 'id="cancel-run"' in page
    series = researcher_client.get(f"/runs/{external.pk}/metrics").json()["series"]
    assert series["loss"]["x"] == [1, 2, 4, 5] and series["loss"]["nonfinite_x"] == [3]
    assert series["eval/accuracy"] == {"x": [5], "y": [0.75], "nonfinite_x": [], "nonfinite": []}
    listed = researcher_client.get("/runs/?kind=external").content.decode()
    assert f"#{external.pk} hf trainer" in listed and "eval/accuracy" in listed  # its key metric
    assert '<option value="external" selected>' in listed
    other = services.external_run_create(name="other", config={"lr": 3e-5, "model": "my/model"}, created_by=researcher)
    compare = researcher_client.get(f"/runs/compare?runs={external.pk}&runs={other.pk}")
    assert compare.status_code == 200
    assert [key for key, _ in compare.context["diff"]] == ["lr"]


def test_a_run_past_its_metric_names_limit_is_a_conflict_and_the_row_is_not_written(api, external):
    """The run's state refuses the row (each name is a chart), not the row's shape: a 409, as for a finished run."""
    first = {f"m{index}": 1.0 for index in range(services.RUN_METRIC_NAMES_MAX)}
    assert api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 1, "metrics": first}]}).json() == {"written": 1}
    refused = api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 2, "metrics": {"one more": 1.0}}]})
    assert refused.status_code == 409 and "at most 1,000 (each is a chart)" in refused.json()["detail"]
    assert list(MetricRow.objects.filter(run=external).values_list("step", flat=True)) == [1]
    accepted = api.post(f"/runs/{external.pk}/log", {"rows": [{"step": 2.0, "metrics": {"m0": 2.0}}]})
    assert accepted.json() == {"written": 1}  # 2.0 is the whole number 2: JSON has one type of number
