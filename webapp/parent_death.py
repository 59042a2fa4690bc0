"""A child process that dies with its parent, on Linux (prctl PR_SET_PDEATHSIG): the processes `serve` starts, and
the celery beat a worker started with -B embeds. Without it a SIGKILLed parent leaves its child running under
PID 1: an orphan beat went on scheduling the reconcile beside the restarted worker's own beat."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
# Resolved at import, before any fork: a child between fork and exec (serve's preexec_fn) only calls it.
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform == "linux" else None


def die_with_parent(*, parent_pid: int | None = None, signum: int = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when the thread that forked it ends, even by SIGKILL.
    `parent_pid`: that parent, if known; a parent already gone (between the fork and this call) ends this process
    at once. Nothing happens off Linux."""
    if _PRCTL is None:
        return
    _PRCTL(PR_SET_PDEATHSIG, signum)
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
