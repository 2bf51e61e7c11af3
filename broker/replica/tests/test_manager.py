"""ReplicaManager.append_records / fetch_messages and the purgatories, without a network or a broker."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from strom.broker.replica.manager import FetchParams, ProduceResult, ReplicaManager
from strom.broker.replica.partition import Partition
from strom.broker.topics import TopicInfo
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch, iter_records
from strom.storage.config import LogConfig
from strom.storage.log import Log

SETTINGS = {
    "min.insync.replicas": 1,
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": (1 << 63) - 1,
    "message.timestamp.after.max.ms": 3600000,
}


class Metadata:
    """The metadata cache as the replica manager reads it."""

    def __init__(self, topics: dict[str, int], is_cluster: bool = False, **settings: Any) -> None:
        self.topics = topics
        self.is_cluster = is_cluster
        self.settings = {**SETTINGS, **{k.replace("_", "."): v for k, v in settings.items()}}

    def topic(self, name: str) -> TopicInfo | None:
        return TopicInfo(name, bytes(16), self.topics[name]) if name in self.topics else None

    def topic_setting(self, topic: str, key: str) -> Any:
        return self.settings[key]

    def live_brokers(self, listener_name: str | None = None) -> list[tuple[int, str, int, str | None]]:
        return []


class NoQuota:
    def active(self) -> bool:
        return False

    def is_throttled(self, topic: str, partition: int) -> bool:
        return False

    def exceeded(self, now: float) -> bool:
        return False

    def delay(self, now: float) -> float:
        return 0.0


CONFIG = {"replica.selector.class": None, "broker.rack": None}


def records(n: int, **kwargs: Any) -> bytes:
    return build_batch([Record(i, 0, b"k", b"v") for i in range(n)], base_timestamp=1_700_000_000_000, **kwargs)


def standalone(tmp_path, topics: dict[str, int] | None = None, **settings: Any) -> ReplicaManager:
    topics = topics or {"t": 1}
    manager = ReplicaManager(0, CONFIG, Metadata(topics, **settings))
    for name, count in topics.items():
        for index in range(count):
            manager.add(name, index, Log.open(tmp_path / f"{name}-{index}", LogConfig()))
    return manager


def led_with_a_follower(tmp_path, **settings: Any) -> tuple[ReplicaManager, Partition]:
    """Broker 1 leads t-0 in epoch 3 with broker 2 in sync."""
    manager = ReplicaManager(1, CONFIG, Metadata({"t": 1}, is_cluster=True, **settings))
    partition = manager.add(
        "t", 0, Log.open(tmp_path / "t-0", LogConfig()), leader=1, leader_epoch=0, replicas=[1, 2], isr=[1, 2]
    )
    partition.become_leader(3, [1, 2], [1, 2], version=0)
    return manager, partition


def fetch_request(offset: int = 0, index: int = 0, **fields: Any) -> SimpleNamespace:
    base = {
        "partition": index,
        "fetch_offset": offset,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": -1,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
    }
    return SimpleNamespace(**{**base, **fields})


def consumer(max_wait_ms: int = 0, min_bytes: int = 1, version: int = 12, **fields: Any) -> FetchParams:
    return FetchParams(
        version=version,
        replica_id=fields.pop("replica_id", -1),
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        **fields,
    )


async def test_append_records_appends_as_leader_and_answers_offsets(tmp_path):
    manager = standalone(tmp_path, {"t": 2})
    results = await manager.append_records(
        [("t", 0, records(3)), ("t", 1, records(2)), ("t", 0, records(1))], version=9, acks=1, timeout_ms=1000
    )
    assert [(r.error_code, r.base_offset) for r in results] == [
        (ErrorCode.NONE, 0),
        (ErrorCode.NONE, 0),
        (ErrorCode.NONE, 3),
    ]
    assert manager.partition("t", 0).log.log_end_offset == 4 and manager.partition("t", 0).high_watermark == 4


async def test_append_records_refuses_per_partition_with_kafkas_codes(tmp_path):
    manager = standalone(tmp_path)
    control = records(
        1, is_control=True, producer_id=5, producer_epoch=0, base_sequence=0
    )  # a control batch from a client
    results = await manager.append_records(
        [("t", 0, control), ("t", 7, records(1)), ("gone", 0, records(1)), ("t", 0, b"")],
        version=9,
        acks=1,
        timeout_ms=1000,
    )
    assert [r.error_code for r in results] == [
        ErrorCode.INVALID_RECORD,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_RECORD,
    ]
    assert results[0].error_message == "control batches are written by transaction coordinators only"
    assert results[0].log_start_offset == 0, "a check Kafka's log makes answers with the log start offset"
    assert results[3].log_start_offset == -1, "a request-level check answers without it"
    assert manager.partition("t", 0).log.log_end_offset == 0


async def test_append_records_with_invalid_acks_appends_nothing(tmp_path):
    manager = standalone(tmp_path)
    results = await manager.append_records([("t", 0, records(1))], version=9, acks=2, timeout_ms=1000)
    assert [r.error_code for r in results] == [ErrorCode.INVALID_REQUIRED_ACKS]
    assert manager.partition("t", 0).log.log_end_offset == 0


async def test_acks_all_needs_min_insync_replicas_before_appending(tmp_path):
    manager, partition = led_with_a_follower(tmp_path, min_insync_replicas=3)
    (result,) = await manager.append_records([("t", 0, records(1))], version=9, acks=-1, timeout_ms=1000)
    assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert partition.log.log_end_offset == 0


async def acks_all_while(manager: ReplicaManager, count: int, *steps: Callable[[], None]) -> list[ProduceResult]:
    """An acks=all produce of ``count`` records to t-0; each step runs once everything waits, and
    must leave the produce unanswered until the last."""
    answers: list[ProduceResult] = []

    async def produce() -> None:
        answers.extend(await manager.append_records([("t", 0, records(count))], version=9, acks=-1, timeout_ms=30000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        for step in steps:
            await trio.testing.wait_all_tasks_blocked()
            assert manager.produce_purgatory.delayed == 1 and not answers
            step()
    assert manager.produce_purgatory.delayed == 0
    return answers


async def test_acks_all_waits_in_the_produce_purgatory_until_the_follower_has_the_records(tmp_path):
    manager, partition = led_with_a_follower(tmp_path)
    answers = await acks_all_while(
        manager,
        2,
        lambda: manager.follower_fetched(partition, 2, 1),  # offset 0 only
        lambda: manager.follower_fetched(partition, 2, 2),
    )
    assert [(a.error_code, a.base_offset) for a in answers] == [(ErrorCode.NONE, 0)]
    assert partition.high_watermark == 2


async def test_acks_all_times_out_without_the_follower(tmp_path, autojump_clock):
    manager, _ = led_with_a_follower(tmp_path)
    start = trio.current_time()
    (result,) = await manager.append_records([("t", 0, records(1))], version=9, acks=-1, timeout_ms=5000)
    assert (result.error_code, result.base_offset) == (ErrorCode.REQUEST_TIMED_OUT, -1)
    assert trio.current_time() - start == 5


async def test_acks_all_answers_not_leader_once_the_epoch_of_the_append_is_lost(tmp_path):
    manager, partition = led_with_a_follower(tmp_path)

    def lose_leadership() -> None:
        partition.become_follower(2, 4, [1, 2], [2], version=1)
        partition.log.high_watermark = 1  # the new leader's high watermark covers the offset

    answers = await acks_all_while(manager, 1, lose_leadership)
    assert [(a.error_code, a.base_offset, a.log_start_offset) for a in answers] == [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
    ]


async def test_acks_all_answers_not_enough_replicas_after_append_when_the_isr_shrank(tmp_path):
    manager, partition = led_with_a_follower(tmp_path, min_insync_replicas=2)

    def shrink() -> None:
        partition.isr = [1]  # the follower left the ISR: the leader alone commits the append
        partition.maybe_advance_high_watermark()
        manager.notify_data()

    answers = await acks_all_while(manager, 1, shrink)
    assert [a.error_code for a in answers] == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]


async def test_fetch_messages_answers_at_once_when_data_is_there(tmp_path):
    manager = standalone(tmp_path)
    await manager.append_records([("t", 0, records(3))], version=9, acks=1, timeout_ms=1000)
    (result,) = await manager.fetch_messages(consumer(max_wait_ms=30000), [("t", fetch_request(1))], NoQuota())
    assert result["error_code"] == ErrorCode.NONE and result["high_watermark"] == 3
    assert [r.offset for r in iter_records(result["records"].read())] == [0, 1, 2]  # the whole batch


async def test_a_long_poll_waits_in_the_fetch_purgatory_for_an_append_to_its_own_partition(tmp_path, autojump_clock):
    manager = standalone(tmp_path, {"quiet": 1, "busy": 1})
    answers = []
    reads = []
    real_read = manager.read_partition

    def read_partition(params: FetchParams, name: str, *args: Any) -> tuple[dict, int]:
        reads.append(name)
        return real_read(params, name, *args)

    manager.read_partition = read_partition  # type: ignore[method-assign]

    async def poll() -> None:
        answers.extend(
            await manager.fetch_messages(consumer(max_wait_ms=30000), [("quiet", fetch_request())], NoQuota())
        )

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(1)
        assert manager.fetch_purgatory.delayed == 1
        await manager.append_records([("busy", 0, records(1))], version=9, acks=1, timeout_ms=1000)
        await trio.sleep(1)
        assert not answers and manager.fetch_purgatory.delayed == 1
        assert reads == ["quiet"], "an append elsewhere does not make the poll read again"
        await manager.append_records([("quiet", 0, records(2))], version=9, acks=1, timeout_ms=1000)
    assert trio.current_time() - start < 3
    assert [r.offset for r in iter_records(answers[0]["records"].read())] == [0, 1]
    assert manager.fetch_purgatory.delayed == 0 and reads == ["quiet", "quiet"]


async def test_a_long_poll_answers_empty_at_max_wait(tmp_path, autojump_clock):
    manager = standalone(tmp_path)
    start = trio.current_time()
    (result,) = await manager.fetch_messages(consumer(max_wait_ms=7000), [("t", fetch_request())], NoQuota())
    assert trio.current_time() - start == 7 and result["records"] == b""


async def test_an_error_is_answered_at_once(tmp_path, autojump_clock):
    manager = standalone(tmp_path)
    start = trio.current_time()
    found, missing = await manager.fetch_messages(
        consumer(max_wait_ms=30000), [("t", fetch_request()), ("t", fetch_request(index=3))], NoQuota()
    )
    assert trio.current_time() == start
    assert found["error_code"] == ErrorCode.NONE and missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_follower_fetch_moves_the_high_watermark_and_is_answered_its_divergence(tmp_path):
    manager, partition = led_with_a_follower(tmp_path)
    await manager.append_records([("t", 0, records(4))], version=9, acks=1, timeout_ms=1000)
    assert partition.high_watermark == 0
    follower = consumer(replica_id=2)
    (result,) = await manager.fetch_messages(follower, [("t", fetch_request(4, last_fetched_epoch=3))], NoQuota())
    assert partition.high_watermark == 4 and result["high_watermark"] == 4
    assert partition.followers[2].log_end_offset == 4
    # a follower at 6 whose last epoch (2) ended, on this leader, where epoch 3 began: at 0
    (result,) = await manager.fetch_messages(follower, [("t", fetch_request(6, last_fetched_epoch=2))], NoQuota())
    assert result["diverging_epoch"] == {"epoch": 2, "end_offset": 0}
    assert partition.followers[2].log_end_offset == 4, "a diverging follower's fetch offset is not its log end"


async def test_a_follower_replica_serves_consumers_only_from_fetch_v11(tmp_path):
    manager, partition = led_with_a_follower(tmp_path)
    await manager.append_records([("t", 0, records(2))], version=9, acks=1, timeout_ms=1000)
    partition.become_follower(2, 4, [1, 2], [1, 2], version=1)
    partition.log.high_watermark = 2
    (old,) = await manager.fetch_messages(consumer(version=10), [("t", fetch_request())], NoQuota())
    assert old["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    (new,) = await manager.fetch_messages(consumer(version=11), [("t", fetch_request())], NoQuota())
    assert new["error_code"] == ErrorCode.NONE and [r.offset for r in iter_records(new["records"].read())] == [0, 1]


async def test_partition_or_error_checks_the_leader_epoch_the_client_knows(tmp_path):
    manager, partition = led_with_a_follower(tmp_path)
    assert manager.partition_or_error("t", 0, 3) == (partition, ErrorCode.NONE)
    assert manager.partition_or_error("t", 0, 2) == (partition, ErrorCode.FENCED_LEADER_EPOCH)
    assert manager.partition_or_error("t", 0, 4) == (partition, ErrorCode.UNKNOWN_LEADER_EPOCH)
    assert manager.partition_or_error("t", 1) == (None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    manager.metadata.topics["t"] = 2  # known, not hosted here
    assert manager.partition_or_error("t", 1) == (None, ErrorCode.NOT_LEADER_OR_FOLLOWER)
