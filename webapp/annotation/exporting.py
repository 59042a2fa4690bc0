"""Serialising export rows: JSONL and CSV line by line (for streaming), Parquet files and Hugging Face datasets
directories (each with a dataset card and the project's guidelines), a chunk of rows at a time.

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
                "rejected_round", "chosen_model", "rejected_model", "label_source")
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
                     "rejected_model": text, "label_source": text})


def save_dataset(
    rows: Iterable[dict], directory: Path, *, chunk_rows: int = DATASET_CHUNK_ROWS, conversational: bool = False,
    features=None,
) -> int:
    """Write pair rows as a datasets directory (load it back with datasets.load_from_disk); returns the row count.

    Each chunk of rows becomes a memory-mapped part on disk, and the parts are joined into the directory at the
    end, so a project of a million pairs needs the memory of one chunk, not of the whole dataset.
    """
    from datasets import Dataset, concatenate_datasets, load_from_disk

    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    parts_root = Path(tempfile.mkdtemp(prefix=".parts-", dir=directory.parent))
    if features is None:
        features = pair_features(conversational=conversational)
        rows = conversational_rows(rows) if conversational else rows
    try:
        parts, count = [], 0
        for index, chunk in enumerate(_chunks(rows, chunk_rows)):
            part = parts_root / f"part-{index:05d}"
            # a row's keys are the schema's: one it lacks is null, one the schema lacks is left out
            Dataset.from_list([{name: row.get(name) for name in features} for row in chunk],
                              features=features).save_to_disk(str(part))
            parts.append(load_from_disk(str(part)))
            count += len(chunk)
        if not count:
            raise ValueError(f"nothing to export: the project has no {_noun(features)}")
        concatenate_datasets(parts).save_to_disk(str(directory))
    finally:
        shutil.rmtree(parts_root, ignore_errors=True)
    return count


def _chunks(rows: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def dataset_zip(
    rows: Iterable[dict], *, name: str, conversational: bool = False, features=None, card: "DatasetCard | None" = None
) -> Path:
    """A zip of a datasets directory named `name` (with its card, README.md, and the guidelines, when `card` is
    given), in a fresh temporary directory the caller removes."""
    workspace = Path(tempfile.mkdtemp(prefix="preflab-export-"))
    try:
        if features is None:
            features = pair_features(conversational=conversational)
            rows = conversational_rows(rows) if conversational else rows
        count = save_dataset(rows, workspace / name, features=features)
        if card is not None:
            card.write(workspace / name, rows=count, features=features)
        archive = shutil.make_archive(str(workspace / name), "zip", root_dir=workspace, base_dir=name)
    except BaseException:
        shutil.rmtree(workspace, ignore_errors=True)
        raise
    return Path(archive)


# Unpaired (KTO) rows and raw labels (issue 31) -------------------------------------------------------------------

UNPAIRED_COLUMNS = ("prompt", "completion", "label", "annotator", "response_id", "source", "round", "model",
                    "label_source")


def conversational_unpaired_rows(rows: Iterable[dict]) -> Iterator[dict]:
    """Unpaired rows all in TRL's conversational format: a text prompt becomes one user turn."""
    for row in rows:
        if isinstance(row["prompt"], str):
            row = {**row, "prompt": [{"role": "user", "content": row["prompt"]}],
                   "completion": [{"role": "assistant", "content": row["completion"]}]}
        yield row


# Parquet, unpaired rows, dataset cards ---------------------------------------------------------------------------

GUIDELINES_FILE = "GUIDELINES.md"


def _noun(features) -> str:
    return "unpaired rows" if "label" in features and "completion" in features else "preference pairs"


# the types of the columns unpaired rows may carry besides prompt, completion and label; any other is inferred
_UNPAIRED_COLUMN_TYPES = {"annotator": "string", "aspect": "string", "value": "float64", "weight": "float64",
                          "margin": "float64", "ranking_id": "int64", "response_id": "int64", "prompt_id": "string",
                          "round": "int64", "model": "string", "source": "string",
                          "label_source": "string"}


def unpaired_features(columns: Iterable[str] = ("prompt", "completion", "label"), *, conversational: bool = False,
                      sample: Iterable[dict] = ()):
    """TRL's unpaired schema (prompt, completion: text or messages; label: bool) and the other `columns`' types:
    known ones fixed, others from the first value `sample` holds (string when none; a nested one is left out)."""
    from datasets import Features, List, Value

    text = Value("string")
    dialogue = List({"role": text, "content": text}) if conversational else text
    sample = list(sample)
    types = {}
    for column in columns:
        if column in ("prompt", "completion"):
            types[column] = dialogue
        elif column == "label":
            types[column] = Value("bool")
        elif dtype := _UNPAIRED_COLUMN_TYPES.get(column) or _inferred_type(column, sample):
            types[column] = Value(dtype)
    return Features(types)


