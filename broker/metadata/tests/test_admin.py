"""The admin managers: the standalone one changes the metadata file and the logs at once; the
ZooKeeper one writes Kafka's znodes and waits until the metadata cache has seen them."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from strom.broker.config import BrokerConfig, Listener
from strom.broker.errors import TopicError
from strom.broker.metadata.admin import NotControllerError, StandaloneAdminManager
from strom.broker.metadata.cache import ClusterView, StandaloneMetadataCache, ZkMetadataCache
from strom.broker.metadata.zk_admin import ZkAdminManager
from strom.broker.replica.manager import ReplicaManager
from strom.broker.stats import BrokerStats
from strom.broker.topics import TopicStore, log_config
from strom.broker.zk.zkclient import KafkaZkClient, VersionedPartitionState
from strom.broker.zk.zkdata import BrokerInfo, EndPoint, PartitionState, TopicAssignment
from strom.protocol.errors import ErrorCode
from strom.storage.log_manager import LogManager
from strom.testing.zookeeper import ZooKeeperServer, zookeeper_fixture

zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)
_chroots = itertools.count()


# ----------------------------------------------------------------------------- standalone
class Standalone:
    def __init__(self, path: Path, **props: str) -> None:
        self.config = BrokerConfig({"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0", **props})
        self.store = TopicStore(path / "meta.json")
        self.replicas = ReplicaManager(self.config.node_id)
        self.logs = LogManager([path], log_config(self.config, {}))
        self.logs.startup(broker_id=self.config.node_id, cluster_id=self.store.cluster_id, topic_configs={})
        self.metadata = StandaloneMetadataCache(
            self.config, self.store, self.replicas, self.logs, lambda name: Listener(name, "h", 1, "PLAINTEXT")
        )
        self.created: list[str] = []
        self.configs_changed = 0
        self.admin = StandaloneAdminManager(
            self.config,
            self.store,
            self.metadata,
            self.logs,
            self.replicas,
            BrokerStats(),
            self.drop,
            self.created.append,
            self.changed,
        )

    def drop(self, topic: str, index: int) -> None:
        self.logs.delete_log(topic, index)
        self.replicas.remove(topic, index)

    def changed(self) -> None:
        self.configs_changed += 1


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    s = Standalone(tmp_path, **{"num.partitions": "3"})
    yield s
    s.logs.shutdown()


async def test_standalone_creates_logs_replicas_and_metadata(standalone: Standalone) -> None:
    admin = standalone.admin
    info = await admin.create_topic("t", -1, -1, {"retention.ms": "100"})
    assert info is not None and info.partitions == 3 and standalone.created == ["t"]
    assert standalone.store.topics["t"].configs == {"retention.ms": "100"}
    assert all(standalone.replicas.partition("t", i) is not None for i in range(3))
    assert standalone.replicas.partition("t", 0).log.config.retention_ms == 100
    assert await admin.create_topic("v", 1, 1, {}, validate_only=True) is None
    assert "v" not in standalone.store.topics and standalone.logs.get_log("v", 0) is None
    with pytest.raises(TopicError) as refused:
        await admin.create_topic("t", 1, 1, {})
    assert refused.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(TopicError) as refused:
        await admin.create_topic("r", 1, 2, {})
    assert refused.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(TopicError) as refused:
        await admin.create_topic("c", 1, 1, {"retention.ms": "soon"})
    assert refused.value.code == ErrorCode.INVALID_CONFIG and "r" not in standalone.store.topics


async def test_standalone_grows_reconfigures_and_deletes(standalone: Standalone) -> None:
    admin = standalone.admin
    await admin.create_topic("t", 1, 1, {})
    await admin.create_partitions("t", 3, assignment=[[standalone.config.node_id], [standalone.config.node_id]])
    assert standalone.store.topics["t"].partitions == 3 and standalone.replicas.partition("t", 2) is not None
    with pytest.raises(TopicError) as refused:
        await admin.create_partitions("t", 2)
    assert refused.value.code == ErrorCode.INVALID_PARTITIONS
    await admin.set_topic_configs("t", {"segment.bytes": "2000000"})  # 4.3's minimum is 1 MiB
    assert standalone.metadata.topic_setting("t", "segment.bytes") == 2000000
    assert standalone.replicas.partition("t", 0).log.config.segment_bytes == 2000000
    await admin.set_broker_configs("", {"max.connections": "7"})
    assert standalone.metadata.broker_configs() == {"": {"max.connections": "7"}} and standalone.configs_changed == 1
    await admin.alter_client_quotas({(("user", "u"),): {"producer_byte_rate": 5.0}})
    assert standalone.metadata.client_quotas() == {(("user", "u"),): {"producer_byte_rate": 5.0}}
    first, second = await admin.allocate_producer_id(), await admin.allocate_producer_id()
    assert second == first + 1
    await admin.delete_topic("t")
    assert standalone.metadata.topic("t") is None and standalone.replicas.partition("t", 0) is None
    with pytest.raises(TopicError) as refused:
        await admin.delete_topic("t")
    assert refused.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_auto_create_follows_the_broker_setting(tmp_path: Path) -> None:
    on = Standalone(tmp_path / "on")
    off = Standalone(tmp_path / "off", **{"auto.create.topics.enable": "false"})
    try:
        assert (await on.admin.auto_create("a")) is not None
        assert (await on.admin.auto_create("a")) is on.store.topics["a"]  # already there: the topic
        assert await on.admin.auto_create("bad name") is None
        assert await off.admin.auto_create("a") is None and "a" not in off.store.topics
    finally:
        on.logs.shutdown()
        off.logs.shutdown()


async def test_standalone_elections_and_reassignments_need_nothing(standalone: Standalone) -> None:
    admin, me = standalone.admin, standalone.config.node_id
    await admin.create_topic("t", 1, 1, {})
    assert await admin.elect_leaders(None, False) == {}
    assert await admin.elect_leaders([("t", 0), ("t", 1), ("u", 0)], False) == {
        ("t", 0): (ErrorCode.ELECTION_NOT_NEEDED, None),
        ("t", 1): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-1"),
        ("u", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as u"),
    }
    results = await admin.alter_partition_reassignments([("t", 0, [me]), ("t", 0, None), ("t", 0, [me, 77])])
    assert [r[2] for r in results] == [
        ErrorCode.NONE,
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    ]
    assert await admin.list_partition_reassignments() == {}


# ----------------------------------------------------------------------------- ZooKeeper
class Controller:
    epoch: int | None = None


class ZkReader:
    """The cluster member's part: reads the znodes into the cache when asked, and (as the
    controller would) gives each partition a state led by its first replica."""

    def __init__(self, zk: KafkaZkClient, metadata: ZkMetadataCache) -> None:
        self.zk, self.metadata = zk, metadata
        self.controller = Controller()
        self.dirty = 0

    def mark_dirty(self) -> None:
        self.dirty += 1

    async def read_view(self) -> ClusterView:
        view = ClusterView(brokers=await self.zk.get_all_brokers(), to_delete=await self.zk.get_topics_to_delete())
        for name in await self.zk.get_topics():
            assignment = await self.zk.get_topic_assignment(name)
            if assignment is None:
                continue
            view.assignments[name] = assignment
            view.configs[name] = await self.zk.get_topic_config(name)
            for p, replicas in assignment.partitions.items():
                view.states[(name, p)] = VersionedPartitionState(PartitionState(replicas[0], 0, replicas, 1), 0)
        view.quotas = await self.zk.get_client_quotas()
        view.broker_configs = await self.zk.get_broker_configs()
        return view

    async def changed(self) -> None:
        await trio.sleep(0.01)
        self.metadata.update(await self.read_view())


@pytest.fixture(params=["memory", "zookeeper"])
async def zk(request: pytest.FixtureRequest, nursery: trio.Nursery) -> AsyncIterator[KafkaZkClient]:
    """A client on a real ZooKeeper, or on strom.testing's in-memory one: the same tests on both."""
    if request.param == "zookeeper":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
        client = await KafkaZkClient.connect(f"{zookeeper.connect_string}/strom/admin{next(_chroots)}")
    else:
        from strom.testing.memzk import MemoryZooKeeper

        memory = MemoryZooKeeper()
        await nursery.start(memory.run)
        client = await KafkaZkClient.connect("memory/strom/admin", session_factory=memory.session_factory)
    for broker_id, rack in ((0, "a"), (1, "b"), (2, "a")):
        await client.register_broker(
            BrokerInfo(
                broker_id, (EndPoint("PLAINTEXT", "h", 9092 + broker_id, "PLAINTEXT"),), rack=rack, timestamp_ms=1
            )
        )
    yield client
    await client.close()


