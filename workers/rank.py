"""A run's training process, `python -m workers.rank RUN_ID`: what torchrun starts on each rank of a run on many
processes, and what the gpu worker starts alone, as rank 0 of one, for a run on one process (workers.training.
run_in_child), so that the worker can end a training that does not answer a cancel (workers.supervision).

The gpu worker claimed the run (queued -> running) and started this process (or torchrun); each rank builds the
run's config and data from the database and calls the kind's train function, which joins the process group itself
(trainer.modeling.distributed.setup; nothing to join on one process). Rank 0 reports through a `DatabaseSink` (the trainer's
RankSink forwards only its reports and gives every rank its should_stop); the other ranks report into a `NullSink`.

Rank 0 records the run's outcome: finished, canceled, or failed with its own error. A rank's exception is
re-raised so that torchrun stops the others and `record` writes it to the rank's error file, which the worker
reads when the run is still running after torchrun exits (another rank failed, or was killed).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

PR_SET_PDEATHSIG = 1
# Beside the error file torchrun gives each rank (…/attempt_0/<local_rank>/error.json), so the worker finds
# every rank's pid after the run, whatever happened to torchrun.
PID_FILE_NAME = "pid"


def die_with_parent() -> None:
    """Be killed when torchrun dies (torchrun is killed when the worker dies): torchrun starts each rank in a
    session of its own, so nothing else would stop a rank whose launcher vanished."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)


def write_pid_file() -> None:
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        Path(error_file).with_name(PID_FILE_NAME).write_text(str(os.getpid()))


@record
def main() -> None:
    die_with_parent()
    write_pid_file()
    run_id = int(sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    from trainer.modeling.distributed import launched_rank

    django.setup()
    train_rank(run_id=run_id, rank=launched_rank())


def train_rank(*, run_id: int, rank: int) -> None:
    from trainer.modeling import distributed
    from trainer.modeling.distributed import launched_world_size
    from trainer.sink import NullSink
    from webapp.experiments import services
    from webapp.experiments.models import Run
    from workers.torchrun import is_peer_loss
    from workers.training import DatabaseSink, run_fail_with, run_train

    run = Run.objects.get(pk=run_id)
    if run.status != Run.Status.RUNNING:
        raise RuntimeError(f"run {run_id} is {run.status}, not running: a run's processes are started by its worker")
    if rank != 0:
        run_train(run, NullSink())
        distributed.teardown()
        return
    sink = DatabaseSink(run_id)
    try:
        result = run_train(run, sink)
    except Exception as error:
        sink.close()
        # on many processes, "connection closed by peer" only says that another rank died: the worker names that
        # rank and its error
        if launched_world_size() == 1 or not is_peer_loss(error):
            run_fail_with(run_id, error)
        raise
    sink.close()
    distributed.teardown()
    services.run_finish(run_id=run_id, stopped=result.stopped)


if __name__ == "__main__":
    main()
