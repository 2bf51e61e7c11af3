"""The two metadata caches answer the same questions from their own sources: the standalone one
from the metadata file and this broker's replicas, the ZooKeeper one from the last ClusterView."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker import context
from strom.broker.config import BrokerConfig, Listener
from strom.broker.metadata.cache import ClusterView, StandaloneMetadataCache, ZkMetadataCache
from strom.broker.replica.manager import ReplicaManager
from strom.broker.topics import TopicStore, log_config
from strom.broker.zk.zkclient import VersionedPartitionState
from strom.broker.zk.zkdata import BrokerInfo, EndPoint, PartitionState, TopicAssignment, topic_id_to_text
from strom.storage.log_manager import LogManager

CONFIG = {
    "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "broker.rack": "r1",
    "node.id": "3",
    "min.insync.replicas": "1",
}


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[StandaloneMetadataCache, TopicStore, ReplicaManager, LogManager]]:
    config = BrokerConfig({**CONFIG, "log.dirs": str(tmp_path)})
    store = TopicStore(tmp_path / "meta.json")
    replicas = ReplicaManager(config.node_id)
    logs = LogManager([tmp_path], log_config(config, {}))
    logs.startup(broker_id=config.node_id, cluster_id=store.cluster_id, topic_configs={})
    addresses = {
        "PLAINTEXT": Listener("PLAINTEXT", "h1", 9092, "PLAINTEXT"),
        "INTERNAL": Listener("INTERNAL", "h2", 9093, "PLAINTEXT"),
    }
    cache = StandaloneMetadataCache(config, store, replicas, logs, lambda name: addresses[name])
    yield cache, store, replicas, logs
    logs.shutdown()


def test_standalone_views_come_from_the_store_and_the_local_replicas(standalone) -> None:
    cache, store, replicas, logs = standalone
    info = store.create("t", 2, {"retention.ms": "1000"})
    replicas.add("t", 0, logs.get_or_create_log("t", 0, log_config(cache.config, info.configs)))
    assert not cache.is_cluster
    assert cache.topic("t") is info and cache.topic("u") is None
    assert cache.topic_by_id(info.topic_id) is info and cache.topic_name_by_id(info.topic_id) == "t"
    assert cache.topic_names() == ["t"] and cache.all_topics() == [info] and cache.partition_count("t") == 2
    assert cache.partition_view("t", 0) == (3, 0, [3], [3], [])
    assert cache.partition_view("t", 1) is None  # not hosted: no view
    assert cache.leader_of("t", 0) == 3 and cache.leader_of("t", 1) is None
    assert cache.controller_id() == 3
    assert cache.cluster_id() == store.cluster_id


def test_standalone_live_brokers_is_this_broker_on_the_asked_or_current_listener(standalone) -> None:
    cache = standalone[0]
    assert cache.live_brokers("INTERNAL") == [(3, "h2", 9093, "r1")]
    assert cache.live_brokers() == [(3, "h1", 9092, "r1")]  # outside a connection: the first listener
    token = context.listener_name.set("INTERNAL")
    try:
        assert cache.live_brokers() == [(3, "h2", 9093, "r1")]
    finally:
        context.listener_name.reset(token)
    assert cache.broker_endpoint(3, "PLAINTEXT") == ("h1", 9092) and cache.broker_endpoint(4) is None


def test_topic_settings_follow_config_changes(standalone) -> None:
    cache, store = standalone[0], standalone[1]
    store.create("t", 1, {"min.insync.replicas": "2"})
    assert cache.topic_setting("t", "min.insync.replicas") == 2
    assert cache.topic_config_value(store.topics["t"], "min.insync.replicas") == ("2", False)
    store.set_configs("t", {})
    assert cache.topic_setting("t", "min.insync.replicas") == 1  # the broker default, not the cached override
    assert cache.topic_config_value(store.topics["t"], "min.insync.replicas") == ("1", True)


def test_a_standalone_partition_without_a_replica_is_offline_only_when_a_dir_is(standalone) -> None:
    cache, store, _, logs = standalone
    store.create("t", 1, {})
    assert not cache.hosted_replica_offline("t", 0)
    logs.offline_dirs[Path("/elsewhere")] = "failed at start"
    assert cache.hosted_replica_offline("t", 0)


def _view() -> ClusterView:
    brokers = {
        b: BrokerInfo(
            b,
            (EndPoint("PLAINTEXT", f"b{b}", 9092, "PLAINTEXT"), EndPoint("INTERNAL", f"i{b}", 9093, "PLAINTEXT")),
            rack=f"r{b}",
            timestamp_ms=1,
        )
        for b in (1, 2)
    }
    brokers[4] = BrokerInfo(4, (EndPoint("PLAINTEXT", "b4", 9092, "PLAINTEXT"),), timestamp_ms=1)
    topic_id = bytes(range(16))
    return ClusterView(
        brokers=brokers,
        controller_id=2,
        assignments={
            "t": TopicAssignment({0: (1, 2), 1: (2, 3)}, topic_id=topic_id_to_text(topic_id)),
            "gone": TopicAssignment({0: (1,)}),
        },
        configs={"t": {"cleanup.policy": "compact"}},
        states={
            ("t", 0): VersionedPartitionState(PartitionState(1, 5, (1, 2), 1), 7),
            ("t", 1): VersionedPartitionState(PartitionState(2, 1, (2,), 1), 0),
        },
        to_delete=["gone"],
        quotas={(("user", "u"),): {"producer_byte_rate": 10.0}},
        broker_configs={"": {"max.connections": "5"}},
    )


def test_zk_cache_answers_from_the_last_cluster_view() -> None:
    config = BrokerConfig({**CONFIG, "log.dirs": "/nonexistent"})
    cache = ZkMetadataCache(config, "cid")
    assert cache.is_cluster and cache.topic("t") is None and cache.partition_view("t", 0) is None
    cache.update(_view())
    info = cache.topic("t")
    assert info is not None and info.partitions == 2 and info.configs == {"cleanup.policy": "compact"}
    assert info.topic_id == bytes(range(16)) and cache.topic_name_by_id(bytes(range(16))) == "t"
    assert cache.topic("gone") is None  # being deleted
    assert cache.partition_view("t", 0) == (1, 5, [1, 2], [1, 2], [])
    assert cache.partition_view("t", 1) == (2, 1, [2, 3], [2], [3])  # broker 3 is not live
    assert cache.partition_view("t", 2) is None
    assert cache.leader_of("t", 1) == 2 and cache.controller_id() == 2 and cache.cluster_id() == "cid"
    assert cache.live_brokers("INTERNAL") == [(1, "i1", 9093, "r1"), (2, "i2", 9093, "r2")]  # 4 has no INTERNAL
    assert cache.live_brokers("PLAINTEXT")[-1] == (4, "b4", 9092, None)
    assert cache.broker_endpoint(2, "INTERNAL") == ("i2", 9093)
    assert cache.replication_factor("t") == 2
    assert cache.client_quotas() == {(("user", "u"),): {"producer_byte_rate": 10.0}}
    assert cache.broker_configs() == {"": {"max.connections": "5"}}
    assert not cache.hosted_replica_offline("t", 0)
