"""The simulation's trio clock: trio's ``MockClock`` in autojump mode, without the per-call costs
a simulation does not need.

With ``rate=0`` a ``MockClock`` never moves by itself, yet ``current_time()`` reads the real clock
(and multiplies by the zero rate) on every call, and every autojump asks the run loop for its
full statistics (tasks, run queue, the I/O backend's registrations) only to read the next
deadline. A simulated run calls both tens of thousands of times per seed. :func:`sim_mock_clock`
gives a ``MockClock`` (trio's own class: the run loop autojumps only a ``MockClock``) whose two
methods answer the same values from its virtual time and read the next deadline directly. Where
trio's internals are not as expected it is a plain ``MockClock``.
"""

from __future__ import annotations

import math
from typing import Any

import trio.testing

try:  # trio's run loop, for the next deadline (trio >= 0.22 keeps it in GLOBAL_RUN_CONTEXT.runner)
    from trio._core._run import GLOBAL_RUN_CONTEXT as _RUN_CONTEXT
except ImportError:  # pragma: no cover - another trio layout: MockClock's own code is used
    _RUN_CONTEXT = None


def sim_mock_clock() -> trio.testing.MockClock:
    """``MockClock(autojump_threshold=0)`` (rate 0: time moves only by jumps), answering from its
    virtual time: what ``MockClock`` computes as ``virtual_base + 0 * (real - real_base)``."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    state: Any = clock
    if _RUN_CONTEXT is None or not isinstance(getattr(state, "_virtual_base", None), float) or clock.rate != 0.0:
        return clock

    def current_time() -> float:
        if state._rate != 0.0:  # someone set a rate: MockClock's own arithmetic
            return trio.testing.MockClock.current_time(clock)
        base: float = state._virtual_base
        return base

    def autojump() -> None:
        runner: Any = getattr(_RUN_CONTEXT, "runner", None)
        deadlines = getattr(runner, "deadlines", None)
        if deadlines is None:
            trio.testing.MockClock._autojump(clock)  # type: ignore[attr-defined]
            return
        jump = deadlines.next_deadline() - current_time()  # what current_statistics() reports
        if 0 < jump < math.inf:
            clock.jump(jump)

    state.current_time = current_time
    state._autojump = autojump
    return clock
