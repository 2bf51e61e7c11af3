"""Partitions this broker leads, their high watermarks, and waiting for data to arrive.

A standalone broker is the only replica of every partition, so the in-sync replica set is just
itself and the high watermark follows the log end offset as soon as an append lands. The high
watermark is still kept apart from the log end offset (and checkpointed by the LogManager), so
that consumers only ever see what `acks=all` would have acknowledged.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from storage.log import Log, LogAppendInfo

log = logging.getLogger("strom.replicas")


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def append(self, records, headers) -> LogAppendInfo:
        info = self.log.append_as_leader(records, headers, self.leader_epoch)
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> bool:
        """With this broker as the only in-sync replica, everything in the log is committed."""
        leo = self.log.log_end_offset
        if self.log.high_watermark < leo:
            self.log.high_watermark = leo
            return True
        return False


class ReplicaManager:
    def __init__(self, node_id: int):
        self.node_id = node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._data_arrived = trio.lowlevel.ParkingLot()

    def add(self, topic: str, index: int, partition_log: Log) -> Partition:
        epoch = partition_log.latest_epoch()
        partition = Partition(topic, index, partition_log, self.node_id,
                              leader_epoch=epoch if epoch is not None and epoch >= 0 else 0,
                              replicas=[self.node_id], isr=[self.node_id])
        partition.maybe_advance_high_watermark()
        self.partitions[(topic, index)] = partition
        return partition

    def remove_topic(self, topic: str) -> list[Partition]:
        gone = [p for key, p in self.partitions.items() if key[0] == topic]
        for p in gone:
            del self.partitions[(topic, p.index)]
        return gone

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def notify_data(self) -> None:
        """Wake every fetch waiting for new committed data."""
        self._data_arrived.unpark_all()

    async def wait_for_data(self) -> None:
        """Park until the next `notify_data`; callers bound it with a deadline."""
        await self._data_arrived.park()
