"""Faults, with real processes: a Redis broker restarted while jobs wait, a broker down when a job is launched, a
GPU worker SIGKILLed in the middle of a sampling job. The row is the truth: no job is lost, and none stays queued or
running for ever. (A worker SIGKILLed in the middle of a run: tests/webapp/experiments/test_worker_killed.py.)

Each test prints its outcome as the README's fault table states it: jobs succeeded, failed with a reason, lost."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.utils import timezone

from tests.webapp.experiments.helpers import (
    ARITHMETIC,
    finished_run_with_checkpoints,
    register_tiny_model,
    small_config,
    tiny_model_roots,
    wait_for,
)
from tests.webapp.upload_server import free_port
from webapp.accounts.services import api_token_create
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import ImportJob, Response, SamplingJob
from webapp.experiments import services as run_services
from webapp.experiments.models import MetricRow, ModelRef, Run
from webapp.queueing import broker_message_ids, row_of_message
from workers.app import app

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server for a broker of its own"),
]

SAMPLING = {"responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "seed": 0}


class PrivateRedis:
    """A Redis of the test's own, without persistence (as the issue's broker was), that it can stop and restart
    without touching the Redis other tests use."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout_s=10, what=f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def _use_broker(url: str) -> None:
    """Point this test process's Celery app at another broker (its cached connections are dropped). broker_url
    itself reads through to Django's CELERY_BROKER_URL; the read and write URLs take precedence over it."""
    app.conf.update(broker_read_url=url, broker_write_url=url)
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def private_broker(tmp_path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path)
    redis.start()
    previous = app.conf.broker_write_url
    _use_broker(redis.url)
    yield redis
    redis.stop()
    _use_broker(previous)


def _worker_env(broker: PrivateRedis, model_dir: Path, **extra: str) -> dict[str, str]:
    # results (health pings) stay on the test's Redis, which is never restarted
    return {"CELERY_BROKER_URL": broker.url, "CELERY_RESULT_BACKEND": str(app.conf.result_backend),
            "PREFLAB_MODEL_ROOTS": str(Path(model_dir).parent), "OMP_NUM_THREADS": "1", **extra}


def _project_with_prompts(count: int, owner=None):
    project = annotation_services.project_create(name=f"{count} prompts", responses_per_item=2, owner=owner)
    records = [ImportRecord(line=i + 1, external_id=f"p{i}", text=f"Calculate {i} + 2\n") for i in range(count)]
    annotation_services.prompts_import(project=project, records=records)
    return project


def _outcome(statuses: list[str]) -> str:
    finished = {"succeeded", "failed", "canceled"}
    lost = sum(status not in finished for status in statuses)
    return (f"{len(statuses)} jobs: {statuses.count('succeeded')} succeeded, {statuses.count('failed')} failed with a "
            f"reason, {lost} lost")


