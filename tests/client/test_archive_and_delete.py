"""Archive and delete through the client against the live server: a run, one of its checkpoints and a project;
the rows and the files gone, the bytes freed as measured on the files, and the refusals the server gives."""

from pathlib import Path

import pytest
from django.conf import settings
from preflab_client import ApiError

from tests.webapp.annotation.factories import make_project
from tests.webapp.experiments.test_removal import make_run_with_files
from webapp.annotation.models import Project
from webapp.experiments.models import MetricRow, ModelRef, Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_is_archived_unarchived_and_deleted_through_the_client(preflab, researcher):
    run = make_run_with_files(researcher)
    directory = Path(settings.RUNS_DIR) / str(run.pk)
    assert preflab.run_disk_usage(run.pk) == {"bytes": 7750, "text": "7.8 kB"}

    assert preflab.archive_run(run.pk)["archived_at"] is not None
    assert run.pk not in [item["id"] for item in preflab.runs()]
    assert [item["id"] for item in preflab.runs(archived="only")] == [run.pk]
    assert preflab.archive_run(run.pk, archived=False)["archived_at"] is None
    assert run.pk in [item["id"] for item in preflab.runs()]

    first = ModelRef.objects.get(run=run, step=10)
    assert preflab.delete_checkpoint(run.pk, first.pk) == {"freed_bytes": 3000, "freed": "3.0 kB"}
    assert not Path(first.path).exists() and not ModelRef.objects.filter(pk=first.pk).exists()

    assert preflab.delete_run(run.pk) == {"freed_bytes": 4750, "freed": "4.8 kB"}
    assert not directory.exists()
    assert not Run.objects.filter(pk=run.pk).exists() and not MetricRow.objects.filter(run_id=run.pk).exists()
    with pytest.raises(ApiError) as gone:
        preflab.run(run.pk)
    assert gone.value.status == 404


def test_the_server_s_refusals_come_back_saying_why(preflab, researcher):
    running = make_run_with_files(researcher, status=Run.Status.RUNNING, name="running")
    with pytest.raises(ApiError) as refused:
        preflab.delete_run(running.pk)
    assert refused.value.status == 409 and f"run #{running.pk} is running: cancel it first" in refused.value.detail
    checkpoint = ModelRef.objects.filter(run=running).first()
    with pytest.raises(ApiError) as refused:
        preflab.delete_checkpoint(running.pk, checkpoint.pk)
    assert refused.value.status == 409 and "is running" in refused.value.detail
    assert (Path(settings.RUNS_DIR) / str(running.pk)).is_dir()


def test_a_project_is_archived_and_deleted_through_the_client(preflab, researcher):
    project = make_project(items=2, owner=researcher)
    assert preflab.archive_project(project.pk)["archived_at"] is not None
    assert project.pk not in [item["id"] for item in preflab.projects()]
    assert [item["id"] for item in preflab.projects(archived="only")] == [project.pk]
    assert preflab.archive_project(project.pk, archived=False)["archived_at"] is None
    assert project.pk in [item["id"] for item in preflab.projects()]
    assert preflab.delete_project(project.pk) == {"freed_bytes": 0, "freed": "0 bytes"}
    assert not Project.objects.filter(pk=project.pk).exists()
