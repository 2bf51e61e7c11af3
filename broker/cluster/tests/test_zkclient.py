"""KafkaZkClient over both implementations of its ZooKeeper port: a real ZooKeeper (Debian's
package, one server for the module) and strom.testing's in-memory ZooKeeper. The same tests run on
both, so the in-memory one is held to what ZooKeeper itself does.

The real-ZooKeeper runs are skipped with the reason when ZooKeeper is not installed; failing
instead when STROM_COMPAT_REQUIRE_ALL=1. Each test works under its own chroot.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient

from strom.broker.zk.zkclient import (
    BrokerIdInUseError,
    ControllerMovedError,
    KafkaZkClient,
    PartitionStateConflictError,
    SessionState,
    TopicAlreadyMarkedForDeletionError,
    TopicExistsError,
    UnknownTopicError,
    VersionedPartitionState,
    split_connect_string,
)
from strom.broker.zk.zkdata import BrokerInfo, ControllerInfo, EndPoint, PartitionState, TopicZNode
from strom.testing.memzk import MemoryZooKeeper
from strom.testing.zookeeper import ZooKeeperServer, zookeeper_fixture

zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)
WAIT_S = 20
_chroots = itertools.count()


@dataclass
class Backend:
    """Where the clients of a test connect: a real ZooKeeper or an in-memory one."""

    hosts: str
    memory: MemoryZooKeeper | None = None

    @property
    def factory(self) -> Any:
        return None if self.memory is None else self.memory.session_factory

    async def expire(self, client: KafkaZkClient) -> None:
        """Make ZooKeeper expire ``client``'s session."""
        if self.memory is not None:
            self.memory.expire(client.session_id)
        else:
            await expire_session(client, self.hosts)


@pytest.fixture(params=["memory", "zookeeper"])
async def backend(request: pytest.FixtureRequest, nursery: trio.Nursery) -> AsyncIterator[Backend]:
    if request.param == "zookeeper":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
        yield Backend(zookeeper.connect_string)
    else:
        memory = MemoryZooKeeper()
        await nursery.start(memory.run)
        yield Backend("memory", memory)


@pytest.fixture
def chroot_connect(backend: Backend) -> str:
    return f"{backend.hosts}/strom/test{next(_chroots)}"


@pytest.fixture
async def clients(backend: Backend) -> AsyncIterator[list[KafkaZkClient]]:
    """The clients a test opens with :func:`open_client`; all closed afterwards."""
    opened: list[Any] = [backend]
    yield opened
    for client in opened[1:]:
        await client.close()


async def open_client(opened: list[Any], connect: str, **kwargs: float) -> KafkaZkClient:
    client = await KafkaZkClient.connect(connect, session_factory=opened[0].factory, **kwargs)
    opened.append(client)
    return client


def broker_info(broker_id: int, port: int = 9092) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port),), timestamp_ms=1)


async def expire_session(client: KafkaZkClient, hosts: str) -> None:
    """Make ZooKeeper expire ``client``'s session: open and close a second connection on it."""
    session_id, password = client.session.kazoo.client_id  # type: ignore[attr-defined]

    def hijack() -> None:
        other = KazooClient(hosts=hosts + client.chroot, client_id=(session_id, password))
        other.start(timeout=WAIT_S)
        other.stop()
        other.close()

    await trio.to_thread.run_sync(hijack)


async def next_value(receive: trio.MemoryReceiveChannel, accept: Callable[[object], bool]) -> object:
    with trio.fail_after(WAIT_S):
        async for value in receive:
            if accept(value):
                return value
    raise AssertionError("channel closed")


def test_connect_string_split() -> None:
    assert split_connect_string("h:1,h2:2/kafka/a") == ("h:1,h2:2", "/kafka/a")
    assert split_connect_string("h:1") == ("h:1", "")
    assert split_connect_string("h:1/") == ("h:1", "")
    with pytest.raises(ValueError):
        split_connect_string("/kafka")