def zk_admin(zk: KafkaZkClient) -> tuple[ZkAdminManager, ZkMetadataCache, ZkReader]:
    config = BrokerConfig(
        {
            "log.dirs": "/nonexistent",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "unused:2181",
            "num.partitions": "4",
        }
    )
    metadata = ZkMetadataCache(config, "cid")
    reader = ZkReader(zk, metadata)
    return ZkAdminManager(config, zk, metadata, reader), metadata, reader


async def test_zk_topic_creation_writes_a_rack_aware_assignment_and_waits_for_the_cache(zk: KafkaZkClient) -> None:
    admin, metadata, _ = zk_admin(zk)
    info = await admin.create_topic("t", -1, 2, {"cleanup.policy": "compact"})
    assert info is not None and info is metadata.topic("t") and info.partitions == 4
    assignment = await zk.get_topic_assignment("t")
    assert assignment is not None and len(assignment.partitions) == 4
    racks = {0: "a", 1: "b", 2: "a"}
    assert all(len(r) == 2 and len({racks[b] for b in r}) == 2 for r in assignment.partitions.values())
    assert await zk.get_topic_config("t") == {"cleanup.policy": "compact"}
    with pytest.raises(TopicError) as refused:
        await admin.create_topic("big", 1, 4, {})
    assert refused.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert await admin.create_topic("v", 1, 3, {}, validate_only=True) is None
    assert "v" not in await zk.get_topics()


