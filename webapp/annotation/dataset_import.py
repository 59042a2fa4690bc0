"""Rows of columnar import files: a Parquet file, or a zipped Hugging Face `datasets` directory (`save_to_disk`).

Both are read a batch of rows at a time (pyarrow; a datasets directory's Arrow files as streams, as its state.json
lists them), so memory holds one batch (at most a Parquet row group), never the file. A null cell is an
absent field (a Parquet file typing a column once, a row without a margin holds null there); an Argilla
question's null column stays, as it tells the file's schema. A zip is unpacked into
a temporary directory that goes when its rows have been read; a member with an unsafe path (absolute, climbing out
with "..", a link) or a zip that would unpack to more than UNZIPPED_MAX_BYTES is refused before anything is unpacked.
The rows then go through the same checks as a JSONL file's (importing.checked_record).
"""

import datetime
import decimal
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from webapp.annotation.importing import ImportFileError

# Rows converted from Arrow to Python at a time.
BATCH_ROWS = 256
# What a zipped datasets directory may unpack to at most (a zip bomb is refused before anything is written).
UNZIPPED_MAX_BYTES = 16 * 2**30
_DATASET_MARKERS = ("state.json", "dataset_dict.json")


def columnar_rows(stream: BinaryIO, *, file_format: str) -> Iterator[tuple[int, dict]]:
    """Each row (numbered from 1) of a Parquet file or a zipped datasets directory, nulls left out."""
    batches = _parquet_batches(stream) if file_format == "parquet" else _dataset_batches(stream)
    number = 0
    for batch in batches:
        for row in batch.to_pylist():
            number += 1
            # an Argilla question's column (`<q>.responses`) is kept when null: its name says what the file is
            yield number, {key: _json_value(number, key, value) for key, value in row.items()
                           if value is not None or "." in key}


def _json_value(row: int, column: str, value: object) -> object:
    """A cell as JSON holds it: dates and times as ISO text, decimals as numbers; binary cells are refused."""
    if isinstance(value, dict):
        return {key: _json_value(row, column, item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_value(row, column, item) for item in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray):
        raise ImportFileError(row, column, "holds binary data (an image, say): only text, numbers and lists of "
                                           "them can be imported", unit="row")
    return value


def _parquet_batches(stream: BinaryIO) -> Iterator:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(stream)
    except (pa.ArrowException, OSError) as error:
        raise ImportFileError(0, "file", f"not readable as a Parquet file ({error})") from None
    try:
        yield from parquet.iter_batches(batch_size=BATCH_ROWS)
    except (pa.ArrowException, OSError) as error:
        raise ImportFileError(0, "file", f"the Parquet file is damaged ({error})") from None


def _dataset_batches(stream: BinaryIO) -> Iterator:
    """The record batches of a zipped datasets directory's Arrow files, read as streams (not memory-mapped, as
    `load_from_disk` would: its pages would count in the worker's memory as they are read)."""
    import pyarrow as pa

    with tempfile.TemporaryDirectory(prefix="preflab-import-") as workspace:
        directory = _dataset_split(_unzipped_dataset(stream, Path(workspace)))
        for name in _data_files(directory):
            try:
                with pa.OSFile(str(directory / name)) as source:
                    for batch in pa.ipc.open_stream(source):
                        for offset in range(0, batch.num_rows, BATCH_ROWS):
                            yield batch.slice(offset, BATCH_ROWS)
            except (pa.ArrowException, OSError) as error:
                raise ImportFileError(0, "file", f"the datasets directory's {name} is not readable ({error})") from None


def _unzipped_dataset(stream: BinaryIO, workspace: Path) -> Path:
    """The datasets directory a zip holds, unpacked under `workspace`."""
    try:
        archive = zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, OSError) as error:
        raise ImportFileError(0, "file", f"not readable as a zip file ({error})") from None
    with archive:
        members = archive.infolist()
        for member in members:
            _refuse_unsafe(member)
        if sum(member.file_size for member in members) > UNZIPPED_MAX_BYTES:
            raise ImportFileError(0, "file", f"the zip would unpack to more than {UNZIPPED_MAX_BYTES // 2**30} GiB")
        found = sorted({PurePosixPath(member.filename).parent for member in members
                        if PurePosixPath(member.filename).name in _DATASET_MARKERS}, key=lambda path: len(path.parts))
        if not found:
            raise ImportFileError(0, "file", "the zip holds no datasets directory (one written by save_to_disk, "
                                             "with its state.json or dataset_dict.json)")
        shallowest = [path for path in found if len(path.parts) == len(found[0].parts)]
        if len(shallowest) > 1:
            raise ImportFileError(0, "file", f"the zip holds several datasets directories "
                                             f"({', '.join(str(path) for path in shallowest)}): zip one")
        try:
            archive.extractall(workspace)
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            raise ImportFileError(0, "file", f"the zip is damaged ({error})") from None
    return workspace / found[0]


def _refuse_unsafe(member: zipfile.ZipInfo) -> None:
    path = PurePosixPath(member.filename.replace("\\", "/"))
    mode = member.external_attr >> 16
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]) or stat.S_ISLNK(mode):
        raise ImportFileError(0, "file", f"the zip holds an unsafe path {member.filename!r} (absolute, climbing out "
                                         f"with '..', or a link): nothing was unpacked")


def _dataset_split(directory: Path) -> Path:
    """A DatasetDict's train split (or its one split); a Dataset's own directory."""
    if not (directory / "dataset_dict.json").is_file():
        return directory
    splits = _json(directory / "dataset_dict.json").get("splits")
    if not isinstance(splits, list) or not all(isinstance(split, str) and _plain_name(split) for split in splits):
        raise ImportFileError(0, "file", "the dataset_dict.json does not list its splits")
    if "train" in splits:
        return directory / "train"
    if len(splits) != 1:
        raise ImportFileError(0, "file", f"the dataset has the splits {', '.join(splits)} and none named train: "
                                         f"zip one split")
    return directory / splits[0]


def _data_files(directory: Path) -> list[str]:
    """The Arrow files state.json lists, in order."""
    state = _json(directory / "state.json")
    files = state.get("_data_files")
    names = [entry.get("filename") for entry in files if isinstance(entry, dict)] if isinstance(files, list) else []
    if not names or not all(isinstance(name, str) and _plain_name(name) and (directory / name).is_file()
                            for name in names):
        raise ImportFileError(0, "file", "the datasets directory's state.json does not name its data files "
                                         "(data-00000-of-00001.arrow, ...) beside it")
    return names


def _plain_name(name: str) -> bool:
    return bool(name) and PurePosixPath(name).name == name and name not in (".", "..")


def _json(path: Path) -> dict:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ImportFileError(0, "file", f"the datasets directory's {path.name} is not readable ({error})") from None
    if not isinstance(value, dict):
        raise ImportFileError(0, "file", f"the datasets directory's {path.name} is not a JSON object")
    return value
