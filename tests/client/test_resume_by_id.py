"""Resume by id: `init_run(..., run_id=N)` reattaches to an external run of yours, ended or not; refused, saying
why, for a run Preflab runs itself or another user's."""

import pytest
from preflab_client import ApiError

from tests.client.helpers import stored_metrics
from webapp.accounts.services import user_create
from webapp.experiments import services
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_finished_run_is_reattached_by_id_running_again_its_rows_and_config_kept(preflab):
    with preflab.init_run("resumable", config={"lr": 0.001}) as first:
        for step in range(1, 6):
            first.log({"loss": 1 / step}, step=step)
    assert Run.objects.get(pk=first.id).status == Run.Status.SUCCEEDED

    again = preflab.init_run("ignored", config={"lr": 9}, run_id=first.id)
    assert again.id == first.id and again.name == "resumable"
    assert Run.objects.get(pk=first.id).status == Run.Status.RUNNING
    again.log({"eval/loss": 0.7}, step=5)  # a step it has: merged
    for step in range(6, 11):
        again.log({"loss": 1 / step}, step=step)
    assert again.finish()["status"] == "succeeded"

    run = Run.objects.get(pk=first.id)
    assert run.config == {"lr": 0.001} and run.status == Run.Status.SUCCEEDED
    assert [alert["kind"] for alert in run.alerts] == ["resumed"]
    rows = stored_metrics(first.id)
    assert list(rows) == list(range(1, 11))
    assert rows[5] == {"loss": 0.2, "eval/loss": 0.7}


def test_a_run_not_external_or_not_yours_is_refused_saying_why(preflab, researcher):
    other = user_create(username="omar", role="researcher", password="omar-password-1")[0]
    theirs = services.external_run_create(name="omar's", config={}, created_by=other)
    with pytest.raises(ApiError) as refused:
        preflab.init_run("mine now", run_id=theirs.pk)
    assert refused.value.status == 404, "a run you do not reach is one that does not exist"
    # on a project we both reach: seen, and still not ours to log into
    project = preflab.create_project("shared")
    Run.objects.filter(pk=theirs.pk).update(data_source={"type": "external", "project_id": project["id"]})
    with pytest.raises(ApiError) as refused:
        preflab.init_run("mine now", run_id=theirs.pk)
    assert refused.value.status == 403 and "was logged by omar; only the user who logged" in refused.value.detail

    ours = Run.objects.create(name="ours", kind="sft", config={}, data_source={}, status=Run.Status.SUCCEEDED,
                              created_by=researcher)
    with pytest.raises(ApiError) as refused:
        preflab.init_run("external now", run_id=ours.pk)
    assert refused.value.status == 409 and "only external runs" in refused.value.detail

    with pytest.raises(ApiError) as refused:
        preflab.init_run("nothing", run_id=ours.pk + 1000)
    assert refused.value.status == 404
    assert Run.objects.get(pk=theirs.pk).status == Run.Status.RUNNING
    assert Run.objects.get(pk=ours.pk).status == Run.Status.SUCCEEDED
