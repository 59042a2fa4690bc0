"""Data-migration tests: move the test database to a migration, and back to the latest after the test, so that
the tests after them (transactional ones share the database) find every table."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(targets: list[tuple[str, str]]) -> Apps:
    """The models as they were at `targets`, after migrating the database there."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    """Every app at its latest migration: what the current models (webapp.*.models) read and write."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def latest_migrations_after() -> Iterator[None]:
    yield
    migrate_to_latest()
