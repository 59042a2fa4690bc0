"""A researcher deletes a run from its page in Chromium: the page shows what the run takes on disk, asks again
(a fragment from the server, no script of ours), and after the delete the run list says what was freed; the rows
and the files are gone. One checkpoint is deleted first the same way. No CSP violation on the way."""

from pathlib import Path

import pytest
from django.conf import settings

from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.experiments.test_removal import make_run_with_files
from webapp.experiments.models import MetricRow, ModelRef, Run, Sample

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_run_is_deleted_from_its_page_with_its_files_and_the_list_says_what_it_freed(watched_page, live_server,
                                                                                       researcher):
    page = watched_page
    run = make_run_with_files(researcher, name="to delete")
    directory = Path(settings.RUNS_DIR) / str(run.pk)
    first = ModelRef.objects.get(run=run, step=10)
    log_in(page, live_server, "rita", "rita-password-1")

    page.goto(f"{live_server.url}/runs/")
    assert page.inner_text(f"tr[data-run='{run.pk}'] td.disk") == "7.8 kB"

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_selector("#run-disk")
    assert page.inner_text("#run-disk") == "7.8 kB on disk"

    page.click(f"tr[data-checkpoint='{first.pk}'] .checkpoint-delete")
    page.click(f"tr[data-checkpoint='{first.pk}'] .confirm-checkpoint-delete")
    page.wait_for_selector("#run-freed")
    assert page.inner_text("#run-freed") == "Checkpoint at step 10 deleted: freed 3.0 kB."
    assert not Path(first.path).exists() and not ModelRef.objects.filter(pk=first.pk).exists()
    assert page.inner_text("#run-disk") == "4.8 kB on disk"

    page.click("#run-delete")
    assert "This frees 4.8 kB." in page.inner_text("#run-delete-question")
    page.click("#run-files button:text-is('Keep')")  # asked, then kept: nothing happened
    page.wait_for_selector("#run-delete")
    assert Run.objects.filter(pk=run.pk).exists() and directory.is_dir()

    page.click("#run-delete")
    with page.expect_navigation(url=f"{live_server.url}/runs/"):
        page.click("#run-delete-confirm")
    assert f"Run #{run.pk} to delete deleted: freed 4.8 kB." in page.inner_text("ul.messages")
    assert page.locator(f"tr[data-run='{run.pk}']").count() == 0
    assert not directory.exists()
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not (ModelRef.objects.filter(run_id=run.pk).exists() or MetricRow.objects.filter(run_id=run.pk).exists()
                or Sample.objects.filter(run_id=run.pk).exists())
    assert_no_problem(page)


def test_a_running_run_offers_no_delete_and_an_archived_run_leaves_the_list_until_asked_for(watched_page, live_server,
                                                                                            researcher):
    page = watched_page
    run = make_run_with_files(researcher, status=Run.Status.RUNNING, name="busy")
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_selector("#run-archive")
    assert page.locator("#run-delete").count() == 0
    assert "cancel it first" in page.inner_text("#run-files")
    page.click("#run-archive")
    page.wait_for_selector("#run-archived")
    assert Run.objects.get(pk=run.pk).archived_at is not None

    page.goto(f"{live_server.url}/runs/")
    assert page.locator(f"tr[data-run='{run.pk}']").count() == 0
    page.select_option("form.filters [name=archived]", "only")
    page.wait_for_selector(f"tr[data-run='{run.pk}']")
    assert_no_problem(page)


def test_a_project_is_archived_then_deleted_from_its_page(watched_page, live_server, researcher):
    from tests.webapp.annotation.factories import make_project
    from webapp.annotation.models import Project, Prompt

    page = watched_page
    project = make_project(items=2, owner=researcher, name="Old project")
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click("#project-archive")
    page.wait_for_selector("#project-archived")
    page.goto(f"{live_server.url}/projects/")
    assert page.locator("text=Old project").count() == 0
    page.click("#projects-archived")
    page.click("text=Old project")
    page.click("#project-delete")
    assert "This frees 0 bytes." in page.inner_text("#project-delete-question")
    with page.expect_navigation(url=f"{live_server.url}/projects/"):
        page.click("#project-delete-confirm")
    assert "Project “Old project” deleted: freed 0 bytes." in page.inner_text("ul.messages")
    assert not Project.objects.filter(pk=project.pk).exists() and not Prompt.objects.filter(project_id=project.pk).exists()
    assert_no_problem(page)
