"""The flush that ends a transactional test is tried again once when Postgres ended it as a deadlock's victim."""

import pytest
from django.core.management.base import CommandError

from tests.conftest import tried_again_after_a_deadlock


def _failing(times: int, error: Exception):
    calls = []

    def teardown(case):
        calls.append(case)
        if len(calls) <= times:
            raise error

    return teardown, calls


def _flush_error(cause: str) -> CommandError:
    try:
        try:
            raise RuntimeError(cause)
        except RuntimeError as inner:
            raise CommandError("Database test_preflab_gw0 couldn't be flushed.") from inner
    except CommandError as error:
        return error


def test_a_deadlocked_flush_is_tried_again_once():
    teardown, calls = _failing(1, _flush_error("deadlock detected\nDETAIL: Process 1 waits for AccessExclusiveLock"))
    tried_again_after_a_deadlock(teardown, pause_s=0)("case")
    assert calls == ["case", "case"]


def test_another_failure_or_a_second_deadlock_is_raised():
    teardown, calls = _failing(1, _flush_error("relation does not exist"))
    with pytest.raises(CommandError):
        tried_again_after_a_deadlock(teardown, pause_s=0)("case")
    assert calls == ["case"]
    teardown, calls = _failing(2, _flush_error("deadlock detected"))
    with pytest.raises(CommandError):
        tried_again_after_a_deadlock(teardown, pause_s=0)("case")
    assert len(calls) == 2
