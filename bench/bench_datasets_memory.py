"""Peak memory of reading (an import's check pass) and writing (an export) Parquet files and zipped datasets
directories, against their row count: it should not grow with the file.

    .venv/bin/python bench/bench_datasets_memory.py [--rows 20000 200000]

Each measure runs in a fresh process (VmHWM, its peak resident memory, next to its memory before the work): rows
of 2 KiB (a prompt, a chosen and a rejected answer) generated as they are written, never held by the bench.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _rows(count: int):
    for index in range(count):
        yield {"prompt": f"question {index} " + "x" * 700, "chosen": f"good {index} " + "y" * 600,
               "rejected": f"bad {index} " + "z" * 600, "weight": 1.0, "margin": 1.0, "ranking_id": None,
               "annotator": None, "chosen_round": None, "rejected_round": None, "chosen_model": "",
               "rejected_model": ""}


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _measure(action: str, rows: int, path: str) -> None:
    """Run in a child process: one action, then print 'before peak'."""
    sys.path.insert(0, str(REPO_ROOT))
    import datasets  # noqa: F401  (loaded before the baseline: its import is not the work)
    import pyarrow.parquet  # noqa: F401

    from webapp.annotation import exporting
    from webapp.annotation.importing import iter_import

    before = _rss_mb()
    if action == "write-parquet":
        exporting.write_parquet(_rows(rows), Path(path), features=exporting.pair_features())
    elif action == "write-zip":
        archive = exporting.dataset_zip(_rows(rows), name="pairs")
        os.replace(archive, path)
    else:
        with open(path, "rb") as stream:
            count = sum(1 for _ in iter_import(stream, file_format=action.removeprefix("read-")))
        assert count == rows, count
    print(f"{before:.0f} {_peak_mb():.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--child", nargs=3)
    options = parser.parse_args()
    if options.child:
        action, rows, path = options.child
        _measure(action, int(rows), path)
        return
    print("| rows | file | write: before → peak MiB | read (check pass): before → peak MiB |")
    print("|---:|---|---|---|")
    with tempfile.TemporaryDirectory() as workspace:
        for rows in options.rows:
            for kind, suffix in (("parquet", "parquet"), ("zip", "zip")):
                path = str(Path(workspace) / f"pairs-{rows}.{suffix}")
                measures = []
                for action in (f"write-{kind}", "read-parquet" if kind == "parquet" else "read-dataset"):
                    result = subprocess.run([sys.executable, __file__, "--child", action, str(rows), path],
                                            capture_output=True, text=True, check=True, cwd=REPO_ROOT)
                    measures.append(result.stdout.split())
                size = Path(path).stat().st_size / 2**20
                (wb, wp), (rb, rp) = measures
                print(f"| {rows:,} | {kind}, {size:.0f} MiB | {wb} → {wp} | {rb} → {rp} |")


if __name__ == "__main__":
    main()
