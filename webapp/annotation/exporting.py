"""Serialising export rows: JSONL and CSV line by line (for streaming), and Hugging Face datasets directories.

Pair rows come in TRL's standard format (text) or its conversational one (prompt = messages, chosen/rejected = one
assistant message each). One file takes one format, as `datasets` types a column once: a project holding any
conversation exports every row conversationally (`conversational_rows`), a text prompt becoming one user turn.
A CSV cell holds text: a conversation's prompt is its JSON messages there, an answer its text.
"""

import csv
import io
import itertools
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "weight", "margin", "ranking_id", "annotator", "chosen_round",
                "rejected_round", "chosen_model", "rejected_model")
# Spreadsheets run a cell that starts with one of these as a formula (CSV injection, OWASP).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def conversational_rows(rows: Iterable[dict]) -> Iterator[dict]:
    """Pair rows all in TRL's conversational format: a text prompt becomes one user turn."""
    for row in rows:
        if isinstance(row["prompt"], str):
            row = {**row, "prompt": [{"role": "user", "content": row["prompt"]}],
                   "chosen": [{"role": "assistant", "content": row["chosen"]}],
                   "rejected": [{"role": "assistant", "content": row["rejected"]}]}
        yield row


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
        writer.writerow([csv_cell(_cell_text(row[column])) for column in columns])
        yield flush()


def _cell_text(value: object) -> object:
    """A CSV cell's text: an answer's content, a conversation's messages as JSON."""
    if not isinstance(value, list):
        return value
    if len(value) == 1 and value[0].get("role") == "assistant":
        return value[0]["content"]
    return json.dumps(value, ensure_ascii=False)


# Rows converted to Arrow at a time when writing a datasets directory: memory stays bounded by a chunk.
DATASET_CHUNK_ROWS = 10_000


def pair_features(*, conversational: bool = False):  # -> datasets.Features, imported lazily (pyarrow is heavy)
    """The pairs' schema, fixed so that it does not depend on the data or on how rows fall into chunks:
    inference would type a column that is empty in every row (no margins, say) as null, not float64.
    Conversational: prompt, chosen and rejected are lists of {role, content}, as TRL's conversational datasets."""
    from datasets import Features, List, Value

    text, number = Value("string"), Value("float64")
    turns = List({"role": text, "content": text})
    dialogue = turns if conversational else text
    return Features({"prompt": dialogue, "chosen": dialogue, "rejected": dialogue, "weight": number,
                     "margin": number, "ranking_id": Value("int64"), "annotator": text,
                     "chosen_round": Value("int64"), "rejected_round": Value("int64"), "chosen_model": text,
                     "rejected_model": text})


def save_dataset(
    rows: Iterable[dict], directory: Path, *, chunk_rows: int = DATASET_CHUNK_ROWS, conversational: bool = False
) -> int:
    """Write pair rows as a datasets directory (load it back with datasets.load_from_disk); returns the row count.

    Each chunk of rows becomes a memory-mapped part on disk, and the parts are joined into the directory at the
    end, so a project of a million pairs needs the memory of one chunk, not of the whole dataset.
    """
    from datasets import Dataset, concatenate_datasets, load_from_disk

    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    parts_root = Path(tempfile.mkdtemp(prefix=".parts-", dir=directory.parent))
    features = pair_features(conversational=conversational)
    try:
        parts, count = [], 0
        for index, chunk in enumerate(_chunks(conversational_rows(rows) if conversational else rows, chunk_rows)):
            part = parts_root / f"part-{index:05d}"
            Dataset.from_list(chunk, features=features).save_to_disk(str(part))
            parts.append(load_from_disk(str(part)))
            count += len(chunk)
        if not count:
            raise ValueError("nothing to export: the project has no preference pairs")
        concatenate_datasets(parts).save_to_disk(str(directory))
    finally:
        shutil.rmtree(parts_root, ignore_errors=True)
    return count


def _chunks(rows: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def dataset_zip(rows: Iterable[dict], *, name: str, conversational: bool = False) -> Path:
    """A zip of a datasets directory named `name`, in a fresh temporary directory the caller removes."""
    workspace = Path(tempfile.mkdtemp(prefix="preflab-export-"))
    save_dataset(rows, workspace / name, conversational=conversational)
    archive = shutil.make_archive(str(workspace / name), "zip", root_dir=workspace, base_dir=name)
    return Path(archive)


# Unpaired (KTO) rows and raw labels (issue 31) -------------------------------------------------------------------

UNPAIRED_COLUMNS = ("prompt", "completion", "label", "annotator", "response_id", "source", "round", "model")


def conversational_unpaired_rows(rows: Iterable[dict]) -> Iterator[dict]:
    """Unpaired rows all in TRL's conversational format: a text prompt becomes one user turn."""
    for row in rows:
        if isinstance(row["prompt"], str):
            row = {**row, "prompt": [{"role": "user", "content": row["prompt"]}],
                   "completion": [{"role": "assistant", "content": row["completion"]}]}
        yield row