async def test_zk_manual_assignments_are_checked_against_the_registered_brokers(zk: KafkaZkClient) -> None:
    admin, metadata, _ = zk_admin(zk)
    await admin.create_topic("c", -1, -1, {}, assignment=[(1, [2, 0]), (0, [1, 2])])
    assert (await zk.get_topic_assignment("c")).partitions == {0: (1, 2), 1: (2, 0)}
    with pytest.raises(TopicError) as refused:
        await admin.create_topic("d", -1, -1, {}, assignment=[(0, [0, 1]), (1, [2])])
    assert refused.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "1 replica(s), but this is not consistent with previous partitions, which have 2" in refused.value.message
    with pytest.raises(TopicError) as refused:
        await admin.create_topic("d", -1, -1, {}, assignment=[(0, [0, 3])])
    assert (
        refused.value.message == "The manual partition assignment includes broker 3, but no such broker is registered."
    )
    await admin.create_partitions("c", 4, assignment=[[0, 1], [2, 1]])
    assert (await zk.get_topic_assignment("c")).partitions == {0: (1, 2), 1: (2, 0), 2: (0, 1), 3: (2, 1)}
    assert metadata.topic("c").partitions == 4
    with pytest.raises(TopicError) as refused:  # the topic's replication factor is 2
        await admin.create_partitions("c", 5, assignment=[[0]])
    assert refused.value.message.startswith("The manual partition assignment includes a partition with 1 replica")
    await admin.create_partitions("c", 6, validate_only=True)
    assert len((await zk.get_topic_assignment("c")).partitions) == 4


async def test_zk_configs_quotas_deletion_and_producer_ids(zk: KafkaZkClient) -> None:
    admin, metadata, reader = zk_admin(zk)
    other, _, _ = zk_admin(zk)
    await admin.create_topic("t", 1, 1, {})
    await admin.set_topic_configs("t", {"retention.ms": "5"})
    assert await zk.get_topic_config("t") == {"retention.ms": "5"} and metadata.topic("t").configs == {
        "retention.ms": "5"
    }
    await admin.set_broker_configs("", {"max.connections": "9"})
    assert await zk.get_broker_configs() == {"": {"max.connections": "9"}}
    assert metadata.broker_configs() == {"": {"max.connections": "9"}}  # at once, before the next read
    quota = {(("user", "u"),): {"producer_byte_rate": 7.0}}
    await admin.alter_client_quotas(quota)
    assert await zk.get_client_quotas() == quota and metadata.client_quotas() == quota
    await admin.alter_client_quotas({})
    assert await zk.get_client_quotas() == {}
    ids = [await admin.allocate_producer_id(), await admin.allocate_producer_id(), await other.allocate_producer_id()]
    assert ids[1] == ids[0] + 1 and ids[2] not in ids[:2]  # each broker its own block
    await admin.delete_topic("t")
    assert "t" in await zk.get_topics_to_delete() and metadata.topic("t") is None
    assert reader.dirty > 0


async def test_zk_controller_operations_need_the_controller(zk: KafkaZkClient) -> None:
    admin, _, reader = zk_admin(zk)
    with pytest.raises(NotControllerError):
        await admin.elect_leaders(None, False)
    with pytest.raises(NotControllerError):
        await admin.alter_partition_reassignments([("t", 0, [0])])
    with pytest.raises(NotControllerError):
        await admin.list_partition_reassignments()
    reader.controller.epoch = 1
    await zk.create_topic("m", {0: (0, 1)})
    listed = await admin.list_partition_reassignments()
    assert listed["m"] == TopicAssignment({0: (0, 1)}, topic_id=listed["m"].topic_id)
