"""Every main page works under the Content-Security-Policy (settings.CONTENT_SECURITY_POLICY) in real Chromium:
a researcher and an annotator go through them with real data, and the browser reports no violation of the
policy and no console error (a blocked script, style or eval would show as one or the other)."""

from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from tests.e2e.annotating import wait_ranked
from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Project, Ranking
from webapp.experiments import services
from webapp.experiments.models import Run, Sample

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _charted_run(researcher) -> Run:
    run = Run.objects.create(name="charted", kind="grpo", config={"lr": 0.001},
                             data_source={"type": "arithmetic", "level": 1, "size": 8}, created_by=researcher,
                             status=Run.Status.SUCCEEDED, current_step=40, total_steps=40,
                             started_at=timezone.now(), finished_at=timezone.now())
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": float(step), "tokens_seen": step * 10,
         "metrics": {"loss": float("nan") if step == 20 else 1 / step, "reward/mean": step / 40}}
        for step in range(1, 41)])
    Sample.objects.bulk_create([Sample(run=run, step=step, prompt=f"2+{step}=", completion=str(2 + step),
                                       rewards={"correct": 1.0}, advantage=0.5) for step in (10, 20, 40)])
    return run


def test_the_researchers_pages_and_the_admin_work_under_the_policy(watched_page, live_server, researcher,
                                                                   annotator):
    page = watched_page
    researcher.is_staff = researcher.is_superuser = True
    researcher.save()
    project = make_project(items=2, members=[annotator], texts=[
        ["**bold** and `code`\n\n```python\nprint('hi')\n```", "a [link](https://example.org) and a table\n\n| a | b |\n|---|---|\n| 1 | 2 |"],
        ["plain", "> quoted"],
    ], responses=2)
    run, other = _charted_run(researcher), _charted_run(researcher)

    response = page.goto(f"{live_server.url}/accounts/login/")
    assert response.headers["content-security-policy"] == settings.CONTENT_SECURITY_POLICY
    log_in(page, live_server, "rita", "rita-password-1")
    for path in ("/", "/projects/", f"/projects/{project.pk}/", f"/projects/{project.pk}/items/",
                 f"/projects/{project.pk}/items/{project.prompts.first().pk}/", f"/projects/{project.pk}/edit/",
                 "/projects/new/", "/models/", "/accounts/password/"):
        page.goto(f"{live_server.url}{path}")
        assert_no_problem(page)

    page.goto(f"{live_server.url}/system/")
    page.wait_for_selector("dd[hx-get] span")  # the worker status, loaded by htmx
    assert_no_problem(page)

    # the members page's confirmations are asked by app.js now that inline handlers are refused
    page.goto(f"{live_server.url}/accounts/projects/{project.pk}/members/")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click("tr[data-username=abel] button.remove-member")
    assert asked == [f"Remove abel from {project.name}? Their rankings stay."]
    assert list(project.members.all()) == [annotator]  # dismissed: nothing happened
    assert_no_problem(page)

    page.goto(f"{live_server.url}/runs/")
    with page.expect_response(lambda answer: "/runs/rows" in answer.url, timeout=10_000):
        pass  # a poll of the list, swapped in by htmx
    page.fill("input[name=query]", "chart")
    page.wait_for_timeout(600)
    assert_no_problem(page)

    page.goto(f"{live_server.url}/runs/new?kind=grpo&preset=dapo")
    page.click("details:has([name=max_length]) > summary")
    assert page.locator("[name=max_length]").is_visible()
    assert_no_problem(page)

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.points('loss')") == 40
    page.hover(".chart .nsewdrag >> nth=0")  # plotly's hover label and modebar
    # the modebar's camera loads the chart's SVG as a blob: image to draw it (img-src blob:)
    with page.expect_download() as download:
        page.locator(".chart >> nth=0").locator("[data-title='Download plot as a PNG']").click()
    assert Path(download.value.path()).read_bytes().startswith(b"\x89PNG")
    # the samples' step slider sends the step it points at, not its position
    assert page.inner_text("#samples-body strong") == "40"
    with page.expect_response(lambda answer: "/samples" in answer.url) as answer:
        page.locator("#samples-body input[type=range]").fill("0")
    assert "step=10" in answer.value.url
    page.wait_for_selector("#samples-body strong:text-is('10')")
    assert_no_problem(page)

    page.goto(f"{live_server.url}/runs/compare?runs={run.pk}&runs={other.pk}")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.points('loss')") == 80
    assert_no_problem(page)

    for path in ("/admin/", "/admin/auth/user/", f"/admin/auth/user/{annotator.pk}/change/",
                 "/admin/axes/accessattempt/", "/admin/annotation/project/",
                 f"/admin/annotation/project/{project.pk}/change/"):
        page.goto(f"{live_server.url}{path}")
        assert_no_problem(page)


