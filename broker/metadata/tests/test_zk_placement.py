"""Where the ZooKeeper admin manager places replicas: over the brokers registered in ZooKeeper
now (not the watched view, which may lag), rack-aware from the registrations, or exactly as a
manual assignment says (moved here from the cluster member's tests with the code)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.errors import TopicError
from strom.broker.metadata.cache import ClusterView, ZkMetadataCache
from strom.broker.metadata.zk_admin import ZkAdminManager
from strom.broker.zk.zkdata import TopicAssignment
from strom.protocol.errors import ErrorCode


class FakeZk:
    def __init__(self, racks: dict[int, str | None], placement: bool = True) -> None:
        self.racks = racks
        self.placement = placement
        self.written: dict[str, dict[int, tuple[int, ...]]] = {}

    async def get_all_brokers(self) -> dict[int, Any]:
        if not self.placement:
            raise AssertionError("a manual assignment needs no placement")
        return {b: SimpleNamespace(rack=rack) for b, rack in self.racks.items()}

    async def get_live_broker_ids(self) -> list[int]:
        return sorted(self.racks)

    async def create_topic(self, name: str, assignment: dict, configs: dict, topic_id: str) -> str:
        self.written[name] = dict(assignment)
        return topic_id

    async def set_topic_assignment(self, name: str, assignment: TopicAssignment) -> None:
        self.written[name] = dict(assignment.partitions)


class NoSync:
    controller = SimpleNamespace(epoch=None)

    def mark_dirty(self) -> None:
        pass

    async def changed(self) -> None:
        raise AssertionError("waited although the test answers the wait itself")

    async def read_view(self) -> ClusterView:
        return ClusterView()


def admin_over(zk: FakeZk, view: ClusterView) -> tuple[ZkAdminManager, ZkMetadataCache]:
    config = BrokerConfig({"log.dirs": "/nonexistent", "listeners": "PLAINTEXT://127.0.0.1:0"})
    metadata = ZkMetadataCache(config, "cid")
    metadata.update(view)
    admin = ZkAdminManager(config, zk, metadata, NoSync())  # type: ignore[arg-type]

    async def no_wait(condition: Any) -> None:
        pass

    admin.wait_for = no_wait  # type: ignore[method-assign]
    return admin, metadata


def grown(metadata: ZkMetadataCache, zk: FakeZk, name: str) -> None:
    """The cache learns what was written (the reconcile loop's part)."""
    view = metadata.view
    view.assignments[name] = TopicAssignment(zk.written[name], topic_id=None)
    metadata.update(view)


async def test_topic_placement_uses_the_brokers_registered_in_zookeeper_not_the_watched_view() -> None:
    zk = FakeZk({2: None, 0: None, 1: None})
    admin, metadata = admin_over(zk, ClusterView(brokers={0: None, 1: None}))  # broker 2 not seen yet
    await admin.create_topic("t", 2, 3, {})
    assert all(sorted(replicas) == [0, 1, 2] for replicas in zk.written["t"].values())
    grown(metadata, zk, "t")
    await admin.create_partitions("t", 3)
    assert sorted(zk.written["t"][2]) == [0, 1, 2]


async def test_a_manual_assignment_is_written_to_zookeeper_as_given() -> None:
    """The topic znode gets the replicas in the given order (first = preferred leader), for new
    topics and added partitions, without asking placement."""
    zk = FakeZk({0: None, 1: None, 2: None}, placement=False)
    admin, metadata = admin_over(zk, ClusterView(brokers={0: None, 1: None, 2: None}))
    await admin.create_topic("t", -1, -1, {}, validate_only=True, assignment=[(0, [2, 0]), (1, [0, 1])])
    assert zk.written == {}
    await admin.create_topic("t", -1, -1, {}, assignment=[(0, [2, 0]), (1, [0, 1])])
    assert zk.written["t"] == {0: (2, 0), 1: (0, 1)}
    grown(metadata, zk, "t")
    await admin.create_partitions("t", 3, assignment=[[1, 2]])
    assert zk.written["t"] == {0: (2, 0), 1: (0, 1), 2: (1, 2)}


async def test_validate_only_create_partitions_places_the_new_partitions_and_writes_nothing() -> None:
    """A growth the registered brokers cannot hold (replication factor 3, 2 brokers) is refused
    with validate_only too; one they can hold is answered without a write."""
    zk = FakeZk({0: None, 1: None})
    view = ClusterView(brokers={0: None, 1: None})
    view.assignments["t"] = TopicAssignment({0: (0, 1, 2)}, topic_id=None)
    admin, _ = admin_over(zk, view)
    with pytest.raises(TopicError) as refused:
        await admin.create_partitions("t", 2, validate_only=True)
    assert refused.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    zk.racks[2] = None
    await admin.create_partitions("t", 2, validate_only=True)
    assert zk.written == {}


async def test_placement_reads_the_racks_from_the_registrations() -> None:
    """Brokers registered with a rack get each partition's replicas on distinct racks, for new
    topics and for partitions added later."""
    racks: dict[int, str | None] = {0: "r1", 1: "r1", 2: "r2", 3: "r2", 4: "r3", 5: "r3"}
    zk = FakeZk(racks)
    admin, metadata = admin_over(zk, ClusterView(brokers=dict.fromkeys(racks)))
    await admin.create_topic("t", 6, 3, {})
    assert all(sorted(str(racks[b]) for b in r) == ["r1", "r2", "r3"] for r in zk.written["t"].values())
    grown(metadata, zk, "t")
    await admin.create_partitions("t", 9)
    assert sorted(zk.written["t"]) == list(range(9))
    assert all(sorted(str(racks[b]) for b in zk.written["t"][p]) == ["r1", "r2", "r3"] for p in (6, 7, 8))
