"""Turning OSErrors from a log dir into KafkaStorageError, and logging them once per burst.

Every storage failure is logged with the log dir, the partition (or file) and the errno, and
what an operator can do about it. A full disk makes every produce fail the same way: the first
failure of a kind (log dir, errno, operation) is logged as a warning, repeats within
``BURST_SECONDS`` are counted and summarised when the burst ends, so the log stays readable.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import threading
import time

from strom.storage.errors import KafkaStorageError
from strom.storage.files import TRANSIENT_ERRNOS, errno_name

log = logging.getLogger("strom.storage")

BURST_SECONDS = 30.0

_ADVICE = {
    errno_mod.ENOSPC: "the disk is full: free space or grow the volume; writes resume by themselves",
    errno_mod.EDQUOT: "the disk quota is exhausted: raise it or free space; writes resume by themselves",
    errno_mod.EMFILE: "too many open files: raise the limit (ulimit -n, LimitNOFILE) or lower log.open.files.max",
    errno_mod.ENFILE: "the system's open-file table is full: raise fs.file-max or close other programs",
    errno_mod.EIO: "the disk reports I/O errors: check its health (dmesg); the log dir is taken offline",
    errno_mod.EROFS: "the file system is read-only (remounted after errors?): the log dir is taken offline",
    errno_mod.ENOENT: "a file or the log dir was removed under the broker: the log dir is taken offline",
}


def is_transient(code: int | None) -> bool:
    return code in TRANSIENT_ERRNOS


_BurstKey = tuple[str | None, int | None, str]  # (log dir, errno, operation)


class _Bursts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[_BurstKey, list[float]] = {}  # key -> [first_time, last_time, suppressed]

    def report(self, key: _BurstKey, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[1] < BURST_SECONDS:
                entry[1] = now
                entry[2] += 1
                log.debug("%s", message)
                return
            suppressed = entry[2] if entry is not None else 0
            self._seen[key] = [now, now, 0]
        if suppressed:
            log.warning("%s (%d more like it in the previous burst)", message, suppressed)
        else:
            log.warning("%s", message)


_bursts = _Bursts()


def storage_error(exc: OSError, op: str, where: str, log_dir: str | None = None) -> KafkaStorageError:
    """A KafkaStorageError for ``exc`` raised while doing ``op`` on ``where`` (a partition or a
    file), logged once per burst with the dir, the errno and what to do."""
    code = exc.errno
    name = errno_name(code)
    transient = is_transient(code)
    advice = "check the disk and the broker's permissions on the log dir"
    if code is not None:
        advice = _ADVICE.get(code, advice)
    message = (
        f"{op} {where} failed with {name} ({exc.strerror or exc})"
        f"{f' in log dir {log_dir}' if log_dir else ''}: {advice}"
    )
    _bursts.report((log_dir, code, op), message)
    return KafkaStorageError(message, code, getattr(exc, "filename", None), transient)
