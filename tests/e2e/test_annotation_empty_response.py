"""An empty or whitespace-only response is marked on its card, not shown as a blank card."""

import pytest

from tests.e2e.annotating import open_annotation
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Response

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_empty_and_whitespace_responses_carry_a_visible_marker(page, live_server, annotator):
    project = make_project(items=1, responses=3, members=[annotator], texts=[["A real answer.", "", "  \n\t "]])
    open_annotation(page, live_server, project)
    texts = dict(Response.objects.values_list("id", "text"))
    for card in page.locator(".response").all():
        text = texts[int(card.get_attribute("data-response-id"))]
        marker = card.locator(".empty-marker")
        if text.strip():
            assert marker.count() == 0
        else:
            assert marker.is_visible() and marker.inner_text() == "empty response"
            assert "left out of the preference pairs" in card.inner_text()
    assert page.locator(".response.empty").count() == 2
    assert page.js_errors == []
