"""A checkpoint directory as a tar stream, built as it is sent: each file's header, then its bytes a chunk at a
time, so a checkpoint of gigabytes never sits in memory; its exact length is known before the first byte (the
headers are computed from the file sizes), so the download says its size."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BLOCK = tarfile.BLOCKSIZE
CHUNK = 2**20
END_OF_ARCHIVE = b"\0" * (2 * BLOCK)


@dataclass(frozen=True)
class Member:
    path: Path
    header: bytes
    size: int

    @property
    def padding(self) -> int:
        return -self.size % BLOCK


def archive_members(directory: Path) -> list[Member]:
    """The directory's regular files (links and sockets left out), by their path inside it, in a stable order."""
    members = []
    for path in sorted(directory.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        stat = path.stat()
        info = tarfile.TarInfo(name=path.relative_to(directory).as_posix())
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
        members.append(Member(path=path, header=info.tobuf(format=tarfile.PAX_FORMAT), size=stat.st_size))
    return members


def archive_size(members: list[Member]) -> int:
    return sum(len(member.header) + member.size + member.padding for member in members) + len(END_OF_ARCHIVE)


def archive_chunks(members: list[Member]) -> Iterator[bytes]:
    """The tar's bytes. A file that changed size since `archive_members` read it would make a broken archive: it
    raises instead, ending the download short of its declared length (the client then reports it truncated)."""
    for member in members:
        yield member.header
        sent = 0
        with member.path.open("rb") as handle:
            while sent < member.size and (chunk := handle.read(min(CHUNK, member.size - sent))):
                sent += len(chunk)
                yield chunk
        if sent != member.size:
            raise OSError(f"{member.path} changed while it was sent ({sent} of {member.size} bytes)")
        yield b"\0" * member.padding
    yield END_OF_ARCHIVE
