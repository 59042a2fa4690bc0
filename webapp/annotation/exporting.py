"""Serialising export rows: JSONL and CSV line by line (for streaming), and Hugging Face datasets directories."""

import csv
import io
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "weight", "margin", "ranking_id", "annotator")
# Spreadsheets run a cell that starts with one of these as a formula (CSV injection, OWASP).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def jsonl_lines(rows: Iterable[dict]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def csv_cell(value: object) -> object:
    """A cell made inert for spreadsheets: text starting with = + - @ (or tab, CR) gets a leading quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def csv_lines(rows: Iterable[dict], columns: tuple[str, ...] = PAIR_COLUMNS) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    writer.writerow(columns)
    yield flush()
    for row in rows:
        writer.writerow([csv_cell(row[column]) for column in columns])
        yield flush()


def save_dataset(rows: Iterable[dict], directory: Path) -> int:
    """Write rows as a datasets directory (load it back with datasets.load_from_disk); returns the row count."""
    from datasets import Dataset  # pyarrow is heavy: loaded only when a dataset is written

    materialised = list(rows)
    if not materialised:
        raise ValueError("nothing to export: the project has no preference pairs")
    Dataset.from_list(materialised).save_to_disk(str(directory))
    return len(materialised)


def dataset_zip(rows: Iterable[dict], *, name: str) -> Path:
    """A zip of a datasets directory named `name`, in a fresh temporary directory the caller removes."""
    workspace = Path(tempfile.mkdtemp(prefix="preflab-export-"))
    save_dataset(rows, workspace / name)
    archive = shutil.make_archive(str(workspace / name), "zip", root_dir=workspace, base_dir=name)
    return Path(archive)