def _inferred_type(column: str, sample: list[dict]) -> str | None:
    """A scalar column's type from its first value (string when it has none); None for a nested one, left out."""
    value = next((row[column] for row in sample if row.get(column) is not None), None)
    for kind, name in ((bool, "bool"), (int, "int64"), (float, "float64"), (str, "string")):
        if isinstance(value, kind):
            return name
    return "string" if value is None else None


def unpaired_rows_features(rows: Iterable[dict], *, conversational: bool, chunk_rows: int = DATASET_CHUNK_ROWS):
    """(rows, features) for an unpaired export: the schema read from the first chunk, the rows unchanged (the chunk
    put back in front). `conversational`: the rows are all conversational (selectors.unpaired_export_rows)."""
    iterator = iter(rows)
    first = list(itertools.islice(iterator, chunk_rows))
    columns = list(dict.fromkeys(["prompt", "completion", "label", *(key for row in first for key in row)]))
    features = unpaired_features(columns, conversational=conversational, sample=first)
    return itertools.chain(first, iterator), features


def write_parquet(rows: Iterable[dict], path: Path, *, features, chunk_rows: int = DATASET_CHUNK_ROWS) -> int:
    """Rows as one Parquet file typed by `features` (its schema carries them: `datasets` loads them back as
    written), a row group per chunk, so memory holds one chunk; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = features.arrow_schema
    count = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        for chunk in _chunks(rows, chunk_rows):
            writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
            count += len(chunk)
    if not count:
        Path(path).unlink(missing_ok=True)
        raise ValueError(f"nothing to export: the project has no {_noun(features)}")
    return count


def parquet_file(rows: Iterable[dict], *, name: str, features) -> Path:
    """A Parquet file `name` in a fresh temporary directory the caller removes."""
    workspace = Path(tempfile.mkdtemp(prefix="preflab-export-"))
    try:
        write_parquet(rows, workspace / name, features=features)
    except BaseException:
        shutil.rmtree(workspace, ignore_errors=True)
        raise
    return workspace / name


class DatasetCard:
    """A datasets directory's card (README.md: YAML metadata, then what the rows are and how they were made) and the
    project's guidelines beside it (GUIDELINES.md)."""

    def __init__(self, *, project: str, mode: str, kind: str, made: str, guidelines: str,
                 options: dict | None = None) -> None:
        self.project, self.mode, self.kind, self.made = project, mode, kind, made
        self.guidelines, self.options = guidelines, options or {}

    def text(self, *, rows: int, features) -> str:
        import yaml

        columns = [{"name": name, "dtype": _dtype(feature)} for name, feature in features.items()]
        metadata = {
            "pretty_name": f"{self.project} ({self.kind})",
            "tags": ["preflab", "rlhf", self.kind],
            "dataset_info": {"features": columns, "splits": [{"name": "train", "num_examples": rows}]},
            "preflab": {"project": self.project, "mode": self.mode, "kind": self.kind, "rows": rows,
                        **self.options},
        }
        table = "\n".join(f"| `{column['name']}` | {column['dtype']} |" for column in columns)
        guidelines = self.guidelines.strip() or "_The project has no guidelines._"
        return (f"---\n{yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)}---\n\n"
                f"# {self.project}: {self.kind}\n\n"
                f"Exported by Preflab from the annotation project «{self.project}» (mode: {self.mode}), "
                f"{rows} rows. Load it with `datasets.load_from_disk`.\n\n"
                f"## How the rows were made\n\n{self.made}\n\n"
                f"## Columns\n\n| column | type |\n|---|---|\n{table}\n\n"
                f"## Guidelines\n\nWhat the annotators were told ({GUIDELINES_FILE}):\n\n{guidelines}\n")

    def write(self, directory: Path, *, rows: int, features) -> None:
        (directory / "README.md").write_text(self.text(rows=rows, features=features), encoding="utf-8")
        (directory / GUIDELINES_FILE).write_text(self.guidelines, encoding="utf-8")


def _dtype(feature) -> str:
    dtype = getattr(feature, "dtype", None)
    if isinstance(dtype, str) and dtype != "list":
        return dtype
    return "messages (list of {role, content})"