def test_jobs_queued_when_the_broker_restarts_are_queued_again_and_succeed(
    private_broker, celery_worker_factory, tiny_model_dir, settings, researcher
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = register_tiny_model(tiny_model_dir)
    env = _worker_env(private_broker, tiny_model_dir, PREFLAB_REQUEUE_AFTER_S="2", PREFLAB_RECONCILE_EVERY_S="1")
    # the reconciling worker (default queue, with beat) is up; no GPU worker yet, so both jobs wait in the broker
    celery_worker_factory(queues=("default",), beat=True, **env)
    run = run_services.run_create(kind="reward_model", config=small_config(model), data_source=ARITHMETIC,
                                  created_by=researcher, name="queued across a broker restart")
    project = _project_with_prompts(3)
    job = annotation_services.sampling_job_create(project=project, model_path=model.path,
                                                  generation_settings=SAMPLING, created_by=researcher)
    waiting = {row_of_message(task_id) for task_id in broker_message_ids()}
    assert {("run", run.pk), ("sampling", job.pk)} <= waiting

    private_broker.restart()
    assert broker_message_ids() == set()  # Redis without persistence: the messages are gone, the rows say queued
    assert (Run.objects.get(pk=run.pk).status, SamplingJob.objects.get(pk=job.pk).status) == ("queued", "queued")

    gpu = celery_worker_factory(queues=("gpu",), **env)
    wait_for(lambda: not Run.objects.get(pk=run.pk).is_active and not SamplingJob.objects.get(pk=job.pk).is_active,
             timeout_s=180, what=lambda: f"both jobs to finish\n{gpu.log_tail()}")
    statuses = [Run.objects.get(pk=run.pk).status, SamplingJob.objects.get(pk=job.pk).status]
    print(f"broker restarted with jobs queued: {_outcome(statuses)}")
    assert statuses == ["succeeded", "succeeded"], (Run.objects.get(pk=run.pk).error, gpu.log_tail())
    assert sorted(project.prompts.values_list("response_count", flat=True)) == [2, 2, 2]


def test_a_launch_while_the_broker_is_down_is_refused_clearly_and_leaves_no_row(
    private_broker, researcher_client, tiny_model_dir, settings, researcher
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = register_tiny_model(tiny_model_dir)
    project = _project_with_prompts(2, owner=researcher)
    failed_job = SamplingJob.objects.create(project=project, model_path=model.path, generation_settings=SAMPLING,
                                            status=SamplingJob.Status.FAILED, error="worker lost")
    private_broker.stop()

    form = {"name": "launched while the broker is down", "data_source": "arithmetic", "level": "1", "size": "16",
            "model": model.path, "batch_size": "4", "grad_accum_steps": "1", "max_length": "64",
            "max_prompt_length": "16", "lr_scheduler": "linear", "lora_target_modules": "all-linear", "max_steps": "3"}
    started = time.monotonic()
    response = researcher_client.post("/runs/new?kind=reward_model", form)
    launch_s = time.monotonic() - started
    page = response.content.decode()
    assert response.status_code == 200 and "the job queue (redis://127.0.0.1:" in page
    assert "could not be reached" in page and "Nothing was queued" in page
    assert not Run.objects.exists()

    response = researcher_client.post(f"/projects/{project.pk}/sample/", {"model_path": model.path, **SAMPLING},
                                      HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "could not be reached" in response.content.decode()
    assert list(SamplingJob.objects.values_list("pk", flat=True)) == [failed_job.pk]

    kept_uploads = settings.DATA_DIR / "uploads" / "imports"
    kept_before = set(kept_uploads.glob("*"))
    upload = SimpleUploadedFile("prompts.jsonl", b'{"id": "x1", "prompt": "Calculate 1 + 1"}\n')
    response = researcher_client.post(f"/projects/{project.pk}/import/", {"file": upload, "file_format": "auto"},
                                      follow=True)
    assert "Nothing was imported from prompts.jsonl: the job queue" in response.content.decode()
    assert not ImportJob.objects.exists()
    assert set(kept_uploads.glob("*")) == kept_before  # the kept upload went with the row

    print(f"broker down at submit: refused in {launch_s:.1f} s with the reason; 0 rows left queued")


def test_a_resume_while_the_broker_is_down_changes_nothing_and_says_why(
    private_broker, researcher_client, tiny_model_dir, settings, researcher
):
    """A canceled run keeps its status, rows and later checkpoints; a canceled or failed sampling job its status
    and error; the refusal is the broker's reason in words (no Python list), on the page and in the API."""
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    settings.RUNS_DIR = settings.DATA_DIR / "runs-resume-broker-down"
    model = register_tiny_model(tiny_model_dir)
    run = finished_run_with_checkpoints(model, tiny_model_dir, researcher)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELED, error="")
    queued_at = Run.objects.get(pk=run.pk).queued_at
    checkpoints = {model.step: Path(model.path) for model in ModelRef.objects.filter(run=run)}
    project = _project_with_prompts(2, owner=researcher)
    jobs = {status: SamplingJob.objects.create(project=project, model_path=model.path, generation_settings=SAMPLING,
                                               status=status, error="worker lost" if status == "failed" else "")
            for status in (SamplingJob.Status.CANCELED, SamplingJob.Status.FAILED)}
    token = api_token_create(user=researcher, name="resume while down")[1]
    private_broker.stop()

    def run_as_it_was() -> None:
        kept = Run.objects.get(pk=run.pk)
        assert (kept.status, kept.error, kept.queued_at) == (Run.Status.CANCELED, "", queued_at)
        assert sorted(ModelRef.objects.filter(run=run).values_list("step", flat=True)) == [2, 4, 6]
        assert all(directory.is_dir() for directory in checkpoints.values())
        assert MetricRow.objects.filter(run=run).count() == 6

    form = {"checkpoint": str(ModelRef.objects.get(run=run, step=2).pk), "remove_later": "yes"}
    page = researcher_client.post(f"/runs/{run.pk}/resume", form, follow=True).content.decode()
    run_as_it_was()
    said = re.search(r'<ul class="messages"><li class="error">(.*?)</li>', page, re.S)
    assert said and said[1].startswith("the job queue (redis://127.0.0.1:") and "could not be reached" in said[1]
    assert "[" not in said[1] and ".." not in said[1]
    answer = researcher_client.post(f"/api/v1/runs/{run.pk}/resume", {"checkpoint_id": int(form["checkpoint"]),
                                    "remove_later": True}, content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})
    run_as_it_was()
    assert answer.status_code == 503 and "could not be reached" in answer.json()["detail"]
    assert "['" not in answer.json()["detail"]

    for status, job in jobs.items():
        response = researcher_client.post(f"/sampling/{job.pk}/resume/", HTTP_HX_REQUEST="true")
        kept = SamplingJob.objects.get(pk=job.pk)
        assert (kept.status, kept.error) == (status, job.error)
        fragment = response.content.decode()
        assert "could not be reached" in fragment and "Nothing was queued" in fragment and "[&#x27;" not in fragment
    print("broker down at resume: run and sampling jobs left as they were (canceled / failed), reason shown")


def test_a_sampling_job_whose_worker_is_killed_fails_with_the_reason_and_resumes_without_filling_twice(
    celery_worker_factory, tiny_model_dir, settings, researcher, client
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = register_tiny_model(tiny_model_dir)
    prompts = 300
    project = _project_with_prompts(prompts, owner=researcher)
    env = {"PREFLAB_MODEL_ROOTS": str(Path(tiny_model_dir).parent), "OMP_NUM_THREADS": "1"}
    worker = celery_worker_factory(queues=("gpu",), **env)
    job = annotation_services.sampling_job_create(project=project, model_path=model.path, created_by=researcher,
                                                  generation_settings={**SAMPLING, "batch_size": 1})
    wait_for(lambda: SamplingJob.objects.get(pk=job.pk).progress_done >= 5, timeout_s=120,
             what=lambda: f"5 prompts sampled\n{worker.log_tail()}")
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait()
    job.refresh_from_db()
    assert job.status == SamplingJob.Status.RUNNING and job.progress_done < prompts, "it ended before the kill"
    counts = list(project.prompts.values_list("response_count", flat=True))
    assert set(counts) <= {0, 2}  # a prompt is filled whole or not at all
    filled_at_kill = counts.count(2)

    with override_settings(PREFLAB_HEARTBEAT_TIMEOUT_S=3):
        wait_for(lambda: bool(annotation_services.sampling_jobs_fail_stale()), timeout_s=10,
                 what="the stale-heartbeat check")
    job.refresh_from_db()
    assert job.status == SamplingJob.Status.FAILED
    assert "the worker stopped sending heartbeats" in job.error and f"of {prompts} prompts" in job.error
    assert list(project.prompts.values_list("response_count", flat=True)).count(2) == filled_at_kill  # kept

    celery_worker_factory(queues=("gpu",), **env)
    client.force_login(researcher)
    assert client.post(f"/sampling/{job.pk}/resume/").status_code == 302
    wait_for(lambda: not SamplingJob.objects.get(pk=job.pk).is_active, timeout_s=180, what="the resumed job")
    job.refresh_from_db()
    assert job.status == SamplingJob.Status.SUCCEEDED, job.error
    assert set(project.prompts.values_list("response_count", flat=True)) == {2}
    assert Response.objects.filter(prompt__project=project).count() == 2 * prompts  # none sampled twice
    print(f"gpu worker SIGKILLed during sampling: {_outcome(['failed'])} (then resumed: "
          f"{filled_at_kill} prompts kept, {prompts - filled_at_kill} filled on resume, none twice)")


def test_the_reconcile_publishes_again_only_for_queued_jobs_whose_message_is_gone(
    private_broker, tiny_model_dir, settings, researcher
):
    """A job waiting behind a long one keeps its message: it must not get a second one every ten seconds."""
    from webapp.jobs import jobs_reconcile

    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    settings.PREFLAB_REQUEUE_AFTER_S = 1
    model = register_tiny_model(tiny_model_dir)
    run = run_services.run_create(kind="reward_model", config=small_config(model), data_source=ARITHMETIC,
                                  created_by=researcher, name="waiting")
    Run.objects.filter(pk=run.pk).update(queued_at=run.created_at - timedelta(minutes=5))
    assert jobs_reconcile()["requeued_runs"] == []
    assert [row_of_message(task_id) for task_id in broker_message_ids()] == [("run", run.pk)]

    with app.connection_for_write() as connection:
        connection.default_channel.client.flushdb()  # what a restart without persistence does
    assert jobs_reconcile()["requeued_runs"] == [run.pk]
    assert [row_of_message(task_id) for task_id in broker_message_ids()] == [("run", run.pk)]
    assert Run.objects.get(pk=run.pk).queued_at > run.created_at  # its clock starts again


def test_an_import_whose_worker_went_silent_is_failed_with_the_reason_and_its_file_removed(settings, tmp_path):
    project = _project_with_prompts(0)
    kept = tmp_path / "kept.jsonl"
    kept.write_text('{"prompt": "Calculate 1 + 1"}\n')
    silent_since = timezone.now() - timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S + 5)
    job = ImportJob.objects.create(project=project, file_name="kept.jsonl", file_format="jsonl", upload_path=str(kept),
                                   status=ImportJob.Status.RUNNING, stage=ImportJob.Stage.CHECKING,
                                   heartbeat_at=silent_since)
    alive = ImportJob.objects.create(project=project, file_name="alive.jsonl", file_format="jsonl", upload_path="",
                                     status=ImportJob.Status.RUNNING, heartbeat_at=timezone.now())
    assert annotation_services.import_jobs_fail_stale() == [job.pk]
    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED and "the worker stopped sending heartbeats" in job.error
    assert "nothing was imported" in job.error and not kept.exists()
    assert ImportJob.objects.get(pk=alive.pk).status == ImportJob.Status.RUNNING