def test_the_annotator_ranks_with_the_keyboard_under_the_policy(watched_page, live_server, annotator):
    """Every key of the annotation page (tests/e2e/test_annotation_keyboard_ranking.py and the keys dialog), each item
    ranked by keyboard alone: a rank, moves, a tie, undo, the word diff, collapse of a long response, the layout, the
    dialogs, submit, back; then a pairwise project by its keys. Markdown with code, a long answer and an aligned
    table in the responses, as real answers have."""
    page = watched_page
    project = make_project(members=[annotator], texts=[
        ["**bold** and `code`\n\n```python\nprint('hi')\n```", "a long answer " * 400,
         "a table\n\n| a | b |\n|:--|--:|\n| 1 | 2 |"],
        ["one two three", "one three four", "> quoted"],
        ["x", "y", "z"],
    ])
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/")
    assert_no_problem(page)
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector(".response:focus")
    page.keyboard.press("Enter")  # refused: nothing ranked yet, the error box shows why
    assert "Rank every response first" in page.inner_text("#item-error")
    for key in ("1", "u", "1", "3", "2", "Shift+ArrowUp", "Shift+ArrowDown", "j", "k", "d", "j", "d", "c", "c",
                "l", "l", "g", "Escape", "?", "Escape", "Enter"):
        page.keyboard.press(key)
    wait_ranked(page, 1)
    page.wait_for_selector(".response:focus")
    for key in ("1", "1", "2", "Enter"):  # a tie
        page.keyboard.press(key)
    wait_ranked(page, 2)
    page.keyboard.press("Backspace")  # back to the ranked item, shown filled in
    page.wait_for_selector(".response:focus")
    page.keyboard.press("Enter")
    wait_ranked(page, 2)
    page.wait_for_selector(".response:focus")
    assert Ranking.objects.filter(annotator=annotator, skipped=False).count() == 2
    assert_no_problem(page)

    pairwise = make_project(name="Pairs", mode=Project.Mode.PAIRWISE, responses=2, members=[annotator])
    page.goto(f"{live_server.url}/annotate/{pairwise.pk}/")
    page.wait_for_selector(".response:focus")
    for done, key in enumerate(("a", "t"), start=1):
        page.wait_for_selector(".response:focus")
        page.keyboard.press(key)
        wait_ranked(page, done)
    assert_no_problem(page)


def test_the_api_docs_and_the_pages_not_visited_above_work_under_the_policy(watched_page, live_server, researcher,
                                                                           annotator):
    """The API's docs page (django-ninja's Swagger UI at /api/v1/docs, with an operation opened: its icons), the
    tokens page, a project's data and rounds fragments."""
    page = watched_page
    project = make_project(items=2, members=[annotator], owner=researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    for path in ("/accounts/tokens/", f"/projects/{project.pk}/data/", f"/projects/{project.pk}/rounds/"):
        page.goto(f"{live_server.url}{path}")
        assert_no_problem(page)

    page.goto(f"{live_server.url}/api/v1/docs")
    page.wait_for_selector(".opblock-summary")  # Swagger UI drew the operations from the schema
    page.locator(".opblock-summary").first.click()
    page.wait_for_selector(".opblock-body")
    page.wait_for_load_state("networkidle")
    assert_no_problem(page)
