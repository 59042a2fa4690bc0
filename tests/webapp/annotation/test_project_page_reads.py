"""The project page reads every item's standing (its label source, whether it waits for adjudication) once, for all
its cards: at tens of thousands of items each reading takes seconds, and a ratings page read it three times."""

import pytest
from django.urls import reverse

from tests.webapp.annotation.factories import make_disputed_project
from tests.webapp.annotation.feedback_fixtures import make_ratings_project, make_thumbs_project
from webapp.annotation import selectors

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("make", [make_ratings_project, make_thumbs_project, make_disputed_project])
def test_the_page_reads_the_items_standings_once_and_its_cards_say_the_same(make, researcher_client, researcher,
                                                                            monkeypatch):
    project = make(owner=researcher)
    expected_data, expected_queue = selectors.project_data(project), len(selectors.adjudication_queue(project))
    reads = []
    standings = selectors.item_standings
    monkeypatch.setattr(selectors, "item_standings", lambda **kwargs: reads.append(kwargs) or standings(**kwargs))

    response = researcher_client.get(reverse("annotation:project_detail", args=[project.pk]))
    assert response.status_code == 200
    assert reads == [{"project_id": project.pk}]
    assert response.context["data"] == expected_data
    assert response.context["adjudication_count"] == expected_queue
