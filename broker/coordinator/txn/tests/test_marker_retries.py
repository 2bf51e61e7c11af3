"""The coordinator's marker sender keeps a partition until its leader has written the marker.

Sim finding 8 (seed 31265 with fast restarts): the leader of ``sim-0`` had just restarted and
answered WriteTxnMarkers with UNKNOWN_TOPIC_OR_PARTITION before it had learnt its partitions; the
coordinator counted that as done, wrote CompleteCommit, and the partition never got its commit
marker (its last stable offset stayed below the committed records for good). Kafka's marker
completion handler retries UNKNOWN_TOPIC_OR_PARTITION; only a topic gone from the coordinator's
own metadata is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace as NS
from typing import Any

import trio

from strom.broker.coordinator.tests.memory_runtime import MemoryRuntime
from strom.broker.coordinator.txn.markers import TransactionMarkerChannelManager
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

REMOTE = 2


@dataclass
class RemoteLeaderRuntime(MemoryRuntime):
    """Every partition of ``other_topics`` is led by broker REMOTE."""

    def leader_of(self, topic: str, index: int) -> int | None:
        if topic in self.other_topics:
            return REMOTE
        return super().leader_of(topic, index)

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return ("127.0.0.1", 9) if broker_id == REMOTE else None


@dataclass
class ScriptedLeader:
    """A partition leader answering WriteTxnMarkers with the next code of ``answers`` per request
    (the last one repeated); what it was asked is in ``asked``."""

    answers: list[ErrorCode]
    asked: list[dict[str, Any]] = field(default_factory=list)
    deletes: tuple[RemoteLeaderRuntime, str] | None = None  # the topic it drops after its first answer

    async def request(self, api_key: int, version: int, body: dict[str, Any], *, timeout_s: float | None = None) -> Any:
        assert api_key == ApiKey.WRITE_TXN_MARKERS
        self.asked.append(body)
        code = self.answers[min(len(self.asked), len(self.answers)) - 1]
        if self.deletes is not None:
            runtime, topic = self.deletes
            runtime.other_topics.pop(topic, None)
        topics = body["markers"][0]["topics"]
        partitions = [
            NS(name=t["name"], partitions=[NS(partition_index=i, error_code=code) for i in t["partition_indexes"]])
            for t in topics
        ]
        return NS(markers=[NS(topics=partitions)])

    async def close(self) -> None:
        pass


async def write(runtime: RemoteLeaderRuntime, leader: ScriptedLeader) -> bool:
    channel = TransactionMarkerChannelManager(runtime, lambda host, port: leader)
    with trio.fail_after(60):
        return await channel.write_markers(1000, 0, True, 0, {("sim", 0)}, lambda: True)


async def test_a_leader_that_does_not_know_the_partition_yet_is_asked_again(autojump_clock: trio.abc.Clock) -> None:
    runtime = RemoteLeaderRuntime(is_cluster=True, other_topics={"sim": 1})
    leader = ScriptedLeader(
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE]
    )
    assert await write(runtime, leader) is True
    # done only once the leader answered NONE, i.e. wrote the marker
    assert len(leader.asked) == 3


async def test_a_partition_whose_topic_was_deleted_meanwhile_is_dropped(autojump_clock: trio.abc.Clock) -> None:
    runtime = RemoteLeaderRuntime(is_cluster=True, other_topics={"sim": 1})
    leader = ScriptedLeader([ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
    leader.deletes = (runtime, "sim")
    assert await write(runtime, leader) is True
    assert len(leader.asked) == 1


async def test_a_partition_that_fenced_this_coordinator_is_not_asked_again(autojump_clock: trio.abc.Clock) -> None:
    """TRANSACTION_COORDINATOR_FENCED: a newer coordinator's marker is there already (this one was
    deposed while its marker was on its way); nothing left to write, as Kafka's sender stops."""
    runtime = RemoteLeaderRuntime(is_cluster=True, other_topics={"sim": 1})
    leader = ScriptedLeader([ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.NONE])
    assert await write(runtime, leader) is True
    assert len(leader.asked) == 1
