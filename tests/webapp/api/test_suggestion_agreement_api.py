"""The API's suggestion agreement: per suggestion source, the figures the project page shows (worked by hand in
tests/webapp/annotation/test_suggestion_agreement.py), over the project and per round."""

import pytest

from tests.webapp.annotation.test_suggestion_agreement import (
    JUDGE,
    RM,
    make_measured_project,
    make_two_measured_rounds,
)

pytestmark = pytest.mark.django_db


def test_the_api_returns_the_same_figures(api, researcher):
    project = make_measured_project(owner=researcher)
    response = api.get(f"/projects/{project.pk}/suggestions/agreement")
    assert response.status_code == 200
    body = response.json()
    sources = {source["agent"]: source for source in body["sources"]}
    assert sources[RM]["agreement"] == {
        "items": 3, "answers": 5, "left_out": 1, "pairs": 14, "agreed": 11, "tied": 2,
        "accuracy": pytest.approx(11 / 14), "low": pytest.approx(0.524108, abs=1e-6),
        "high": pytest.approx(0.924286, abs=1e-6), "kendall_tau": pytest.approx(0.7299660, abs=1e-6),
        "tau_answers": 5}
    assert (sources[RM]["position_bias"], sources[RM]["judge_comparisons"]) == (None, None)
    assert (sources[JUDGE]["position_bias"], sources[JUDGE]["judge_comparisons"]) == (1.0, 6)
    assert sources[JUDGE]["agreement"]["accuracy"] == 0 and sources[JUDGE]["agreement"]["kendall_tau"] is None
    assert body["rounds"] == []  # imported prompts belong to no round
    assert api.get("/projects/999999/suggestions/agreement").status_code == 404


def test_the_api_measures_each_round_on_its_own_items(api, researcher):
    project = make_two_measured_rounds(researcher)
    body = api.get(f"/projects/{project.pk}/suggestions/agreement").json()
    assert [(entry["round"], [(source["agent"], source["agreement"]["agreed"], source["agreement"]["pairs"],
                               source["agreement"]["tied"]) for source in entry["sources"]])
            for entry in body["rounds"]] == [(1, [(RM, 0, 2, 0)]), (2, [(RM, 3, 4, 1)])]
    assert [(source["agreement"]["agreed"], source["agreement"]["pairs"]) for source in body["sources"]] == [(3, 6)]
