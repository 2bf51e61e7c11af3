"""Shared open file descriptors and the zero-copy file region handed to Fetch."""
from __future__ import annotations

import os


class FileHandle:
    """One open file descriptor, shared by reference.

    The descriptor is closed when the last Python reference to the handle goes away (CPython
    reference counting makes that immediate), never explicitly. Segments, index files, flushes
    running on a worker thread and FileRegions in flight each hold a reference, so none of them
    can see the descriptor closed (or its number reused) under them. Deleting a segment unlinks
    its files; on Linux an unlinked file stays readable through descriptors still open.
    """

    __slots__ = ("fd", "path")

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self.fd = os.open(path, flags, 0o644)

    def __del__(self) -> None:
        fd = getattr(self, "fd", -1)
        if fd >= 0:
            self.fd = -1
            os.close(fd)

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def fsync(self) -> None:
        os.fsync(self.fd)


class FileRegion:
    """``size`` bytes of a segment file starting at byte ``position``: what Fetch sends.

    Send it with ``os.sendfile(sock, region.fileno(), region.position, region.size)`` or read it
    with :meth:`read` (TLS, tests). The region holds a reference to the segment's FileHandle, so
    the descriptor stays open and readable while the region lives, even if the segment is rolled,
    closed or deleted meanwhile. Creating one does no I/O and copies nothing. If the log is
    truncated below the region meanwhile, fewer bytes than ``size`` can be read: senders must
    handle a short sendfile/read (the region ends on a batch boundary, so clients ignore a
    partial tail anyway).
    """

    __slots__ = ("_handle", "position", "size")

    def __init__(self, handle: FileHandle, position: int, size: int) -> None:
        self._handle = handle
        self.position = position
        self.size = size

    def fileno(self) -> int:
        return self._handle.fd

    def read(self) -> bytes:
        """The region's bytes via pread (may be short after a concurrent truncation)."""
        if self.size == 0:
            return b""
        chunks = []
        pos, end = self.position, self.position + self.size
        while pos < end:
            chunk = os.pread(self._handle.fd, end - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"FileRegion({self._handle.path!r}, position={self.position}, size={self.size})"
