"""The interface each client driver implements, and shared helpers."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from compat_tests.support.workload import Record

CONSUME_TIMEOUT_S = 180.0

Produce = Callable[[str, str, list[Record], str], None]
Consume = Callable[[str, str, Mapping[int, int], float], dict[int, list[Record]]]


@dataclass(frozen=True)
class Driver:
    """A client library under test.

    ``produce(bootstrap, topic, records, codec)`` sends every record to its partition
    and returns once all are acknowledged (raising on any delivery error).
    ``consume(bootstrap, topic, counts, timeout)`` assigns all partitions in ``counts``
    from offset 0 without a consumer group, reads until each partition has its count
    (or ``timeout`` passes) and returns records per partition with offsets filled in.
    ``unavailable()`` says why the client cannot run here (None when it can);
    ``codec_skip(codec)`` says why a codec is not possible with this client.
    ``shape(records, codec)`` maps the workload to what the client can express (kcat
    cannot set per-record headers or timestamps; a None timestamp means "any create
    time taken while producing").
    """

    name: str
    produce: Produce
    consume: Consume
    unavailable: Callable[[], str | None]
    codec_skip: Callable[[str], str | None]
    shape: Callable[[list[Record], str], list[Record]] = lambda records, codec: records


def missing_executable(name: str) -> str | None:
    return None if shutil.which(name) else f"`{name}` is not installed"


def require_all() -> bool:
    """In CI every client must be present: a missing one fails instead of skipping."""
    return os.environ.get("STROM_COMPAT_REQUIRE_ALL", "") not in ("", "0")


def no_codec_skip(codec: str) -> str | None:
    return None
