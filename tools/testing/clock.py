"""A trio clock that a paused broker stops, so that a pause freezes the broker as SIGSTOP would.

The broker's timers all run on trio's clock: group session and rebalance expiry
(``trio.current_time()``), the flush, checkpoint, retention and cleaner intervals, offset expiry,
transaction timeouts, idle connections (``trio.sleep`` / deadlines). While the clock is paused
its time stands still, so none of them fires and no session expires; on ``resume()`` it goes on
from where it stood (every timer keeps the time it had left, where a SIGCONT'd process would see
the whole pause at once). Wall-clock ages (a segment's or a committed offset's timestamp) are
not trio's time: a retention run after the pause sees them as they are, as after a SIGCONT.

A pause longer than ``max_pause_s`` of real time ends by itself: the clock then jumps to real
time, as if it had never stopped, so every wait stays bounded.

The clock is only read and paused on its trio thread (the control operations run there).
"""

from __future__ import annotations

import time

import trio

MAX_PAUSE_S = 600.0  # the longest a pause holds requests and time (strom.testing.faults)


class PausableClock(trio.abc.Clock):
    def __init__(self, max_pause_s: float = MAX_PAUSE_S) -> None:
        self.max_pause_s = max_pause_s
        self._offset = time.perf_counter()  # trio time: seconds since the clock was made, less pauses
        self._paused_at: float | None = None

    def start_clock(self) -> None:
        pass

    def _expire(self, now: float) -> None:
        if self._paused_at is not None and now - self._paused_at >= self.max_pause_s:
            self._paused_at = None  # over the bound: time runs again as if it had never stopped

    def current_time(self) -> float:
        now = time.perf_counter()
        self._expire(now)
        if self._paused_at is not None:
            return self._paused_at - self._offset
        return now - self._offset

    def deadline_to_sleep_time(self, deadline: float) -> float:
        now = time.perf_counter()
        self._expire(now)
        if self._paused_at is not None:  # nothing falls due before the pause ends by itself
            frozen = self._paused_at - self._offset
            return 0.0 if deadline <= frozen else self._paused_at + self.max_pause_s - now
        return deadline - (now - self._offset)

    @property
    def paused(self) -> bool:
        self._expire(time.perf_counter())
        return self._paused_at is not None

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.perf_counter()

    def resume(self) -> None:
        if self._paused_at is not None:
            now = time.perf_counter()
            self._offset += now - self._paused_at
            self._paused_at = None
