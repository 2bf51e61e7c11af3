"""The share admin logic and the durable persister over a share coordinator on the in-memory runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from strom.broker.coordinator.share.admin import ShareGroupOffsetsAdmin
from strom.broker.coordinator.share.coordinator import (
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    ShareCoordinatorSettings,
)
from strom.broker.coordinator.share.persister import PersisterError, SharePartitionKey, StateBatch
from strom.broker.coordinator.share.state_persister import DefaultStatePersister
from strom.broker.coordinator.tests.memory_runtime import MemoryRuntime
from strom.protocol.errors import ErrorCode

TOPIC_ID = b"orders".ljust(16, b"-")[:16]  # MemoryRuntime's id of topic "orders"


@dataclass
class Group:
    members: dict[str, Any] = field(default_factory=dict)
    initialized: set[tuple[bytes, int]] = field(default_factory=set)


@dataclass
class Directory:
    groups: dict[str, Group] = field(default_factory=dict)
    classic: set[str] = field(default_factory=set)

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def create(self, group_id: str) -> Group:
        return self.groups.setdefault(group_id, Group())

    def other_kind(self, group_id: str) -> bool:
        return group_id in self.classic


def _unreachable(host: str, port: int) -> Any:
    raise AssertionError("a standalone broker calls its own share coordinator")


async def _setup() -> tuple[ShareCoordinator, DefaultStatePersister, ShareGroupOffsetsAdmin, Directory]:
    runtime = MemoryRuntime(other_topics={"orders": 2})
    coordinator = ShareCoordinator(runtime, ShareCoordinatorSettings(num_partitions=2))
    persister = DefaultStatePersister(coordinator, _unreachable, retry_timeout_s=5)
    directory = Directory()
    ends = {("orders", 0): 10, ("orders", 1): 0}
    admin = ShareGroupOffsetsAdmin(directory, persister, runtime.topics, lambda t, i: ends.get((t, i)))
    return coordinator, persister, admin, directory


async def test_persister_creates_the_topic_and_initializes_on_first_read() -> None:
    coordinator, persister, _, _ = await _setup()
    key = SharePartitionKey("g", TOPIC_ID, 0)
    state = await persister.read_state(key, 0)
    assert (state.state_epoch, state.start_offset, state.batches) == (0, -1, ())
    assert coordinator.runtime.partition_count(SHARE_GROUP_STATE_TOPIC) == 2
    await persister.write_state(key, 0, 0, 3, [StateBatch(3, 5, 2, 1)], 3)
    assert (await persister.read_state(key, 1)).batches == (StateBatch(3, 5, 2, 1),)
    summary = await persister.read_summary(key, -1)
    # a new leader's read restates the start offset with the count unknown, as Kafka 4.3 records it
    assert (summary.start_offset, summary.leader_epoch, summary.delivery_complete_count) == (3, 1, -1)
    with pytest.raises(PersisterError) as fenced:
        await persister.write_state(key, 0, 0, 3, [])
    assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH


async def test_persister_retries_while_the_coordinator_moves(autojump_clock) -> None:
    coordinator, persister, _, _ = await _setup()
    key = SharePartitionKey("g", TOPIC_ID, 0)
    await persister.initialize_state(key, 0, 0)
    runtime = coordinator.runtime
    index = coordinator.partition_of(key)
    runtime.follow(SHARE_GROUP_STATE_TOPIC, index)  # type: ignore[attr-defined]
    coordinator.follow_leadership()

    async def lead_again() -> None:
        await trio.sleep(2)
        runtime.lead(SHARE_GROUP_STATE_TOPIC, index)  # type: ignore[attr-defined]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lead_again)
        state = await persister.read_state(key, 0)  # NOT_COORDINATOR (no leader), then served
    assert state.start_offset == 0
    assert trio.current_time() >= 2


async def test_describe_alter_delete_as_kafka_4_3() -> None:
    _, persister, admin, directory = await _setup()
    assert (await admin.describe("nobody", None))["topics"] == []
    named = await admin.describe("nobody", [("orders", [0]), ("nope", [0])])
    assert [
        (t["topic_name"], t["partitions"][0]["start_offset"], t["partitions"][0]["lag"]) for t in named["topics"]
    ] == [
        ("orders", -1, -1),
        ("nope", -1, -1),
    ]
    altered = await admin.alter("g", [("orders", [(0, 4), (9, 0)]), ("nope", [(0, 0)])])
    assert altered["error_code"] == ErrorCode.NONE and "g" in directory.groups  # created, as Kafka does
    codes = {
        (t["topic_name"], p["partition_index"]): p["error_code"] for t in altered["responses"] for p in t["partitions"]
    }
    assert codes == {
        ("orders", 0): ErrorCode.NONE,
        ("orders", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    described = await admin.describe("g", None)
    (topic,) = described["topics"]
    assert [(p["partition_index"], p["start_offset"], p["lag"]) for p in topic["partitions"]] == [(0, 4, 6)]
    directory.groups["g"].members["m"] = object()
    assert (await admin.alter("g", [("orders", [(0, 0)])]))["error_code"] == ErrorCode.NON_EMPTY_GROUP
    assert (await admin.delete("g", ["orders"]))["error_code"] == ErrorCode.NON_EMPTY_GROUP
    directory.groups["g"].members.clear()
    deleted = await admin.delete("g", ["orders", "nope"])
    assert [(t["topic_name"], t["error_code"], t["error_message"]) for t in deleted["responses"]] == [
        ("orders", ErrorCode.NONE, None),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."),
    ]
    assert (await persister.read_summary(SharePartitionKey("g", TOPIC_ID, 0), -1)).start_offset == -1
    again = await admin.delete("g", ["orders"])
    assert again["responses"][0]["error_message"] == "There is no offset information to delete."
    assert (await admin.delete("missing", ["orders"]))["error_message"] == "Group missing not found."
    directory.classic.add("c")
    assert (await admin.alter("c", []))["error_message"] == "Group c is not a share group."
    assert (await admin.alter("", []))["error_code"] == ErrorCode.INVALID_GROUP_ID
