"""`serve` with DEBUG on serves this machine only: Django's debug pages show settings and code to whoever asks."""

import pytest
from django.core.management import CommandError, call_command

from webapp.management.commands.serve import refuse_debug_pages_off_this_machine


@pytest.mark.parametrize("addrport", ["0.0.0.0:8000", "192.168.1.5:8000", "[::]:8000"])
def test_a_shared_address_with_debug_on_is_refused_before_anything_starts(settings, addrport):
    settings.DEBUG = True
    with pytest.raises(CommandError, match=r"DEBUG is on.*127\.0\.0\.1.*DEBUG=false"):
        call_command("serve", addrport=addrport)


@pytest.mark.parametrize(("addrport", "debug"), [("127.0.0.1:8000", True), ("localhost:8030", True),
                                                  ("[::1]:8000", True), ("8000", True), ("0.0.0.0:8000", False)])
def test_this_machine_with_debug_or_any_address_without_it_is_allowed(addrport, debug):
    refuse_debug_pages_off_this_machine(addrport, debug=debug)


def test_the_summary_says_how_to_stop_serve_when_ctrl_c_is_ignored():
    import os
    import signal

    from webapp.management.commands.serve import how_to_stop

    assert how_to_stop() == "Ctrl-C stops it"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job starts it
    try:
        assert how_to_stop() == f"started with Ctrl-C ignored, as a background job: `kill {os.getpid()}` stops it"
    finally:
        signal.signal(signal.SIGINT, previous)
