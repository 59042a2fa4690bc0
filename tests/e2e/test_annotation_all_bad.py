"""All bad is accepted whatever ranks are filled in, and no refusal of the server clears what was entered."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _ranks(page) -> list[str]:
    return page.locator(".rank-input").evaluate_all("inputs => inputs.map(input => input.value)")


@pytest.mark.parametrize("keys", [["1"], ["1", "3", "2"]], ids=["some-ranked", "all-ranked"])
def test_x_then_enter_records_all_bad_whatever_the_ranks(page, live_server, annotator, keys):
    project = make_project(items=2, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    assignment_id = int(page.get_attribute("#item-form", "data-assignment"))
    for key in keys:
        page.keyboard.press(key)
    page.keyboard.press("b")  # B no longer means all bad in ranking mode
    assert not page.is_checked("#all-bad")
    page.keyboard.press("x")
    assert page.is_checked("#all-bad")
    page.keyboard.press("Enter")
    wait_ranked(page, 1)

    ranking = Ranking.objects.get()
    assignment = Assignment.objects.get(pk=assignment_id)
    assert ranking.assignment_id == assignment_id and ranking.all_bad and not ranking.skipped
    assert ranking.tiers == [sorted(assignment.prompt.responses.values_list("id", flat=True))]
    assert not PreferencePair.objects.exists()
    assert assignment.status == Assignment.Status.SUBMITTED
    assert page.js_errors == []


def test_a_refused_submit_keeps_the_ranks_the_box_and_the_rationale_and_can_be_sent_again(
    page, live_server, annotator
):
    (other,) = make_annotators(1)
    project = make_project(items=1, responses=3, members=[annotator, other])
    open_annotation(page, live_server, project)
    page.keyboard.press("1")
    page.keyboard.press("3")
    page.keyboard.press("2")
    entered = _ranks(page)
    page.keyboard.press("r")
    page.keyboard.type("A is the only correct one")
    page.keyboard.press("Escape")
    # the lease runs out and the only place in the overlap goes to someone else: the server refuses
    abel_lease = Assignment.objects.get(annotator=annotator)
    Assignment.objects.filter(pk=abel_lease.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    other_lease = services.assignment_lease_next(project=project, annotator=other)
    assert other_lease.prompt_id == abel_lease.prompt_id

    page.click("#submit-ranking")
    page.wait_for_function("document.getElementById('item-error')?.textContent.includes('lease expired')")
    assert _ranks(page) == entered
    assert page.input_value("textarea[name=rationale]") == "A is the only correct one"
    assert not Ranking.objects.exists()

    # once the place is free again, the same entries are sent with one more Enter
    other_lease.delete()
    page.locator(".response").first.focus()
    page.keyboard.press("Enter")
    wait_ranked(page, 1)
    ranking = Ranking.objects.get()
    assert ranking.annotator == annotator and ranking.rationale == "A is the only correct one"
    assert PreferencePair.objects.filter(ranking=ranking).count() == 3
    assert page.js_errors == []
