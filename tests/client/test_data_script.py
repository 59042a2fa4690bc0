"""A script through the client alone: a project, 1,000 records, responses, rankings (made by the ranking service:
annotating is not part of the API) and the pairs as a datasets.Dataset equal to the page's export."""

import json

import pytest
from django.urls import reverse
from preflab_client import ApiError, Client

from webapp.annotation.models import Project, Prompt, Response
from webapp.annotation.selectors import responses_shown
from webapp.annotation.services import assignment_lease_next, ranking_submit

pytestmark = pytest.mark.django_db(transaction=True)

RANKED = 30


def _records(count: int):
    """A generator, so that the client streams them as NDJSON (a list this long would go as one JSON body too)."""
    for index in range(count):
        yield {"id": f"q{index:04d}", "prompt": f"What is {index} + {index}?", "answer": str(2 * index),
               "metadata": {"index": index}}


def _rank_every_item(project: Project, annotator) -> int:
    ranked = 0
    while (assignment := assignment_lease_next(project=project, annotator=annotator)) is not None:
        shown = sorted(responses_shown(prompt=assignment.prompt, annotator=annotator), key=lambda response: response.pk)
        ranking_submit(assignment_id=assignment.pk, annotator=annotator, tiers=[[response.pk] for response in shown])
        ranked += 1
    return ranked


def test_a_script_imports_reads_and_exports_a_project_through_the_client(preflab, annotator, researcher_client):
    project = preflab.create_project("client script", responses_per_item=3, annotators_per_item=1)
    assert Project.objects.get(pk=project["id"]).name == "client script"
    assert any(item["id"] == project["id"] for item in preflab.projects())
    preflab.add_member(project["id"], annotator.username)
    assert {member["username"] for member in preflab.members(project["id"])} >= {annotator.username}

    assert preflab.import_records(project["id"], _records(1000)) == {"created": 1000, "skipped": 0}
    assert Prompt.objects.filter(project_id=project["id"]).count() == 1000
    # idempotent by external id; a short list goes as one JSON body
    assert preflab.import_records(project["id"], list(_records(3))) == {"created": 0, "skipped": 3}

    prompts = list(preflab.prompts(project["id"]))  # 1,000 prompts over pages
    assert sorted(prompt["external_id"] for prompt in prompts) == [f"q{index:04d}" for index in range(1000)]
    assert len({prompt["id"] for prompt in prompts}) == 1000
    by_external_id = {prompt["external_id"]: prompt for prompt in prompts}
    assert by_external_id["q0007"]["prompt"] == "What is 7 + 7?"
    assert by_external_id["q0007"]["reference"] == "14" and by_external_id["q0007"]["metadata"] == {"index": 7}

    chosen = [by_external_id[f"q{index:04d}"] for index in range(RANKED)]
    for prompt in chosen:
        number = int(prompt["reference"])
        added = preflab.add_responses(prompt["id"], [f"It is {number}.", f"Maybe {number + 1}", "No idea"])
        assert [row["text"] for row in added] == [f"It is {number}.", f"Maybe {number + 1}", "No idea"]
    assert Response.objects.filter(prompt__project_id=project["id"], source="api").count() == 3 * RANKED

    read_back = {prompt["external_id"]: prompt for prompt in preflab.prompts(project["id"])}
    assert [response["text"] for response in read_back["q0003"]["responses"]] == ["It is 6.", "Maybe 7", "No idea"]
    assert read_back["q0999"]["responses"] == []

    assert _rank_every_item(Project.objects.get(pk=project["id"]), annotator) == RANKED
    rankings = list(preflab.rankings(project["id"]))
    assert len(rankings) == RANKED
    assert {ranking["annotator"] for ranking in rankings} == {annotator.username}

    dataset = preflab.export_pairs(project["id"])
    page = researcher_client.get(reverse("annotation:project_export", args=[project["id"], "pairs.jsonl"]))
    assert page.status_code == 200
    page_rows = [json.loads(line) for line in b"".join(page.streaming_content).decode().splitlines()]
    assert len(page_rows) == 3 * RANKED  # three strict tiers: three pairs per ranking
    assert dataset.to_list() == page_rows
    assert dataset[0]["chosen"].startswith("It is ") and dataset[0]["rejected"] in ("Maybe 1", "No idea")


def test_refusals_are_api_errors_with_the_servers_detail(preflab, live_server):
    with pytest.raises(ApiError) as missing:
        preflab.project(999_999)
    assert missing.value.status == 404 and missing.value.detail

    project = preflab.create_project("refusals")
    with pytest.raises(ApiError) as refused:
        preflab.import_records(project["id"], [{"prompt": "fine"}, {"responses": ["no prompt"]}])
    assert refused.value.status == 422
    assert "record 1" in refused.value.detail and "prompt" in refused.value.detail
    assert not Prompt.objects.filter(project_id=project["id"]).exists()  # all or nothing

    with Client(live_server.url, "pfl_" + "x" * 40) as stranger, pytest.raises(ApiError) as unauthorised:
        list(stranger.projects())
    assert unauthorised.value.status == 401
    assert "pfl_" not in repr(stranger) and "x" * 40 not in str(unauthorised.value)


def test_the_client_exports_each_aggregation_of_disputed_pairs(preflab, researcher):
    from tests.webapp.annotation.factories import DISPUTED_PAIR_COUNTS, make_disputed_project

    project = make_disputed_project(owner=researcher)
    for mode, expected in DISPUTED_PAIR_COUNTS.items():
        assert len(list(preflab.pairs(project.pk, aggregation=mode))) == expected, mode
    assert len(preflab.export_pairs(project.pk, aggregation="majority")) == DISPUTED_PAIR_COUNTS["majority"]
    with pytest.raises(ApiError, match="aggregation: String should match pattern"):
        list(preflab.pairs(project.pk, aggregation="most"))


def test_the_client_reads_a_ratings_projects_binarized_pairs(preflab, researcher):
    from tests.webapp.annotation.feedback_fixtures import RATING_PAIRS_WORST, make_ratings_project

    ratings = make_ratings_project(owner=researcher)
    pairs = list(preflab.pairs(ratings.pk, binarization="worst"))
    assert [(row["prompt"], row["chosen"], row["rejected"], row["margin"]) for row in pairs] == RATING_PAIRS_WORST
    with pytest.raises(ApiError, match="binarization"):
        list(preflab.pairs(ratings.pk, binarization="best"))


def test_the_client_reads_a_thumbs_projects_kto_rows(preflab, researcher):
    from tests.webapp.annotation.feedback_fixtures import make_thumbs_project

    thumbs = make_thumbs_project(owner=researcher)
    majority = list(preflab.unpaired(thumbs.pk, aggregation="majority"))
    assert [(row["completion"], row["label"]) for row in majority] == [("a", True), ("b", False), ("c", False)]
    assert len(list(preflab.unpaired(thumbs.pk))) == 6
