"""TransactionStateManager: transactional ids in memory, their records in `__transaction_state`.

The topic (compacted, ``transaction.state.log.num.partitions`` partitions, replication factor
``transaction.state.log.replication.factor``, ``min.insync.replicas`` =
``transaction.state.log.min.isr``, created on the first FindCoordinator for a transaction) holds
one record per change of a transactional id: key = the id, value = its metadata
(``coordinator.txn.records``). Id ``t`` lives in partition ``abs(java hashCode(t)) % partitions``; the
leader of that partition is its coordinator, and the partition's leader epoch is the
*coordinator epoch* written into every marker.

Loading: at start-up (standalone: every partition) and whenever this broker becomes leader of a
partition (cluster), the partition is replayed from its log start to its log end, the last
record per id winning, a tombstone removing it. While a partition loads, requests for its ids get
COORDINATOR_LOAD_IN_PROGRESS; when leadership moves away, its ids are dropped and requests get
NOT_COORDINATOR. Records past the high watermark are replayed too (a leader never truncates its
own log, so they will be committed while it leads), but the partition counts as loading until
the high watermark reaches the log end it was loaded to (:meth:`await_committed`): a coordinator
answers only from committed state. Otherwise a state write that failed (its leadership epoch
changed, the replicas did not have it in time) but stayed in the log would be read back at a
re-election and vouched for, e.g. a partition "already in the transaction", although the record
is lost if another replica is elected: the next coordinator would never write that partition's
marker, and its last stable offset would stay behind for good (a hanging transaction).

Writing: :meth:`write` appends the record and waits until every in-sync replica has it; only then
does the caller apply the change in memory. A write that fails (not leader any more, too few
in-sync replicas, replication timeout, or leadership that changed meanwhile) leaves memory as it
was and answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, so the client looks the coordinator
up again and retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strom.broker.coordinator.runtime import ConfigSource, CoordinatorRuntime, replicated
from strom.broker.coordinator.txn.metadata import TransactionMetadata
from strom.broker.coordinator.txn.records import TxnRecordError, decode_key, decode_value, encode_key, encode_value
from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import build_records_batch, partition_for
from strom.protocol.records.batch import iter_records
from strom.protocol.records.header import BatchHeader
from strom.storage.errors import StorageError

log = logging.getLogger("strom.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"


@dataclass(frozen=True)
class TxnSettings:
    """The broker configs the coordinator reads (Kafka's names and defaults)."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 1  # transaction.state.log.replication.factor
    min_isr: int = 1  # transaction.state.log.min.isr
    segment_bytes: int = 100 * 1024 * 1024  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    write_timeout_ms: int = 5_000  # how long a state write may wait for the ISR

    @classmethod
    def from_config(cls, config: ConfigSource) -> TxnSettings:
        return cls(
            config["transaction.state.log.num.partitions"],
            config["transaction.state.log.replication.factor"],
            config["transaction.state.log.min.isr"],
            config["transaction.state.log.segment.bytes"],
            config["transaction.max.timeout.ms"],
            config["transactional.id.expiration.ms"],
            config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        )


class TransactionStateManager:
    def __init__(self, port: CoordinatorRuntime, settings: TxnSettings) -> None:
        self.port = port
        self.settings = settings
        self.txns: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}  # partition -> coordinator epoch
        self.loading: set[int] = set()

    # ------------------------------------------------------------------ partitions
    def num_partitions(self) -> int:
        count = self.port.partition_count(TRANSACTION_STATE_TOPIC)
        return count if count is not None else self.settings.num_partitions

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def coordinator_of(self, transactional_id: str) -> int | None:
        return self.port.leader_of(TRANSACTION_STATE_TOPIC, self.partition_of(transactional_id))

    def ownership_error(self, transactional_id: str) -> ErrorCode | None:
        index = self.partition_of(transactional_id)
        if index in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.owned.get(self.partition_of(transactional_id), -1)

    async def ensure_topic(self) -> None:
        if self.port.partition_count(TRANSACTION_STATE_TOPIC) is not None:
            return
        s = self.settings
        await self.port.create_internal_topic(
            TRANSACTION_STATE_TOPIC,
            s.num_partitions,
            s.replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(s.segment_bytes),
                "min.insync.replicas": str(s.min_isr),
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
            },
        )

    def led_partitions(self) -> dict[int, int]:
        """Partitions of the topic this broker leads now, with their leader epochs."""
        return self.port.led_partitions(TRANSACTION_STATE_TOPIC)

    def follow_leadership(self) -> tuple[list[int], list[int]]:
        """Load partitions newly led here, drop those lost: (gained, lost). A gained partition
        whose log holds records not committed yet stays loading until :meth:`await_committed`."""
        now = self.led_partitions()
        lost = [i for i, epoch in self.owned.items() if now.get(i) != epoch]
        gained = [i for i, epoch in now.items() if self.owned.get(i) != epoch]
        for index in lost:
            del self.owned[index]
            self.loading.discard(index)
            for tid in [t for t in self.txns if self.partition_of(t) == index]:
                del self.txns[tid]
        for index in sorted(gained):
            self.loading.add(index)
            try:
                self._load_partition(index)
            finally:
                self.loading.discard(index)
            self.owned[index] = now[index]
            replica = self.port.replica(TRANSACTION_STATE_TOPIC, index)
            if replica is not None and replica.high_watermark < replica.log_end_offset:
                self.loading.add(index)
                log.info(
                    "%s-%d loaded up to offset %d, committed up to %d: its transactions are served once committed",
                    TRANSACTION_STATE_TOPIC,
                    index,
                    replica.log_end_offset,
                    replica.high_watermark,
                )
        if gained or lost:
            log.info(
                "coordinating transactions of %d %s partitions (+%d, -%d)",
                len(self.owned),
                TRANSACTION_STATE_TOPIC,
                len(gained),
                len(lost),
            )
        return gained, lost

    async def await_committed(self, index: int, epoch: int) -> bool:
        """Wait until everything loaded from partition ``index`` (led in ``epoch``) is committed,
        then serve its transactions: True; False once the partition is no longer led in
        ``epoch`` (the records may be truncated: the next load decides)."""
        while self.owned.get(index) == epoch and index in self.loading:
            if self.port.replica(TRANSACTION_STATE_TOPIC, index) is None:
                return False  # not hosted here any more
            code = await replicated(self.port, TRANSACTION_STATE_TOPIC, index, self.settings.write_timeout_ms / 1000)
            if self.owned.get(index) != epoch or code == ErrorCode.NOT_COORDINATOR:
                return False
            if code == ErrorCode.NONE:
                self.loading.discard(index)
                log.info("%s-%d: the loaded transaction state is committed", TRANSACTION_STATE_TOPIC, index)
            # else the replicas did not have it in time: keep waiting (the partition stays loading)
        return self.owned.get(index) == epoch

    def _load_partition(self, index: int) -> None:
        replica = self.port.replica(TRANSACTION_STATE_TOPIC, index)
        if replica is None:
            return
        for tid in [t for t in self.txns if self.partition_of(t) == index]:
            del self.txns[tid]
        start = replica.log_start_offset

        def on_batch(header: BatchHeader, batch: memoryview) -> None:
            if header.is_control:
                return  # a transaction marker (WriteTxnMarkers may name this topic, as in Kafka)
            for record in iter_records(batch):
                if record.offset >= start:
                    self._apply(record.key, record.value)

        self.port.load(TRANSACTION_STATE_TOPIC, index, on_batch)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        try:
            tid = decode_key(key)
            if value is None:
                self.txns.pop(tid, None)
            else:
                self.txns[tid] = TransactionMetadata.from_value(tid, decode_value(value))
        except TxnRecordError as exc:
            log.warning("skipping an unreadable %s record: %s", TRANSACTION_STATE_TOPIC, exc)

    # ------------------------------------------------------------------ writing
    async def write(self, transactional_id: str, target: TransactionMetadata | None) -> ErrorCode:
        """Append ``target`` (None: a tombstone) and wait for the ISR; NONE once durable."""
        index = self.partition_of(transactional_id)
        epoch = self.owned.get(index)
        replica = self.port.replica(TRANSACTION_STATE_TOPIC, index)
        if epoch is None or replica is None or not replica.is_leader:
            return ErrorCode.NOT_COORDINATOR
        min_isr = replica.min_insync_replicas  # the topic's (transaction.state.log.min.isr at creation)
        if replica.isr_size < min_isr:
            log.warning(
                "%s-%d has %d in-sync replicas, fewer than %d: transaction state not written",
                TRANSACTION_STATE_TOPIC,
                index,
                replica.isr_size,
                min_isr,
            )
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        value = None if target is None else encode_value(target.to_value())
        data = build_records_batch([(encode_key(transactional_id), value)], self.port.now_ms())
        try:
            pending = self.port.append(TRANSACTION_STATE_TOPIC, index, data)
        except (StorageError, OSError) as exc:
            log.error("could not write the state of transactional.id=%s: %s", transactional_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        (code,) = await self.port.await_replication([pending], self.settings.write_timeout_ms / 1000)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER or self.owned.get(index) != epoch:
            # leadership of the partition (in the epoch of the write) lost while waiting: the record
            # may have been truncated as a follower, whatever the high watermark says now
            log.info(
                "transaction state of transactional.id=%s not written: %s-%d leadership lost",
                transactional_id,
                TRANSACTION_STATE_TOPIC,
                index,
            )
            return ErrorCode.NOT_COORDINATOR
        if code != ErrorCode.NONE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE
