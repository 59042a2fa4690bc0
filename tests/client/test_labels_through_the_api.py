"""Thumbs and ratings through the client, as the token's user: the labels are stored as the page stores them
(ResponseLabel rows under the answer's Ranking); a repeat writes nothing; a ranking sent to such a project is a
422 that says to send labels."""

import pytest
from preflab_client import ApiError

from tests.webapp.annotation.factories import make_project
from webapp.annotation import services
from webapp.annotation.models import Project, ResponseLabel

pytestmark = pytest.mark.django_db(transaction=True)


def test_thumbs_and_ratings_through_the_client(preflab, researcher):
    thumbs = make_project(items=1, responses=2, owner=researcher, mode=Project.Mode.THUMBS, texts=[["a", "b"]])
    [item] = preflab.items(thumbs.pk)
    ids = {response["text"]: response["id"] for response in item["responses"]}
    with pytest.raises(ApiError, match="send labels"):
        preflab.submit_ranking(item["id"], [ids["a"], ids["b"]])
    answer = preflab.submit_labels(item["id"], {ids["a"]: 1, ids["b"]: 0}, rationale="b is off")
    assert answer["changed"] is True and answer["tiers"] == []
    assert preflab.submit_labels(item["id"], {ids["a"]: 1, ids["b"]: 0}, rationale="b is off")["changed"] is False
    assert set(ResponseLabel.objects.values_list("response_id", "aspect", "value", "annotator")) == {
        (ids["a"], "", 1.0, researcher.pk), (ids["b"], "", 0.0, researcher.pk)}

    ratings = make_project(items=1, responses=2, owner=researcher, mode=Project.Mode.RATINGS, name="Rated")
    services.project_update(project=ratings, members=[], rating_aspects=[{"name": "honesty"}, {"name": "style"}])
    [item] = preflab.items(ratings.pk)
    a, b = (response["id"] for response in item["responses"])
    answer = preflab.submit_labels(item["id"], {a: {"honesty": 5, "style": 2}, b: {"honesty": 1, "style": 4}})
    assert sorted((label["response"], label["aspect"], label["value"]) for label in answer["labels"]) == sorted(
        [(a, "honesty", 5.0), (a, "style", 2.0), (b, "honesty", 1.0), (b, "style", 4.0)])
    assert ResponseLabel.objects.filter(project=ratings).count() == 4
