"""The storage layer's file I/O: one injectable operations table, shared descriptors, a bounded
cache of open files, and the zero-copy file region handed to Fetch.

Every open, write, fsync, truncate and rename of log data, indexes, checkpoints and snapshots goes
through ``ops`` (a :class:`FileOps`). Tests replace it (see :func:`use_ops`) with
``strom.testing.storage_faults.FileFaults`` to make a chosen write or fsync fail with ENOSPC, EIO,
... (optionally after a short, torn write), so storage faults are tested without root, a full
disk or a broken one.

Descriptors of segment and index files are not held by the segments: they come from ``cache``
(a :class:`FileCache`), a bounded LRU of open files keyed by path. A file that is used often (an
active segment being appended to) stays open; old segments are opened when read and closed again
when they fall out of the cache, so the broker's descriptor count is bounded by the cache size
plus what is in flight, not by the number of segments (Kafka keeps every segment open).
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

# errnos that mean "no room right now": the partition stays online, the write is answered with
# KAFKA_STORAGE_ERROR and later writes succeed once space (or descriptors) come back.
TRANSIENT_ERRNOS = frozenset(
    {errno_mod.ENOSPC, errno_mod.EDQUOT, errno_mod.EMFILE, errno_mod.ENFILE, errno_mod.ENOMEM, errno_mod.EAGAIN}
)


def errno_name(code: int | None) -> str:
    return errno_mod.errorcode.get(code or 0, str(code))


class FileOps:
    """The real system calls. Methods take the path only so a replacement (tests' file faults) can match it."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: bytes | bytearray | memoryview, path: str = "") -> int:
        return os.write(fd, data)

    def fsync(self, fd: int, path: str = "") -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int, path: str = "") -> None:
        os.ftruncate(fd, size)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)


ops: FileOps = FileOps()


@contextlib.contextmanager
def use_ops(replacement: FileOps) -> Iterator[FileOps]:
    """Route every storage file operation through ``replacement`` inside the block (the seam
    tests use to make writes fail: ``strom.testing.storage_faults``)."""
    global ops
    previous = ops
    ops = replacement
    try:
        yield ops
    finally:
        ops = previous


class FileHandle:
    """One open file descriptor, shared by reference.

    The descriptor is closed when the last Python reference to the handle goes away (CPython
    reference counting makes that immediate), never explicitly. Segments, index files, flushes
    running on a worker thread and FileRegions in flight each hold a reference, so none of them
    can see the descriptor closed (or its number reused) under them. Deleting a segment unlinks
    its files; on Linux an unlinked file stays readable through descriptors still open.
    """

    __slots__ = ("fd", "path", "__weakref__")
    live = 0  # descriptors open through FileHandles now (cached or held by regions in flight)

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self.fd = -1
        self.fd = ops.open(path, flags, 0o644)
        FileHandle.live += 1

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:  # _close bound now: os may be gone at exit
        fd = getattr(self, "fd", -1)
        if fd >= 0:
            self.fd = -1
            type(self).live -= 1
            _close(fd)

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def write_all(self, data: bytes | bytearray | memoryview) -> int:
        """Write every byte of ``data`` (looping over short writes); OSError on failure."""
        written = ops.write(self.fd, data, self.path)
        if written < len(data):
            with memoryview(data) as view:
                while written < len(view):
                    written += ops.write(self.fd, view[written:], self.path)
        return written

    def truncate(self, size: int) -> None:
        ops.ftruncate(self.fd, size, self.path)

    def fsync(self) -> None:
        ops.fsync(self.fd, self.path)


