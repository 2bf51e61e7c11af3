"""Storage faults for tests: file operations that fail on request (ENOSPC, EIO, ... optionally
after a short, torn write), so storage failures are tested without root, a full disk or a broken
one.

    from strom.testing.storage_faults import file_faults

    with file_faults() as faults:
        faults.fail("write", errno.ENOSPC, path=".log", after=3)
        ...

:class:`FileFaults` is a ``strom.storage.files.FileOps``; :func:`file_faults` routes every storage
file operation through one for the ``with`` block (``strom.storage.files.use_ops``, the storage
layer's seam).
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import threading
from collections.abc import Iterator

from strom.storage import files
from strom.storage.files import FileOps


class FileFault:
    """One rule of :class:`FileFaults` (see :meth:`FileFaults.fail`)."""

    def __init__(self, op: str, err: int, path: str | None, after: int, times: int | None, partial: int | None) -> None:
        self.op, self.errno, self.path = op, err, path
        self.after, self.times, self.partial = after, times, partial
        self.seen = 0
        self.fired = 0

    def matches(self, op: str, path: str) -> bool:
        return op == self.op and (self.path is None or self.path in path)

    def live(self) -> bool:
        return self.times is None or self.fired < self.times


class FileFaults(FileOps):
    """FileOps that fail on request: ``fail("write", errno.ENOSPC, path=".log", after=3)``.

    ``after``: matching calls that still succeed first; ``times``: how many calls then fail
    (None: every one until :meth:`clear`); ``partial`` (write only): the first failing write
    first writes that many bytes and returns the short count, the next write raises, as a
    filling disk does. ``calls`` counts every operation by name.
    """

    def __init__(self) -> None:
        self._rules: list[FileFault] = []
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self._paths: dict[int, str] = {}
        self._torn: dict[int, int] = {}

    def fail(
        self,
        op: str,
        err: int = errno_mod.ENOSPC,
        *,
        path: str | None = None,
        after: int = 0,
        times: int | None = None,
        partial: int | None = None,
    ) -> FileFault:
        rule = FileFault(op, err, path, after, times, partial)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._torn.clear()

    def _check(self, op: str, path: str) -> FileFault | None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            for rule in self._rules:
                if rule.matches(op, path) and rule.live():
                    rule.seen += 1
                    if rule.seen > rule.after:
                        rule.fired += 1
                        return rule
        return None

    @staticmethod
    def _raise(rule: FileFault, path: str):
        raise OSError(rule.errno, os.strerror(rule.errno), path)

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        rule = self._check("open", path)
        if rule is not None:
            self._raise(rule, path)
        fd = os.open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def write(self, fd: int, data, path: str = "") -> int:
        path = path or self._paths.get(fd, "")
        pending = self._torn.pop(fd, None)
        if pending is not None:
            raise OSError(pending, os.strerror(pending), path)
        rule = self._check("write", path)
        if rule is not None:
            if rule.partial is not None and 0 < rule.partial < len(data):
                written = os.write(fd, bytes(data[: rule.partial]))
                self._torn[fd] = rule.errno
                return written
            self._raise(rule, path)
        return os.write(fd, data)

    def fsync(self, fd: int, path: str = "") -> None:
        path = path or self._paths.get(fd, "")
        rule = self._check("fsync", path)
        if rule is not None:
            self._raise(rule, path)
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int, path: str = "") -> None:
        path = path or self._paths.get(fd, "")
        rule = self._check("ftruncate", path)
        if rule is not None:
            self._raise(rule, path)
        os.ftruncate(fd, size)

    def replace(self, src: str, dst: str) -> None:
        rule = self._check("replace", dst)
        if rule is not None:
            self._raise(rule, dst)
        os.replace(src, dst)

    def mkdir(self, path: str) -> None:
        rule = self._check("mkdir", path)
        if rule is not None:
            self._raise(rule, path)
        os.makedirs(path, exist_ok=True)


@contextlib.contextmanager
def file_faults(faults: FileFaults | None = None) -> Iterator[FileFaults]:
    """Every storage file operation through ``faults`` (default: new :class:`FileFaults`) in the block."""
    injector = faults if faults is not None else FileFaults()
    with files.use_ops(injector):
        yield injector
