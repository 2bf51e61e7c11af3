"""The broker's and the storage layer's clock: wall-clock milliseconds (record and segment
timestamps, retention ages) and monotonic seconds (replica lag, fetch-session ages).

Everything below the server reads time through :data:`clock`. Production uses
:class:`SystemClock` (``time.time_ns``, ``time.monotonic``); the deterministic simulation
(``strom.sim``) installs one derived from trio's MockClock with :func:`use_clock`, so a simulated
second is a second to the replica manager, the log and the coordinators alike.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


clock: Clock = SystemClock()


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return clock.wall_ms()


def monotonic() -> float:
    """Seconds from an arbitrary start, never going back."""
    return clock.monotonic()


@contextlib.contextmanager
def use_clock(replacement: Clock) -> Iterator[Clock]:
    """Read every broker and storage clock from ``replacement`` inside the block."""
    global clock
    previous = clock
    clock = replacement
    try:
        yield replacement
    finally:
        clock = previous
