"""The client reads a project's suggestion sources measured against the annotators from the live server: the
figures worked by hand in tests/webapp/annotation/test_suggestion_agreement.py."""

import pytest

from tests.webapp.annotation.test_suggestion_agreement import JUDGE, RM, make_measured_project

# slow: the API test (tests/webapp/api/test_suggestion_agreement_api.py) checks the same figures; this adds the
# client's thin method over a live server (27 s)
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_client_reads_each_sources_agreement_with_the_annotators(preflab, researcher):
    project = make_measured_project(owner=researcher)
    body = preflab.suggestion_agreement(project.pk)
    sources = {source["agent"]: source for source in body["sources"]}
    assert set(sources) == {RM, JUDGE} and body["rounds"] == []
    rm = sources[RM]["agreement"]
    assert (rm["agreed"], rm["pairs"], rm["tied"], rm["left_out"]) == (11, 14, 2, 1)
    assert rm["kendall_tau"] == pytest.approx(0.7299660, abs=1e-6)
    assert sources[JUDGE]["position_bias"] == 1.0
