"""The test broker from async code, asyncio or trio alike:

    async with strom.testing.abroker(num_partitions=3) as b:
        producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
        rule = b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER")
        ...
        await rule.wait(1)
        await b.wait_for_group("g", members=2)

The broker runs on its own thread and trio loop, as with ``strom.testing.broker``; what blocks
(start, stop, every wait) runs on a worker thread of the caller's event loop, so the loop keeps
serving the test's clients meanwhile. Quick calls (adding a fault rule, creating a topic) are
plain methods; waits are coroutines.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

from .control import Rule
from .embedded import StromBroker

T = TypeVar("T")


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a worker thread of the running event loop (asyncio or trio)."""
    import sniffio

    call = partial(fn, *args, **kwargs)
    if sniffio.current_async_library() == "trio":
        import trio

        return await trio.to_thread.run_sync(call, abandon_on_cancel=True)
    import asyncio

    return await asyncio.to_thread(call)


class AsyncRule(Rule):
    """A fault rule whose ``wait`` is a coroutine."""

    async def wait(self, hits: int = 1, timeout: float = 10.0) -> AsyncRule:  # type: ignore[override]  # noqa: ASYNC109
        await run_blocking(Rule.wait, self, hits, timeout)
        return self


class AsyncFaults:
    """``StromBroker.faults`` with rules whose waits are awaited."""

    def __init__(self, broker: StromBroker) -> None:
        self._faults = broker.faults

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._faults, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            out = found(*args, **kwargs)
            if isinstance(out, Rule):
                return AsyncRule(out._call, out)
            if isinstance(out, list):
                return [AsyncRule(r._call, r) if isinstance(r, Rule) else r for r in out]
            return out

        return call


class AsyncBroker:
    """A :class:`StromBroker` for async tests: the same attributes, waits as coroutines."""

    def __init__(self, broker: StromBroker) -> None:
        self.broker = broker
        self.faults = AsyncFaults(broker)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.broker, name)

    async def start(self) -> AsyncBroker:
        await run_blocking(self.broker.start)
        return self

    async def stop(self) -> None:
        await run_blocking(self.broker.stop)

    async def restart(self) -> AsyncBroker:
        await run_blocking(self.broker.restart)
        return self

    async def close(self) -> None:
        await run_blocking(self.broker.close)

    async def wait_for_group(
        self,
        group_id: str,
        state: str | None = "Stable",
        members: int | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        return await run_blocking(self.broker.wait_for_group, group_id, state, members, timeout)

    async def wait_for_lag(
        self,
        group_id: str,
        topic: str | None = None,
        lag: int = 0,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        return await run_blocking(self.broker.wait_for_lag, group_id, topic, lag, timeout)

    async def wait_for_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        timeout: float = 10.0,  # noqa: ASYNC109
        kind: str = "high_watermark",
    ) -> dict[str, Any]:
        return await run_blocking(self.broker.wait_for_offset, topic, partition, offset, timeout, kind)

    async def wait_for_connections(self, count: int, at_least: bool = True, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        return await run_blocking(self.broker.wait_for_connections, count, at_least, timeout)

    async def reset(self) -> dict[str, Any]:
        return await run_blocking(self.broker.reset)


@asynccontextmanager
async def abroker(configs: Mapping[str, Any] | None = None, **kwargs: Any) -> AsyncIterator[AsyncBroker]:
    """A started broker for the ``async with`` block, closed afterwards (also on error); the same
    arguments as :func:`strom.testing.broker`."""
    broker = AsyncBroker(StromBroker(configs, **kwargs))
    try:
        await broker.start()
        yield broker
    finally:
        await broker.close()
