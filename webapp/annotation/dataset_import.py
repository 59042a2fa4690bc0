"""Rows of columnar import files: a Parquet file, or a zipped Hugging Face `datasets` directory (`save_to_disk`).

Both are read a batch of rows at a time (pyarrow), so memory holds one batch, never the file. A null cell is an
absent field (a Parquet file typing a column once, a row without a margin holds null there); an Argilla
question's null column stays, as it tells the file's schema. A zip is unpacked into
a temporary directory that goes when its rows have been read; a member with an unsafe path (absolute, climbing out
with "..", a link) or a zip that would unpack to more than UNZIPPED_MAX_BYTES is refused before anything is unpacked.
The rows then go through the same checks as a JSONL file's (importing.checked_record).
"""

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
            yield number, {key: value for key, value in row.items() if value is not None or "." in key}


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
    with tempfile.TemporaryDirectory(prefix="preflab-import-") as workspace:
        dataset = _loaded_dataset(_unzipped_dataset(stream, Path(workspace)))
        yield from dataset.with_format("arrow").iter(batch_size=BATCH_ROWS)


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


def _loaded_dataset(directory: Path):  # -> datasets.Dataset
    from datasets import Dataset, DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(directory))
    except (FileNotFoundError, ValueError, OSError, KeyError) as error:
        raise ImportFileError(0, "file", f"the datasets directory does not load ({error})") from None
    if isinstance(loaded, DatasetDict):
        splits = list(loaded)
        if "train" in loaded:
            return loaded["train"]
        if len(splits) != 1:
            raise ImportFileError(0, "file", f"the dataset has the splits {', '.join(splits)} and none named train: "
                                             f"zip one split")
        return loaded[splits[0]]
    assert isinstance(loaded, Dataset)
    return loaded
