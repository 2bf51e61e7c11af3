"""The in-memory ZooKeeper against ZooKeeper itself, through the broker's ZooKeeper port.

A differential test: one script of znode operations by two sessions runs on a real ZooKeeper
(kazoo) and on ``strom.testing.memzk``; the results, the errors and the watch events each session
saw must be the same. Then what only the in-memory one can do fast and deterministically: session
expiry on trio's MockClock, cut-off sessions, held operations.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from strom.broker.zk.session import (
    CheckOp,
    CreateOp,
    DeleteOp,
    KazooSession,
    SessionState,
    SetDataOp,
    ZkSession,
)
from strom.testing.memzk import MemoryZooKeeper
from strom.testing.zookeeper import ZooKeeperServer, zookeeper_fixture

zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)
_chroots = itertools.count()
WAIT_S = 10


def stat_view(stat: Any, owners: dict[int, str]) -> tuple:
    """The parts of a stat both servers must agree on (zxids and times differ by history)."""
    return (
        "stat",
        stat.version,
        stat.cversion,
        owners.get(stat.ephemeralOwner, stat.ephemeralOwner),
        stat.dataLength,
        stat.numChildren,
    )


async def script(a: ZkSession, b: ZkSession, note: Callable[[str, object], None]) -> None:
    """The operation sequence: ``note(step, outcome)`` records each result or error."""
    owners = {0: "-", a.session_id: "a", b.session_id: "b"}

    def view(value: object) -> object:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bytes):
            return (value[0], stat_view(value[1], owners))
        if hasattr(value, "cversion"):
            return stat_view(value, owners)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return sorted(value)  # ZooKeeper lists children in no particular order
        if isinstance(value, list):
            return [view(v) for v in value]
        if isinstance(value, Exception):
            return type(value).__name__
        return value

    async def step(name: str, op: Awaitable[object]) -> object:
        try:
            result = await op
        except Exception as exc:
            note(name, type(exc).__name__)
            return exc
        note(name, view(result))
        return result

    def watcher(who: str, kind: str) -> Callable[[Any], None]:
        def on_event(event: Any) -> None:
            note(f"event {who} {kind}", (event.type, event.path))

        return on_event

    a_data, a_children, b_data = watcher("a", "data"), watcher("a", "children"), watcher("b", "data")
    await step("create /app", a.create("/app", b"v0"))
    await step("create /app again", b.create("/app", b"x"))
    await step("create under missing parent", a.create("/nope/x", b""))
    await step("create with makepath", a.create("/deep/er/node", b"d", makepath=True))
    await step("get missing", a.get("/missing"))
    await step("exists missing, watched", b.exists("/later", b_data))
    await step("children of /app, watched", a.get_children("/app", a_children))
    await step("get /app, watched twice", a.get("/app", a_data))
    await step("exists /app, same watcher", a.exists("/app", a_data))
    await step("set /app at a wrong version", b.set("/app", b"v1", 3))
    await step("set /app", b.set("/app", b"v1", 0))
    await step("set /app unconditionally", b.set("/app", b"v2"))
    await step("a reads /app", a.get("/app"))
    await step("create /later", a.create("/later", b"now"))
    await step("ephemeral of b", b.create("/app/eph", b"e", ephemeral=True))
    await step("child of an ephemeral", a.create("/app/eph/child", b""))
    await step("sequential 1", a.create("/app/seq-", b"1", sequence=True))
    await step("sequential 2", b.create("/app/seq-", b"2", sequence=True))
    await step("children of /app", a.get_children("/app"))
    await step("delete a non-empty znode", a.delete("/app"))
    await step("delete at a wrong version", a.delete("/later", 7))
    await step(
        "multi that fails in the middle",
        a.multi([CreateOp("/m1", b"1"), CheckOp("/app", 0), CreateOp("/m2", b"2")]),
    )
    await step("the failed multi changed nothing", a.exists("/m1"))
    await step(
        "multi that succeeds",
        a.multi(
            [
                CheckOp("/app", 2),
                CreateOp("/m1", b"1"),
                SetDataOp("/later", b"again", 0),
                DeleteOp("/deep/er/node"),
                CreateOp("/m1/s-", b"", sequence=True),
            ]
        ),
    )
    await step("children watch of b on /app", b.get_children("/app", b_data))
    await step("data watch of a on /later", a.get("/later", a_data))
    await step("delete /later", b.delete("/later", 1))
    await step("b closes", b.close())
    await step("/app/eph went with b", a.exists("/app/eph"))
    await step("children of /app after b", a.get_children("/app"))


async def run_script(a: ZkSession, b: ZkSession, events_wanted: int | None = None) -> list[tuple[str, object]]:
    """The script's notes; the events of each session are collected apart from the results,
    since a real ZooKeeper's events reach trio on kazoo's thread a moment later."""
    results: list[tuple[str, object]] = []
    events: dict[str, list[tuple[str, object]]] = {"a": [], "b": []}

    def note(name: str, value: object) -> None:
        if name.startswith("event "):
            events[name.split()[1]].append((name, value))
        else:
            results.append((name, value))

    await script(a, b, note)
    if events_wanted is not None:
        with trio.fail_after(WAIT_S):
            while len(events["a"]) + len(events["b"]) < events_wanted:
                await trio.sleep(0.01)
        await a.exists("/")  # one more round trip: any extra event would be in by now
    return [*results, ("events of a", events["a"]), ("events of b", events["b"])]


async def test_the_in_memory_zookeeper_answers_as_zookeeper_does(zookeeper: ZooKeeperServer, nursery) -> None:
    memory = MemoryZooKeeper()
    await nursery.start(memory.run)
    chroot = f"/memzk-diff{next(_chroots)}"
    mem_a = await memory.session_factory("memory" + chroot, 10, 10)
    mem_b = await memory.session_factory("memory" + chroot, 10, 10)
    expected = await run_script(mem_a, mem_b)
    await mem_a.close()

    real_a = await KazooSession.open(zookeeper.connect_string + chroot, 10, 10)
    real_b = await KazooSession.open(zookeeper.connect_string + chroot, 10, 10)
    try:
        wanted = len(expected[-1][1]) + len(expected[-2][1])  # type: ignore[arg-type]
        got = await run_script(real_a, real_b, wanted)
    finally:
        await real_a.close()
        await real_b.close()
    for mine, theirs in zip(expected, got, strict=True):
        assert mine == theirs
    assert dict(expected)["events of a"]  # the script does see watches fire


async def open_pair(memory: MemoryZooKeeper, timeout_s: float = 6.0) -> tuple[Any, Any, list[SessionState]]:
    a = await memory.session_factory("memory/t", timeout_s, 1)
    b = await memory.session_factory("memory/t", timeout_s, 1)
    states: list[SessionState] = []
    a.add_listener(states.append)
    return a, b, states


async def test_a_cut_session_expires_after_its_timeout_on_the_mock_clock(autojump_clock) -> None:
    memory = MemoryZooKeeper()
    async with trio.open_nursery() as nursery:
        await nursery.start(memory.run)
        a, b, states = await open_pair(memory)
        old_id = a.session_id
        await a.create("/broker", b"", ephemeral=True)
        events: list[Any] = []
        await b.exists("/broker", events.append)

        memory.cut(old_id)
        await trio.lowlevel.checkpoint()
        assert states == [SessionState.SUSPENDED]
        held = trio.Event()
        outcome: list[object] = []

        async def write_while_cut() -> None:
            try:
                await a.set("/t-ignored", b"")
            except Exception as exc:
                outcome.append(type(exc))
            held.set()

        nursery.start_soon(write_while_cut)
        await trio.sleep(5.9)  # within the 6 s timeout: still there, the write waits
        assert await b.exists("/broker") is not None and not held.is_set()
        await trio.sleep(0.2)
        assert await b.exists("/broker") is None
        assert [e.type for e in events] == ["DELETED"]
        assert states == [SessionState.SUSPENDED]  # the client cannot know yet

        memory.heal(old_id)
        await held.wait()
        assert outcome == [SessionExpiredError]
        assert states == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]
        assert a.session_id != old_id
        await a.create("/broker", b"", ephemeral=True)  # the new session registers again
        assert (await b.exists("/broker")).ephemeralOwner == a.session_id
        nursery.cancel_scope.cancel()


async def test_a_short_cut_keeps_the_session_and_delivers_what_it_missed(autojump_clock) -> None:
    memory = MemoryZooKeeper()
    async with trio.open_nursery() as nursery:
        await nursery.start(memory.run)
        a, b, states = await open_pair(memory)
        await a.create("/broker", b"", ephemeral=True)
        events: list[Any] = []
        await a.get_children("/", events.append)
        memory.disconnect_for(a.session_id, 2.0)
        await b.create("/other", b"")
        await trio.sleep(1)
        assert events == []  # queued for the cut-off client
        await trio.sleep(1.5)
        assert states == [SessionState.SUSPENDED, SessionState.CONNECTED]
        assert [(e.type, e.path) for e in events] == [("CHILD", "/")]
        assert await b.exists("/broker") is not None
        nursery.cancel_scope.cancel()


async def test_a_paused_client_is_told_nothing_but_expires(autojump_clock) -> None:
    memory = MemoryZooKeeper()
    async with trio.open_nursery() as nursery:
        await nursery.start(memory.run)
        a, b, states = await open_pair(memory, timeout_s=2)
        await a.create("/controller", b"", ephemeral=True)
        memory.pause_session(a.session_id)
        await trio.sleep(3)
        assert states == [] and await b.exists("/controller") is None
        memory.heal(a.session_id)
        await trio.lowlevel.checkpoint()
        assert states == [SessionState.LOST, SessionState.CONNECTED]
        await b.close()
        with pytest.raises(ConnectionClosedError):
            await b.get("/")
        nursery.cancel_scope.cancel()


async def test_same_operations_same_zxids_every_run() -> None:
    """Determinism: the same operations give the same zxids, session ids and sequence names."""

    async def once() -> tuple:
        memory = MemoryZooKeeper()
        async with trio.open_nursery() as nursery:
            await nursery.start(memory.run)
            a, b, _ = await open_pair(memory)
            names = [await a.create("/s-", b"", sequence=True) for _ in range(3)]
            with pytest.raises(NodeExistsError):
                await b.create("/s-0000000001")
            with pytest.raises(NoNodeError):
                await b.set("/nope", b"")
            with pytest.raises(BadVersionError):
                await b.set("/s-0000000001", b"", 4)
            nursery.cancel_scope.cancel()
        return names, a.session_id, b.session_id, memory.zxid, memory.dump()

    assert await once() == await once()


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)