class FileCache:
    """A bounded LRU of open FileHandles keyed by path (thread-safe).

    ``get`` returns the cached handle or opens one, evicting the least recently used beyond
    ``capacity``. An evicted handle's descriptor closes as soon as nobody else holds it (a flush
    or a FileRegion in flight keeps it open until done). ``capacity`` 0 means unbounded.
    ``opened`` and ``evicted`` count what happened (benchmarks and tests read them).
    """

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        self._handles: OrderedDict[str, FileHandle] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0
        self.evicted = 0

    def get(self, path: str, flags: int) -> FileHandle:
        handles = self._handles
        handle = handles.get(path)  # the hot path takes no lock: each dict call is atomic
        if handle is not None:
            try:
                handles.move_to_end(path)
            except KeyError:
                pass  # evicted meanwhile by another thread: this caller still holds it
            return handle
        handle = self._open(path, flags)  # outside the lock: open can block
        evicted = []
        with self._lock:
            current = self._handles.get(path)
            if current is not None:
                self._handles.move_to_end(path)
                return current
            self._handles[path] = handle
            self.opened += 1
            while self.capacity and len(self._handles) > self.capacity:
                evicted.append(self._handles.popitem(last=False)[1])
                self.evicted += 1
        del evicted  # descriptors close here, outside the lock
        return handle

    def open(self, path: str, flags: int) -> FileHandle:
        """Open ``path`` afresh (creating it with O_CREAT) and cache it, replacing any handle
        cached under that name (which may belong to a file since renamed or deleted)."""
        handle = self._open(path, flags)
        evicted = []
        with self._lock:
            old = self._handles.pop(path, None)
            self._handles[path] = handle
            self.opened += 1
            while self.capacity and len(self._handles) > self.capacity:
                evicted.append(self._handles.popitem(last=False)[1])
                self.evicted += 1
        del evicted, old
        return handle

    def _open(self, path: str, flags: int) -> FileHandle:
        """Open a file; out of descriptors (EMFILE/ENFILE), close the older half of the cache
        and try once more before giving up."""
        try:
            return FileHandle(path, flags)
        except OSError as exc:
            if exc.errno not in (errno_mod.EMFILE, errno_mod.ENFILE) or not self._handles:
                raise
        self.shed()
        return FileHandle(path, flags)

    def forget(self, path: str) -> None:
        """Drop the handle of ``path`` (the file was renamed or deleted)."""
        with self._lock:
            handle = self._handles.pop(path, None)
        del handle

    def forget_under(self, prefix: str) -> None:
        """Drop the handles of every file under directory ``prefix`` (its files were replaced
        behind the log's back: a simulated crash restores a broker's directory)."""
        prefix = prefix.rstrip(os.sep) + os.sep
        with self._lock:
            gone = [self._handles.pop(path) for path in list(self._handles) if path.startswith(prefix)]
        del gone

    def resize(self, capacity: int) -> None:
        evicted = []
        with self._lock:
            self.capacity = capacity
            while capacity and len(self._handles) > capacity:
                evicted.append(self._handles.popitem(last=False)[1])
                self.evicted += 1
        del evicted

    def shed(self) -> int:
        """Close the older half of the cached descriptors (the process ran out); returns how many."""
        with self._lock:
            evicted = [self._handles.popitem(last=False)[1] for _ in range((len(self._handles) + 1) // 2)]
            self.evicted += len(evicted)
        count = len(evicted)
        del evicted
        return count

    def __len__(self) -> int:
        return len(self._handles)


DEFAULT_CACHE_SIZE = 1000
cache = FileCache(DEFAULT_CACHE_SIZE)


def under_pressure() -> bool:
    """More descriptors are open than the cache may hold (regions in flight keep evicted ones
    open): senders should copy small regions instead of holding their descriptors."""
    return bool(cache.capacity) and FileHandle.live > cache.capacity


def raise_open_files_limit() -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (soft before, soft now, hard)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return soft, target, hard
        except (ValueError, OSError):
            pass
    return soft, soft, hard


def auto_cache_size(soft_limit: int) -> int:
    """Open files the cache may keep for a soft descriptor limit: half of it (the rest is for
    connections, ZooKeeper, regions in flight), at least 16, at most 10,000."""
    return max(16, min(10_000, soft_limit // 2))


class FileRegion:
    """``size`` bytes of a segment file starting at byte ``position``: what Fetch sends.

    Send it with ``os.sendfile(sock, region.fileno(), region.position, region.size)`` or read it
    with :meth:`read` (TLS, tests). The region holds a reference to the segment's FileHandle, so
    the descriptor stays open and readable while the region lives, even if the segment is rolled,
    closed, deleted or evicted from the file cache meanwhile. Creating one does no I/O and copies
    nothing. If the log is truncated below the region meanwhile, fewer bytes than ``size`` can be
    read: senders must handle a short sendfile/read (the region ends on a batch boundary, so
    clients ignore a partial tail anyway).
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