async def test_chroot_is_created_and_holds_the_kafka_layout(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    await client.register_broker(broker_info(1))
    hosts, chroot = split_connect_string(chroot_connect)
    root = (await open_client(clients, hosts)).session
    children = await root.get_children(chroot)
    assert {"brokers", "config", "admin", "cluster"} <= set(children)
    assert await root.get_children(f"{chroot}/brokers/ids") == ["1"]
    assert await root.exists("/brokers/ids/1") is None


async def test_register_brokers_and_read_them_back(clients: list, chroot_connect: str) -> None:
    a = await open_client(clients, chroot_connect)
    b = await open_client(clients, chroot_connect)
    await a.register_broker(broker_info(2, 9093))
    await b.register_broker(broker_info(1, 9092))
    assert await a.get_live_broker_ids() == [1, 2]
    assert await b.get_broker(2) == broker_info(2, 9093)
    assert await b.get_broker(5) is None
    assert set(await a.get_all_brokers()) == {1, 2}
    # Registering again on the same session is fine.
    await a.register_broker(broker_info(2, 9093))


async def test_ephemeral_registration_disappears_when_session_closes(clients: list, chroot_connect: str) -> None:
    a = await open_client(clients, chroot_connect)
    observer = await open_client(clients, chroot_connect)
    await a.register_broker(broker_info(1))
    await a.close()
    assert await observer.get_live_broker_ids() == []


async def test_duplicate_broker_id_fails_after_waiting(clients: list, chroot_connect: str) -> None:
    a = await open_client(clients, chroot_connect)
    b = await open_client(clients, chroot_connect)
    await a.register_broker(broker_info(1))
    with pytest.raises(BrokerIdInUseError):
        await b.register_broker(broker_info(1, 9999), wait_s=0.3)
    assert (await b.get_broker(1)) == broker_info(1)


async def test_registration_waits_for_the_previous_session_to_go(clients: list, chroot_connect: str) -> None:
    old = await open_client(clients, chroot_connect)
    new = await open_client(clients, chroot_connect)
    await old.register_broker(broker_info(1))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(new.register_broker, broker_info(1, 9100))
        await trio.sleep(0.3)
        await old.close()
    assert await new.get_broker(1) == broker_info(1, 9100)


async def test_session_expiry_is_surfaced_and_ephemerals_vanish(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect, session_timeout_s=2.0)
    observer = await open_client(clients, chroot_connect)
    states: list[SessionState] = []
    client.add_session_listener(states.append)
    await client.register_broker(broker_info(4))
    assert await client.try_become_controller(4) == 1
    await clients[0].expire(client)
    with trio.fail_after(WAIT_S):
        await client.session_lost.wait()
    assert SessionState.LOST in states
    assert client.controller_lease is None
    assert await observer.get_live_broker_ids() == []
    assert await observer.get_controller_id() is None


async def test_controller_race_has_exactly_one_winner(clients: list, chroot_connect: str) -> None:
    contenders = [await open_client(clients, chroot_connect) for _ in range(4)]
    results: dict[int, int | None] = {}

    async def contend(broker_id: int, client: KafkaZkClient) -> None:
        results[broker_id] = await client.try_become_controller(broker_id)

    async with trio.open_nursery() as nursery:
        for broker_id, client in enumerate(contenders):
            nursery.start_soon(contend, broker_id, client)
    winners = [b for b, epoch in results.items() if epoch is not None]
    assert len(winners) == 1
    assert results[winners[0]] == 1
    assert await contenders[0].get_controller_id() == winners[0]
    assert await contenders[0].get_controller_epoch() == (1, 1)


async def test_epoch_increments_and_old_controller_is_fenced(clients: list, chroot_connect: str) -> None:
    old = await open_client(clients, chroot_connect)
    new = await open_client(clients, chroot_connect)
    await old.create_topic("orders", {0: [1, 2]})
    assert await old.try_become_controller(1) == 1
    first = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    await old.create_partition_states("orders", {0: first})
    assert await new.try_become_controller(2) is None

    # The old controller loses /controller (say, a long GC pause expired its session)...
    await old.session.delete("/controller")
    assert await new.try_become_controller(2) == 2
    current = await new.get_partition_state("orders", 0)
    assert current == VersionedPartitionState(first, 0)

    # ...and its conditional write is rejected even though it names the right znode version.
    stale = PartitionState(leader=2, leader_epoch=1, isr=(2,), controller_epoch=1)
    with pytest.raises(ControllerMovedError):
        await old.set_partition_state("orders", 0, stale, expected_version=0)
    assert old.controller_lease is None
    assert (await new.get_partition_state("orders", 0)) == VersionedPartitionState(first, 0)

    moved = PartitionState(leader=2, leader_epoch=1, isr=(2,), controller_epoch=2)
    assert await new.set_partition_state("orders", 0, moved, expected_version=0) == 1
    with pytest.raises(PartitionStateConflictError):
        await new.set_partition_state("orders", 0, moved, expected_version=0)
    assert await new.get_partition_states("orders") == {0: VersionedPartitionState(moved, 1)}


async def test_writes_without_controller_role_are_refused(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    await client.create_topic("t", {0: [1]})
    with pytest.raises(ControllerMovedError):
        await client.create_partition_states("t", {0: PartitionState(1, 0, (1,), 0)})


async def test_asking_again_keeps_the_same_epoch(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    assert await client.try_become_controller(1) == 1
    assert await client.try_become_controller(1) == 1
    assert client.controller_lease is not None and client.controller_lease.epoch == 1
    with pytest.raises(UnknownTopicError):
        await client.create_partition_states("missing", {0: PartitionState(1, 0, (1,), 1)})
    assert await client.get_topics() == []


async def test_resign_releases_controller(clients: list, chroot_connect: str) -> None:
    a = await open_client(clients, chroot_connect)
    b = await open_client(clients, chroot_connect)
    assert await a.try_become_controller(1) == 1
    await a.resign_controller()
    assert await b.try_become_controller(2) == 2


async def test_topic_create_read_and_duplicate(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    topic_id = await client.create_topic("orders", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"})
    with pytest.raises(TopicExistsError):
        await client.create_topic("orders", {0: [1]})
    assert await client.get_topics() == ["orders"]
    assignment = await client.get_topic_assignment("orders")
    assert assignment is not None
    assert assignment.partitions == {0: (1, 2), 1: (2, 1)}
    assert assignment.topic_id == topic_id
    assert await client.get_topic_assignment("missing") is None
    assert await client.get_topic_config("orders") == {"retention.ms": "1000"}
    raw, _ = await client.session.get(TopicZNode.path("orders"))
    assert raw.endswith(b',"adding_replicas":{},"version":3}')


async def test_topic_configs_and_change_notifications(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    await client.create_topic("t", {0: [1]})
    assert await client.get_topic_config("t") == {}
    await client.set_topic_config("t", {"cleanup.policy": "compact"})
    assert await client.get_topic_config("t") == {"cleanup.policy": "compact"}
    changes = await client.session.get_children("/config/changes")
    assert len(changes) == 1 and changes[0].startswith("config_change_")
    data, _ = await client.session.get(f"/config/changes/{changes[0]}")
    assert data == b'{"version":2,"entity_path":"topics/t"}'
    with pytest.raises(UnknownTopicError):
        await client.set_topic_config("nope", {})


async def test_group_configs_round_trip_for_any_group_id_and_are_announced(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    assert await client.get_group_configs() == {}
    ids = ["g", "", ".", "..", "a/b", "100%", "<default>", "<empty>", "grüße *"]
    for n, group_id in enumerate(ids):
        await client.set_group_config(group_id, {"share.auto.offset.reset": "earliest", "n": str(n)})
    assert await client.get_group_configs() == {
        g: {"share.auto.offset.reset": "earliest", "n": str(n)} for n, g in enumerate(ids)
    }
    assert len(await client.session.get_children("/config/groups")) == len(ids)
    before = len(await client.session.get_children("/config/changes"))
    await client.set_group_config("a/b", {})  # none of its own: the node goes, and that is announced
    assert "a/b" not in await client.get_group_configs()
    changes = sorted(await client.session.get_children("/config/changes"))
    assert len(changes) == before + 1
    data, _ = await client.session.get(f"/config/changes/{changes[-1]}")
    assert data == b'{"version":2,"entity_path":"groups/a%2Fb"}'
    await client.set_group_config("a/b", {})  # already gone: nothing to announce
    assert len(await client.session.get_children("/config/changes")) == before + 1


async def test_topic_deletion_marks_and_znode_removal(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    await client.create_topic("gone", {0: [1], 1: [1]}, {"retention.ms": "5"})
    await client.create_topic("kept", {0: [1]})
    assert await client.try_become_controller(1) == 1
    await client.create_partition_states("gone", {0: PartitionState(1, 0, (1,), 1), 1: PartitionState(1, 0, (1,), 1)})
    with pytest.raises(UnknownTopicError):
        await client.mark_topic_for_deletion("nope")
    await client.mark_topic_for_deletion("gone")
    with pytest.raises(TopicAlreadyMarkedForDeletionError):
        await client.mark_topic_for_deletion("gone")
    assert await client.get_topics_to_delete() == ["gone"]
    await client.delete_topic_znodes("gone")
    assert await client.get_topics() == ["kept"]
    assert await client.get_topics_to_delete() == []
    assert await client.get_topic_config("gone") == {}
    assert await client.get_partition_states("gone") == {}


async def test_cluster_id_is_created_once(clients: list, chroot_connect: str) -> None:
    a = await open_client(clients, chroot_connect)
    b = await open_client(clients, chroot_connect)
    first = await a.get_or_create_cluster_id()
    assert len(first) == 22
    assert await b.get_or_create_cluster_id() == first


async def test_watches_fire_in_trio(clients: list, chroot_connect: str) -> None:
    watcher = await open_client(clients, chroot_connect)
    actor = await open_client(clients, chroot_connect)
    send, receive = trio.open_memory_channel[object](100)

    def on_event(kind: str) -> Callable[[object], None]:
        def callback(value: object) -> None:
            trio.lowlevel.current_task()  # raises outside trio's thread
            send.send_nowait((kind, value))

        return callback

    await watcher.watch_broker_ids(on_event("brokers"))
    await watcher.watch_topics(on_event("topics"))
    await watcher.watch_controller(on_event("controller"))
    await watcher.watch_topics_to_delete(on_event("delete"))
    assert await next_value(receive, lambda v: v == ("brokers", [])) == ("brokers", [])

    await actor.register_broker(broker_info(3))
    await next_value(receive, lambda v: v == ("brokers", [3]))
    await actor.create_topic("x", {0: [3]})
    await next_value(receive, lambda v: v == ("topics", ["x"]))
    await actor.try_become_controller(3)
    kind, info = await next_value(receive, lambda v: v[0] == "controller" and v[1] is not None)  # type: ignore[index]
    assert isinstance(info, ControllerInfo) and info.broker_id == 3
    await actor.mark_topic_for_deletion("x")
    await next_value(receive, lambda v: v == ("delete", ["x"]))
    await actor.close()
    # Both ephemerals go with the session, in no particular order.
    wanted = {("brokers", ()), ("controller", None)}
    with trio.fail_after(WAIT_S):
        async for kind, value in receive:
            wanted.discard((kind, tuple(value) if isinstance(value, list) else value))
            if not wanted:
                break


async def test_partition_state_watch_and_cancel(clients: list, chroot_connect: str) -> None:
    client = await open_client(clients, chroot_connect)
    send, receive = trio.open_memory_channel[object](100)
    await client.create_topic("p", {0: [1]})
    watch = await client.watch_partition_state("p", 0, send.send_nowait)
    assert await next_value(receive, lambda v: True) is None
    await client.try_become_controller(1)
    state = PartitionState(1, 0, (1,), 1)
    await client.create_partition_states("p", {0: state})
    assert await next_value(receive, lambda v: v is not None) == VersionedPartitionState(state, 0)
    watch.cancel()
    await client.set_partition_state("p", 0, PartitionState(1, 1, (1,), 1), 0)
    await client.set_partition_state("p", 0, PartitionState(1, 2, (1,), 1), 1)
    # A cancelled watch delivers nothing more (allow kazoo a moment to see the changes).
    await trio.sleep(0.2)
    seen = []
    while True:
        try:
            seen.append(receive.receive_nowait())
        except trio.WouldBlock:
            break
    assert seen == []


async def test_watches_are_set_again_on_the_new_session_after_expiry(clients: list, chroot_connect: str) -> None:
    watcher = await open_client(clients, chroot_connect, session_timeout_s=2.0)
    actor = await open_client(clients, chroot_connect)
    send, receive = trio.open_memory_channel[object](100)
    await watcher.watch_broker_ids(send.send_nowait)
    assert await next_value(receive, lambda v: True) == []
    old_session = watcher.session_id
    await clients[0].expire(watcher)
    with trio.fail_after(WAIT_S):
        await watcher.session_lost.wait()
        while watcher.session_state is not SessionState.CONNECTED:
            await trio.sleep(0.01)
    assert watcher.session_id != old_session
    await actor.register_broker(broker_info(7))
    assert await next_value(receive, lambda v: v == [7]) == [7]
