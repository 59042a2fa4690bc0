"""Peak memory of the web process and of the import job against the size of an uploaded import file.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_upload_memory.py

For each size: a fresh gunicorn (one sync worker, as docker-compose.yml runs it) on a throw-away database (created
and dropped here) and a throw-away data directory; the file (JSONL rows of 8 KiB: a prompt and two responses) is
generated as it is sent, never held by the bench; then the import job runs in a fresh process of its own, as a
worker would run it. Peaks are VmHWM (the process's peak resident memory), next to the same process's memory
before it worked (the web process after answering /healthz, the job's after Django's set-up).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup()

from bench_annotation_queue import temporary_database  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from tests.webapp.upload_server import (  # noqa: E402
    jsonl_body,
    peak_rss_mb,
    post_file,
    session_cookie_for,
    start_web_server,
)

MiB = 2**20
ROW_BYTES = 8192
JOB = """
import resource, sys, time
import django
django.setup()
from workers.importing import import_job_execute
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started = time.monotonic()
import_job_execute(job_id=int(sys.argv[1]))
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.monotonic() - started)
"""


def database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def measure(size: int, data_dir: Path, researcher) -> dict:
    from webapp.annotation import services
    from webapp.annotation.models import ImportJob

    env = {**os.environ, "DATABASE_URL": database_url(), "PREFLAB_DATA_DIR": str(data_dir), "DEBUG": "false",
           "SECRET_KEY": settings.SECRET_KEY, "ALLOWED_HOSTS": "127.0.0.1",
           "CELERY_BROKER_URL": "filesystem://", "CELERY_RESULT_BACKEND": ""}
    project = services.project_create(name=f"bench {size}", responses_per_item=2)
    server = start_web_server("gunicorn", env, data_dir / f"gunicorn-{size}.log")
    try:
        web_before = peak_rss_mb(server.request_pid)
        answer = post_file(server.port, f"/projects/{project.pk}/import/", fields={"file_format": "auto"},
                           file_field="file", file_name="bench.jsonl", file_size=size,
                           file_chunks=jsonl_body(size, row_size=ROW_BYTES),
                           session_cookie=session_cookie_for(researcher))
        web_peak = peak_rss_mb(server.request_pid)
    finally:
        server.stop()
    if answer.status != 302:
        raise SystemExit(f"upload of {size} bytes: {answer.status} {answer.body[:300]}\n{server.log_tail()}")
    job = ImportJob.objects.get(project=project)
    done = subprocess.run([sys.executable, "-c", JOB, str(job.pk)], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, check=True)
    job_before, job_peak, job_seconds = (float(value) for value in done.stdout.split()[-3:])
    job.refresh_from_db()
    if job.status != "succeeded":
        raise SystemExit(f"import job of {size} bytes: {job.status} {job.error}")
    return {"size": size, "rows": job.created_count, "upload_s": answer.seconds, "web_before": web_before,
            "web_peak": web_peak, "job_s": job_seconds, "job_before": job_before, "job_peak": job_peak,
            "removed": not Path(job.upload_path).exists()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[10, 100, 500, 1024])
    args = parser.parse_args()
    from webapp.accounts.services import user_create

    data_dir = Path(tempfile.mkdtemp(prefix="preflab-bench-upload-"))
    try:
        with temporary_database():
            researcher, _ = user_create(username="bench-researcher", role="researcher", password="bench-password-1")
            rows = []
            for size_mib in args.sizes_mib:
                started = time.monotonic()
                rows.append(measure(size_mib * MiB, data_dir, researcher))
                print(f"  {size_mib} MiB measured in {time.monotonic() - started:.0f} s", file=sys.stderr)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print("| file | rows | upload (s) | web process: before → peak (MiB) | import job (s) | "
          "job process: before → peak (MiB) | upload removed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['size'] // MiB} MiB | {row['rows']:,} | {row['upload_s']:.1f} | "
              f"{row['web_before']:.0f} → {row['web_peak']:.0f} | {row['job_s']:.1f} | "
              f"{row['job_before']:.0f} → {row['job_peak']:.0f} | {'yes' if row['removed'] else 'no'} |")


if __name__ == "__main__":
    main()
