"""Rankings through the client, as the token's user: the ranking then appears in the project's pairs export
exactly as the same ranking made through the page's services does; a repeat writes nothing, a change replaces
it; a wrong response or item is a clear 4xx; an annotator's token may rank on their projects."""

import pytest
from preflab_client import ApiError, Client

from tests.webapp.annotation.factories import make_project
from webapp.accounts.services import api_token_create
from webapp.annotation import services
from webapp.annotation.models import PreferencePair, Ranking

pytestmark = pytest.mark.django_db(transaction=True)


def ranked_in_the_browser(project, annotator, tiers_by_text: list[list[str]]) -> Ranking:
    """What the annotation page's submit does: lease the next item, submit its tiers."""
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    ids = {response.text: response.pk for response in lease.prompt.responses.all()}
    return services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                   tiers=[sorted(ids[text] for text in tier) for tier in tiers_by_text],
                                   rationale="b is right")


def without_who(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if key not in ("ranking_id", "annotator")} for row in rows]


def test_a_ranking_through_the_client_exports_as_the_browsers(preflab, researcher, annotator):
    project = make_project(items=1, responses=3, overlap=2, owner=researcher, members=[annotator],
                           texts=[["a", "b", "c"]])
    browser = ranked_in_the_browser(project, annotator, [["b"], ["a", "c"]])

    [item] = preflab.items(project.pk)
    assert item["answer"] is None and {response["text"] for response in item["responses"]} == {"a", "b", "c"}
    ids = {response["text"]: response["id"] for response in item["responses"]}
    submitted = preflab.submit_ranking(item["id"], [ids["b"], [ids["c"], ids["a"]]], rationale="b is right")
    assert submitted["changed"] is True and submitted["tiers"] == browser.tiers

    through_api = list(preflab.pairs(project.pk, aggregation=f"annotator:{researcher.username}"))
    in_browser = list(preflab.pairs(project.pk, aggregation=f"annotator:{annotator.username}"))
    assert len(through_api) == 2 and without_who(through_api) == without_who(in_browser)
    assert next(preflab.items(project.pk))["answer"]["tiers"] == browser.tiers
    rankings = {row["annotator"]: row for row in preflab.rankings(project.pk)}
    assert rankings[researcher.username]["rationale"] == rankings[annotator.username]["rationale"] == "b is right"

    # the same answer again writes nothing
    before = list(Ranking.objects.filter(annotator=researcher).values())
    pairs_before = list(PreferencePair.objects.order_by("id").values_list("id", flat=True))
    again = preflab.submit_ranking(item["id"], [ids["b"], [ids["a"], ids["c"]]], rationale="b is right")
    assert again["changed"] is False and again["id"] == submitted["id"]
    assert list(Ranking.objects.filter(annotator=researcher).values()) == before
    assert list(PreferencePair.objects.order_by("id").values_list("id", flat=True)) == pairs_before

    # a changed answer replaces it, as the page's Back then submit do
    changed = preflab.submit_ranking(item["id"], [ids["c"], ids["b"], ids["a"]])
    assert changed["changed"] is True and changed["id"] == submitted["id"] and changed["rationale"] == ""
    rows = list(preflab.pairs(project.pk, aggregation=f"annotator:{researcher.username}"))
    assert {(row["chosen"], row["rejected"]) for row in rows} == {("c", "b"), ("c", "a"), ("b", "a")}
    assert Ranking.objects.filter(annotator=researcher).count() == 1
    project.prompts.get().refresh_from_db()
    assert project.prompts.get().ranking_count == 2


def test_wrong_responses_and_items_are_clear_4xx_and_write_nothing(preflab, researcher):
    project = make_project(items=1, responses=3, owner=researcher, texts=[["a", "b", "c"]])
    other = make_project(items=1, responses=2, name="not mine")
    [item] = preflab.items(project.pk)
    a, b, c = sorted(response["id"] for response in item["responses"])

    def refusal(item_id, ranking) -> ApiError:
        with pytest.raises(ApiError) as refused:
            preflab.submit_ranking(item_id, ranking)
        return refused.value

    error = refusal(item["id"], [a, b, 999_999])
    assert error.status == 422 and error.detail.startswith(f"ranking: 999999 is not a response of item {item['id']}")
    error = refusal(item["id"], [a, b])
    assert error.status == 422 and f"{c} is missing" in error.detail
    error = refusal(item["id"], [a, [b, a], c])
    assert error.status == 422 and error.detail == f"ranking: {a} appears twice"
    error = refusal(item["id"], [a, "b", c])
    assert error.status == 422 and "ranking" in error.detail
    for item_id in (999_999, other.prompts.get().pk):
        error = refusal(item_id, [a, b, c])
        assert error.status == 404 and error.detail == f"there is no item {item_id}"
    assert not Ranking.objects.exists()

    # the refusals left nothing behind that stops the right ranking
    preflab.submit_ranking(item["id"], [a, b, c])
    assert project.prompts.get().ranking_count == 1


def test_an_annotators_token_ranks_on_their_project(live_server, researcher, annotator):
    project = make_project(items=2, responses=2, owner=researcher, members=[annotator])
    _, raw = api_token_create(user=annotator, name="labelling tool")
    with Client(live_server.url, raw) as client:
        items = list(client.items(project.pk))
        assert len(items) == 2
        for item in items:
            client.submit_ranking(item["id"], [response["id"] for response in item["responses"]], all_bad=True)
        assert all(item["answer"]["all_bad"] for item in client.items(project.pk))
        with pytest.raises(ApiError) as refused:
            client.projects().__next__()
        assert refused.value.status == 403
    assert Ranking.objects.filter(annotator=annotator, all_bad=True).count() == 2
    assert not PreferencePair.objects.exists()
