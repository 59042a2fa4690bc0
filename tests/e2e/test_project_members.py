"""A researcher creates an annotator on the members page; the annotator logs in with exactly the one-time
password the page showed, ranks an item (the Ranking row is checked), then changes that password."""

import pytest
from django.contrib.auth.models import User

from tests.e2e.annotating import wait_ranked
from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_project
from tests.webapp.passwords import authenticates_as
from webapp.accounts.roles import is_annotator
from webapp.annotation.models import Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_researcher_creates_an_annotator_who_logs_in_and_ranks(page, live_server, researcher):
    project = make_project(name="Helpfulness", items=1, responses=2, owner=researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click("text=Members")
    page.fill("input[name=username]", "nora")
    page.click("text=Create annotator")
    password = page.inner_text("#one-time-password").strip()
    assert page.inner_text("#one-time-username") == "nora" and len(password) == 19

    nora = User.objects.get(username="nora")
    assert is_annotator(nora) and list(project.members.all()) == [nora]
    assert password not in nora.password  # only the hash is stored
    page.goto(f"{live_server.url}/accounts/projects/{project.pk}/members/")  # shown once: not on the page again
    assert "nora" in page.inner_text("#members") and password not in page.content()

    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click(".whoami button[type=submit]")  # Log out
    page.wait_for_url(f"{live_server.url}/accounts/login/**")
    log_in(page, live_server, "nora", password)
    page.click("text=Annotate")
    page.click("text=Start ranking")
    page.wait_for_selector(".rank-input")
    ids = page.locator(".response").evaluate_all("cards => cards.map(card => Number(card.dataset.responseId))")
    page.locator(".rank-input").nth(0).fill("2")
    page.locator(".rank-input").nth(1).fill("1")
    page.click("#submit-ranking")
    wait_ranked(page, 1)
    ranking = Ranking.objects.get(annotator=nora)
    assert ranking.tiers == [[ids[1]], [ids[0]]] and not ranking.skipped and not ranking.all_bad
    assert ranking.prompt.project_id == project.pk

    page.click("#password-change-link")
    page.fill("input[name=old_password]", password)
    page.fill("input[name=new_password1]", "nora-chose-this-one-7")
    page.fill("input[name=new_password2]", "nora-chose-this-one-7")
    page.click("#password-change-form button[type=submit]")
    page.wait_for_selector("text=Password changed")
    assert authenticates_as("nora", "nora-chose-this-one-7") == nora
    assert authenticates_as("nora", password) is None
    assert page.js_errors == []
