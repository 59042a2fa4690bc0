"""The run list's tag filter on both kinds of database: Postgres answers JSON containment, SQLite (the embedded
default of `make run`) has none, and the filter must give the same runs there."""

import pytest
from django.db import connection

from webapp.experiments import selectors
from webapp.experiments.services import external_run_create

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("containment", [True, False], ids=["postgres-containment", "sqlite-fallback"])
def test_runs_are_filtered_by_one_of_their_tags(researcher, monkeypatch, containment):
    monkeypatch.setattr(connection.features, "supports_json_field_contains", containment)
    tagged = external_run_create(name="a", config={}, created_by=researcher, tags=["baseline", "best"])
    other = external_run_create(name="b", config={}, created_by=researcher, tags=["baselines"], group="g")
    untagged = external_run_create(name="c", config={}, created_by=researcher, group="g")

    assert list(selectors.runs_list(user=researcher, tag="baseline")) == [tagged]
    assert list(selectors.runs_list(user=researcher, tag="best")) == [tagged]
    assert list(selectors.runs_list(user=researcher, tag="nobody")) == []
    assert list(selectors.runs_list(user=researcher, tag="baselines", group="g")) == [other]
    assert list(selectors.runs_list(user=researcher)) == [untagged, other, tagged]
