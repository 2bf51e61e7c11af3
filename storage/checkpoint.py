"""Kafka's small text checkpoint files, written crash-safely.

Layout (UTF-8 text, one item per line)::

    0                      <- format version
    N                      <- number of entries
    <entry 1>              <- N lines, fields separated by one space
    ...

``OffsetCheckpointFile`` entries are ``topic partition offset`` (recovery-point-offset-checkpoint,
log-start-offset-checkpoint, replication-offset-checkpoint); ``LeaderEpochCheckpointFile`` entries
are ``epoch start_offset`` (leader-epoch-checkpoint).

Crash safety: a write goes to ``<name>.tmp``, is fsynced, renamed over the file, and the directory
is fsynced. A crash leaves either the old or the new file; a leftover ``.tmp`` is never read and is
overwritten by the next write. A file that does not parse raises CorruptLog.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from strom.storage import files
from strom.storage.errors import CorruptLog
from strom.storage.files import FileHandle

T = TypeVar("T")
VERSION = 0


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or unlink inside it survives a crash."""
    fd = files.ops.open(str(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        files.ops.fsync(fd, str(path))
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` via temp file + fsync + rename + directory fsync.

    On any failure (a full disk, an I/O error) the temp file is removed, ``path`` keeps its last
    good content and OSError is raised: nothing is ever half-replaced.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        handle = FileHandle(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            handle.write_all(data)
            handle.fsync()
        finally:
            del handle
        files.ops.replace(str(tmp), str(path))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


class CheckpointFile(Generic[T]):
    """A versioned list of entries; ``format_entry``/``parse_entry`` convert one line."""

    def __init__(
        self, path: Path, format_entry: Callable[[T], str], parse_entry: Callable[[list[str]], T], fields: int
    ) -> None:
        self.path = Path(path)
        self._format = format_entry
        self._parse = parse_entry
        self._fields = fields

    def write(self, entries: Iterable[T]) -> None:
        lines = [self._format(e) for e in entries]
        text = f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
        atomic_write(self.path, text.encode())

    def read(self) -> list[T]:
        """Entries in file order; [] if the file does not exist."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except UnicodeDecodeError as exc:
            raise CorruptLog(f"{self.path}: not text: {exc}") from None
        lines = text.splitlines()
        try:
            version, count = int(lines[0]), int(lines[1])
        except (IndexError, ValueError):
            raise CorruptLog(f"{self.path}: malformed version/count lines") from None
        if version != VERSION:
            raise CorruptLog(f"{self.path}: unsupported checkpoint version {version}")
        body = lines[2:]
        if len(body) != count:
            raise CorruptLog(f"{self.path}: expected {count} entries, found {len(body)}")
        return [self._parse_line(line) for line in body]

    def _parse_line(self, line: str) -> T:
        parts = line.split(" ")
        if len(parts) != self._fields:
            raise CorruptLog(f"{self.path}: malformed line {line!r}")
        try:
            return self._parse(parts)
        except ValueError:
            raise CorruptLog(f"{self.path}: malformed line {line!r}") from None


def _parse_offset_entry(parts: list[str]) -> tuple[tuple[str, int], int]:
    topic, partition, offset = parts
    return (topic, int(partition)), int(offset)


class OffsetCheckpointFile:
    """``topic partition offset`` lines, read into ``{(topic, partition): offset}``."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[tuple[str, int], int]] = CheckpointFile(
            path, lambda e: f"{e[0][0]} {e[0][1]} {e[1]}", _parse_offset_entry, 3
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        return dict(self._file.read())


class LeaderEpochCheckpointFile:
    """``epoch start_offset`` lines, read into a list of (epoch, start_offset)."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[int, int]] = CheckpointFile(
            path, lambda e: f"{e[0]} {e[1]}", lambda p: (int(p[0]), int(p[1])), 2
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        self._file.write(entries)

    def read(self) -> list[tuple[int, int]]:
        return self._file.read()
