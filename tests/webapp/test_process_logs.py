"""`make run`'s terminal shows warnings and errors only; every line goes to the process's log file."""

from webapp.process_logs import LineFilter, record_is_loud, relay


def test_records_are_loud_from_warning_up_and_requests_from_5xx():
    assert record_is_loud("[2026-11-23 20:01:02,345: INFO/MainProcess] Task x received") is False
    assert record_is_loud("[2026-11-23 20:01:02,345: ERROR/MainProcess] Task x raised") is True
    assert record_is_loud("[2026-11-23 20:01:02,345] INFO celery.beat: Scheduler: Sending due task") is False
    assert record_is_loud("[2026-11-23 20:01:02,345] WARNING webapp: disk almost full") is True
    assert record_is_loud('[23/Nov/2026 20:01:02] "GET /runs/rows HTTP/1.1" 200 1234') is False
    assert record_is_loud('[23/Nov/2026 20:01:02] "GET /favicon.ico HTTP/1.1" 404 179') is False
    assert record_is_loud('[23/Nov/2026 20:01:02] "POST /runs/new HTTP/1.1" 500 99') is True
    assert record_is_loud("Traceback (most recent call last):") is None


def test_lines_after_a_loud_record_follow_it_until_the_next_record():
    shown = LineFilter()
    lines = [
        " -------------- default@host v5 (banner)",
        "[2026-11-23 20:01:02,345] INFO celery.beat: tick",
        "[2026-11-23 20:01:03,000] ERROR celery.app.trace: Task failed",
        "Traceback (most recent call last):",
        "ValueError: boom",
        "[2026-11-23 20:01:04,000] INFO celery.beat: tick",
        "after the tick",
    ]
    assert [line for line in lines if shown(line)] == lines[2:5]


def test_relay_writes_every_line_to_the_file_and_echoes_the_loud_ones(tmp_path):
    import io

    stream = io.StringIO("[2026-11-23 20:01:02,345] INFO x: quiet\n[2026-11-23 20:01:02,346] ERROR x: loud\n")
    echoed: list[str] = []
    relay(stream, tmp_path / "web.log", echoed.append).join(timeout=5)
    assert (tmp_path / "web.log").read_text() == stream.getvalue()
    assert echoed == ["[2026-11-23 20:01:02,346] ERROR x: loud"]
