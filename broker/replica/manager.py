"""ReplicaManager: the partitions this broker hosts, and what is done to them (Kafka's ReplicaManager).

* `append_records`: a client's records appended as leader (Kafka's appendRecords): the leader and
  min.insync.replicas checked, the records through the `LogValidator`, transactional batches
  verified with the transaction coordinator, appended, and with acks=all parked in the produce
  purgatory (`DelayedProduce`, keyed by the leader epoch of the append) until the in-sync replicas
  have them, the leadership of that epoch is lost, or the timeout.
* `fetch_messages`: reads for a consumer or a follower (Kafka's fetchMessages): from the leader,
  or (KIP-392) from a follower up to its own high watermark; read_committed up to the last stable
  offset with the aborted transactions; a follower's fetch recorded (`follower_fetched`) and its
  diverging epoch answered; a throttled out-of-sync follower held back by the leader's
  replication quota; a long poll parked in the fetch purgatory (`DelayedFetch`), woken by changes
  of its own partitions.
* the replica fetcher (`strom.broker.replica.fetcher`), which a cluster member starts, copies the
  leaders' records to the partitions followed here.

Who needs a partition asks `partition(topic, index)`, or `partition_or_error(...)` for the error
Kafka answers when this broker may not serve it.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Protocol,
)

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.records.legacy import downconvert
from strom.storage import clock, files
from strom.storage.errors import OffsetOutOfRange, StorageError
from strom.storage.log import Log
from strom.storage.log_validator import (
    LogValidator,
    Records,
    RecordValidationError,
    TimestampPolicy,
    validate_produce_records,
)

from .partition import Partition, now_ms
from .purgatory import (
    DataWaiters,
    DelayedFetch,
    DelayedProduce,
    PendingAppend,
    Purgatory,
)
from .selector import preferred_read_replica
from .txn_verification import (
    Answers,
    TransactionVerifier,
    ask_coordinator,
    verify_transaction,
)

if TYPE_CHECKING:
    from strom.storage.log_manager import LogManager

    from .fetcher import ReplicaFetcher

log = logging.getLogger("strom.replica")

TopicPartition = tuple[str, int]
VALID_ACKS = (0, 1, -1)
CONSUMER_ID = -1
DEBUGGING_CONSUMER_ID = -2
# With more descriptors open than the file cache holds, regions up to this size are sent as a
# copy: a fetch of a thousand partitions must not hold a thousand descriptors until it is sent.
_COPY_UNDER_PRESSURE = 1 << 20
# Errors Kafka's ReplicaManager answers without the partition's log start offset.
_WITHOUT_LOG_START = {
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
}


class TopicView(Protocol):
    @property
    def partitions(self) -> int: ...


class ReplicaMetadata(Protocol):
    """What the replica manager reads of the metadata cache."""

    @property
    def is_cluster(self) -> bool: ...

    def topic(self, name: str) -> Any: ...  # TopicInfo | None (with .partitions)

    def topic_setting(self, topic: str, key: str) -> Any: ...

    def live_brokers(self, listener_name: str | None = None) -> list[tuple[int, str, int, str | None]]: ...


class BrokerSettings(Protocol):
    """The broker config, read by key (`BrokerConfig`)."""

    def __getitem__(self, key: str) -> Any: ...


class LeaderReplicationQuota(Protocol):
    """The leader's replication throttle (`ReplicationQuota`)."""

    def active(self) -> bool: ...

    def is_throttled(self, topic: str, partition: int) -> bool: ...

    def exceeded(self, now: float) -> bool: ...

    def delay(self, now: float) -> float: ...


class FetchPartition(Protocol):
    """One partition of a Fetch request (the decoded FetchPartition)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int


@dataclass
class ProduceResult:
    """One partition's answer to a produce (Kafka's ProduceResponse.PartitionResponse)."""

    error_code: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[dict] = field(default_factory=list)
    error_message: str | None = None


@dataclass(frozen=True)
class FetchParams:
    """What a Fetch asks, besides its partitions (Kafka's FetchParams). ``version`` is the Fetch
    version: which request fields exist (leader epochs v9+, log start v5+, last fetched epoch v12+)
    and how records are answered (down-converted below v4)."""

    version: int
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int  # the response's byte budget (Fetch v3+; unlimited before)
    isolation_level: int = 0
    client_rack: str | None = None

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def read_committed(self) -> bool:
        return self.version >= 4 and self.isolation_level == 1 and self.replica_id < 0

    @property
    def fetch_only_leader(self) -> bool:
        """Kafka's FetchParams.fetchOnlyLeader: a consumer's fetch from v11 (KIP-392, it says its
        rack) and the debugging consumer's (-2) may be served by a follower."""
        return not (self.replica_id == DEBUGGING_CONSUMER_ID or (self.replica_id < 0 and self.version >= 11))


def fetch_partition_error(
    index: int, code: ErrorCode, hw: int = -1, start: int = -1, aborted: list | None = None
) -> dict:
    """A partition answered with an error, as Kafka answers it: no offsets (-1), and aborted
    transactions null when the log was asked (Kafka's read result) or an empty list when the
    partition was refused before (its FetchResponse.partitionResponse)."""
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": start,
        "aborted_transactions": aborted,
        "records": b"",
    }


def _end_offset(region: files.FileRegion) -> int:
    """The offset after the last batch of a fetched region, from batch headers (offset, length) only."""
    fd, position, stop, end = region.fileno(), region.position, region.position + region.size, 0
    while position + 12 <= stop:
        head = os.pread(fd, 12, position)
        if len(head) < 12:
            break
        base, length = struct.unpack(">qi", head)
        if length <= 0 or position + 12 + length > stop:
            break
        tail = os.pread(fd, 4, position + 23)  # last offset delta (batch header bytes 23-27)
        if len(tail) < 4:
            break
        end = base + struct.unpack(">i", tail)[0] + 1
        position += 12 + length
    return end


def diverging_epoch(plog: Log, req: FetchPartition, version: int) -> tuple[int, int] | None:
    """For a follower (v12+): (epoch, end offset) where its log diverges from ours, if it does."""
    if version < 12 or req.last_fetched_epoch < 0:
        return None
    epoch, end_offset = plog.end_offset_for_epoch(req.last_fetched_epoch)
    if epoch == -1:  # nothing known about that epoch here: the offset check decides (out of range)
        return None
    if epoch < req.last_fetched_epoch or end_offset < req.fetch_offset:
        return epoch, end_offset
    return None


class ReplicaManager:
    def __init__(self, node_id: int, config: BrokerSettings | None = None, metadata: ReplicaMetadata | None = None):
        self.node_id = node_id
        self.config = config
        self.metadata = metadata
        self.logs: LogManager | None = None  # set when the broker's storage opens
        self.partitions: dict[TopicPartition, Partition] = {}
        self._waiters = DataWaiters()
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("Produce", self._waiters)
        self.fetch_purgatory: Purgatory[DelayedFetch[Any]] = Purgatory("Fetch", self._waiters)
        # a leader's follower caught up: may rejoin the ISR (the cluster member writes it to ZooKeeper)
        self.isr_expansion_listener: Callable[[Partition], None] | None = None
        self.fetcher: ReplicaFetcher | None = None  # started by a cluster member
        # per partition: (topic configs, log config) it was built for, its LogValidator, min ISR
        self._validators: dict[TopicPartition, tuple[object, object, LogValidator, int]] = {}

    # ----------------------------------------------------------------- hosted partitions
    def add(
        self,
        topic: str,
        index: int,
        partition_log: Log,
        *,
        leader: int | None = None,
        leader_epoch: int | None = None,
        replicas: list[int] | None = None,
        isr: list[int] | None = None,
    ) -> Partition:
        """Host a partition. With no leadership given: standalone, this broker leads alone."""
        if leader_epoch is None:
            epoch = partition_log.latest_epoch()
            leader_epoch = epoch if epoch is not None and epoch >= 0 else 0
        partition = Partition(
            topic,
            index,
            partition_log,
            self.node_id,
            leader if leader is not None else self.node_id,
            leader_epoch,
            replicas or [self.node_id],
            isr or [self.node_id],
        )
        partition.maybe_advance_high_watermark()
        key = (topic, index)
        partition.on_leadership_change = lambda: self.notify_data([key])
        previous = self.partitions.get(key)
        self.partitions[key] = partition
        if previous is not None:  # replaced: whoever waits on the old replica must learn it
            previous.removed = True
            self.notify_data([key])
        return partition

    def remove(self, topic: str, index: int) -> Partition | None:
        partition = self.partitions.pop((topic, index), None)
        self._validators.pop((topic, index), None)
        if partition is not None:
            partition.removed = True
            self.notify_data([(topic, index)])
        return partition

    def partition(self, topic: str, index: int) -> Partition | None:
        """The replica of ``topic``-``index`` hosted here, leader or follower."""
        return self.partitions.get((topic, index))

    def partition_or_error(
        self, topic: str, index: int, current_leader_epoch: int = -1, require_leader: bool = True
    ) -> tuple[Partition | None, ErrorCode]:
        """(partition, NONE) when this broker leads ``topic``-``index`` in the epoch the client
        knows, else (partition or None, the error Kafka answers with; Kafka's getPartitionOrError).
        With ``require_leader`` false, a follower's replica will do too (a consumer's fetch from a
        follower, KIP-392)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            metadata = self.metadata
            info = metadata.topic(topic) if metadata is not None else None
            known = info is not None and index < info.partitions
            if (
                known
                and metadata is not None
                and not metadata.is_cluster
                and self.logs is not None
                and self.logs.offline_dirs
            ):
                return None, ErrorCode.KAFKA_STORAGE_ERROR  # its log is in a dir that failed at start
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if partition.log.offline is not None:  # its log dir failed
            return partition, ErrorCode.KAFKA_STORAGE_ERROR
        if require_leader and not partition.is_leader:
            return partition, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch != -1 and current_leader_epoch != partition.leader_epoch:
            return partition, (
                ErrorCode.FENCED_LEADER_EPOCH
                if current_leader_epoch < partition.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
        return partition, ErrorCode.NONE

    # ----------------------------------------------------------------- the purgatories' wake-ups
    def notify_data(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Something changed: wake the delayed operations it concerns (see `DataWaiters`). With
        `partitions`, only data or the high watermark of those changed; without, anything may have."""
        self._waiters.notify(partitions)

    async def wait_for_data(self, partitions: Collection[TopicPartition] | None = None) -> None:
        """Park until a `notify_data` that concerns `partitions` (any, if None); callers bound it
        with a deadline and look again at what they wait for when woken."""
        await self._waiters.wait(partitions)

    # ----------------------------------------------------------------- leaders' follower bookkeeping
    def follower_fetched(
        self, partition: Partition, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched from `fetch_offset`: it has everything below it. The high watermark
        may move (waking the produces and long polls waiting for it); a follower that caught up
        may rejoin the ISR."""
        partition.record_follower_fetch(replica, fetch_offset, log_start_offset)
        if partition.maybe_advance_high_watermark():
            self.notify_data([(partition.topic, partition.index)])
        if self.isr_expansion_listener is not None:
            self.isr_expansion_listener(partition)

    # ----------------------------------------------------------------- produce
    def _setting(self, topic: str, key: str) -> Any:
        assert self.metadata is not None, "a ReplicaManager that appends needs the metadata cache"
        return self.metadata.topic_setting(topic, key)

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas (1 where no metadata or topic is known)."""
        if self.metadata is None:
            return 1
        try:
            return int(self._setting(topic, "min.insync.replicas"))
        except KeyError:
            return 1

    def _validator(self, topic: str, index: int, partition: Partition) -> tuple[LogValidator, int]:
        """The partition's LogValidator and its topic's min.insync.replicas, built once per
        partition and again only when the topic's configs or the log's config change (a produce
        asks on every request)."""
        info = self.metadata.topic(topic) if self.metadata is not None else None
        configs = getattr(info, "configs", None)
        cached = self._validators.get((topic, index))
        if cached is not None and cached[0] is configs and cached[1] is partition.log.config:
            return cached[2], cached[3]
        validator = LogValidator(
            topic,
            index,
            partition.log.config,
            TimestampPolicy(
                self._setting(topic, "message.timestamp.type"),
                self._setting(topic, "message.timestamp.before.max.ms"),
                self._setting(topic, "message.timestamp.after.max.ms"),
            ),
        )
        min_isr = self._setting(topic, "min.insync.replicas")
        self._validators[(topic, index)] = (configs, partition.log.config, validator, min_isr)
        return validator, min_isr

    async def append_records(
        self,
        entries: Sequence[tuple[str, int, Records | None]],
        *,
        version: int,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
        txn: TransactionVerifier | None = None,
    ) -> list[ProduceResult]:
        """Append a client's records to the partitions led here (Kafka's appendRecords), one
        result per entry in order. ``version`` is the Produce version (which record formats and
        transaction verification apply); ``txn`` the transaction coordinator that verifies
        transactional batches. With acks=-1 the answer waits (at most ``timeout_ms``) until the
        in-sync replicas have every append (see `DelayedProduce`)."""
        if acks not in VALID_ACKS:
            return [ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS) for _ in entries]
        answers: Answers = {}
        if transactional_id:
            answers = await ask_coordinator(
                txn, transactional_id, version, [(self.partitions.get((t, i)), r) for t, i, r in entries]
            )
        results: list[ProduceResult] = []
        waiting: list[tuple[ProduceResult, PendingAppend, int]] = []
        appended: list[TopicPartition] = []
        for topic, index, records in entries:
            try:
                result, pending, min_isr = self._append_to_leader(
                    topic, index, records, version, acks, transactional_id, txn, answers
                )
                appended.append((topic, index))
                if pending is not None:
                    waiting.append((result, pending, min_isr))
            except RecordValidationError as exc:
                log.debug(
                    "produce rejected topic=%s partition=%d error=%s: %s", topic, index, exc.code.name, exc.message
                )
                result = ProduceResult(
                    exc.code,
                    log_start_offset=exc.log_start_offset,
                    record_errors=exc.record_errors,
                    error_message=exc.message,
                )
            results.append(result)
        if appended:
            self.notify_data(appended)
        if waiting and acks == -1:
            delayed = DelayedProduce([w[1] for w in waiting], [w[2] for w in waiting])
            codes = await delayed.complete(self.produce_purgatory, timeout_ms / 1000)
            for (result, pending, _), code in zip(waiting, codes, strict=False):
                if code == ErrorCode.NONE:
                    continue
                result.error_code, result.base_offset = code, -1
                if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    log.info(
                        "acks=all produce to %s-%d answered NOT_LEADER_OR_FOLLOWER: leadership of epoch %d "
                        "lost before offset %d was replicated",
                        *pending.key,
                        pending.leader_epoch,
                        pending.required,
                    )
                    result.log_start_offset = -1
        return results

    def _append_to_leader(
        self,
        topic: str,
        index: int,
        records: Records | None,
        version: int,
        acks: int,
        transactional_id: str | None,
        txn: TransactionVerifier | None,
        answers: Answers,
    ) -> tuple[ProduceResult, PendingAppend | None, int]:
        records = validate_produce_records(records, version)
        partition, code = self.partition_or_error(topic, index)
        if code != ErrorCode.NONE or partition is None:
            raise RecordValidationError(code)
        validator, min_isr = self._validator(topic, index, partition)
        if acks != -1:
            min_isr = 1
        if len(partition.isr) < min_isr:
            raise RecordValidationError(
                ErrorCode.NOT_ENOUGH_REPLICAS, f"{len(partition.isr)} in-sync replicas, min.insync.replicas={min_isr}"
            )
        try:
            validated = validator.validate(records, version, clock.wall_ms())
            guard = None
            if validated.transactional:
                guard = verify_transaction(txn, transactional_id, partition, validated.headers, version, answers)
            info = partition.append(validated.records, validated.headers, verification_guard=guard)
        except StorageError as exc:
            code = ErrorCode[exc.error_code_name]
            # as Kafka: a sequence or epoch refused by the log's producer state answers with the log start
            raise self._at_log(
                RecordValidationError(code, str(exc), at_log=code not in _WITHOUT_LOG_START), partition
            ) from None
        except RecordValidationError as exc:
            raise self._at_log(exc, partition) from None
        result = ProduceResult(
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time,
            log_start_offset=info.log_start_offset,
        )
        # the leader epoch of the append, taken before anything awaits (see PendingAppend)
        pending = PendingAppend.of(partition, info.last_offset + 1) if acks == -1 else None
        return result, pending, min_isr

    @staticmethod
    def _at_log(exc: RecordValidationError, partition: Partition) -> RecordValidationError:
        if exc.at_log:
            exc.log_start_offset = partition.log.log_start_offset
        return exc

    # ----------------------------------------------------------------- fetch
    async def fetch_messages(
        self, params: FetchParams, fetch_infos: Sequence[tuple[str, FetchPartition]], quota: LeaderReplicationQuota
    ) -> list[dict]:
        """Read ``fetch_infos`` (topic name, requested partition) for a consumer or a follower
        (Kafka's fetchMessages); one Fetch response partition per entry, in order. Until
        ``params.min_bytes`` are found, a read fails or ``params.max_wait_ms`` passes, the fetch
        waits in the fetch purgatory, read again whenever one of its partitions changes. ``quota``
        is the leader's replication throttle (followers' fetches of throttled partitions)."""
        delayed: DelayedFetch[list[dict]] = DelayedFetch(
            lambda: self._read_all(params, fetch_infos, quota, trio.current_time()),
            params.min_bytes,
            trio.current_time() + max(params.max_wait_ms, 0) / 1000,
        )
        if params.is_from_follower and quota.active():
            # data held back by the replication throttle is due again once the rate falls
            delayed.wake_by = lambda t: t + max(quota.delay(t), 0.005)
        return await delayed.complete(self.fetch_purgatory)

    def _read_all(
        self,
        params: FetchParams,
        fetch_infos: Sequence[tuple[str, FetchPartition]],
        quota: LeaderReplicationQuota,
        now: float,
    ) -> tuple[list[dict], int, bool, list[TopicPartition]]:
        """One pass over every partition: (results, bytes found, whether to answer now, the
        partitions read, whose changes a long poll waits for)."""
        budget = params.max_bytes
        total = 0
        answer_now = False
        out = []
        read: list[TopicPartition] = []
        for name, req in fetch_infos:
            result, size = self.read_partition(params, name, req, budget - total, total == 0, quota, now)
            # an error or a preferred read replica is answered at once, as Kafka does
            answer_now = (
                answer_now or result["error_code"] != ErrorCode.NONE or result.get("preferred_read_replica", -1) >= 0
            )
            read.append((name, req.partition))
            total += size
            out.append(result)
        return out, total, answer_now, read

    def read_partition(
        self,
        params: FetchParams,
        name: str,
        req: FetchPartition,
        budget: int,
        first: bool,
        quota: LeaderReplicationQuota,
        now: float,
    ) -> tuple[dict, int]:
        """One partition's Fetch response and its size (Kafka's readFromLog for one partition)."""
        version, replica = params.version, params.replica_id
        partition, code = self.partition_or_error(
            name,
            req.partition,
            req.current_leader_epoch if version >= 9 else -1,
            require_leader=params.fetch_only_leader,
        )
        if code != ErrorCode.NONE or partition is None:
            return fetch_partition_error(
                req.partition, code, aborted=[] if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None
            ), 0
        plog = partition.log
        read_committed = params.read_committed
        result: dict = {
            "partition_index": req.partition,
            "error_code": ErrorCode.NONE,
            "log_start_offset": plog.log_start_offset,
            "aborted_transactions": [] if read_committed else None,
            "preferred_read_replica": -1,
            "records": b"",
        }
        max_offset: int | None
        if replica >= 0:
            diverging = diverging_epoch(plog, req, version)
            if diverging is None:
                self.follower_fetched(
                    partition, replica, req.fetch_offset, req.log_start_offset if version >= 5 else -1
                )
            result.update(high_watermark=partition.high_watermark, last_stable_offset=plog.last_stable_offset)
            if diverging is not None:
                result["diverging_epoch"] = {"epoch": diverging[0], "end_offset": diverging[1]}
                return result, 0
            if replica not in partition.isr and quota.is_throttled(name, req.partition) and quota.exceeded(now):
                return result, 0  # a throttled replica out of sync: nothing this time (Kafka's leader throttle)
            max_offset = None
        else:
            # a leader or (KIP-392) a follower: up to its own high watermark (a follower's is the one
            # its leader last told it) or last stable offset, as Kafka's replicas answer consumers
            hw = partition.high_watermark
            lso = plog.last_stable_offset
            result.update(high_watermark=hw, last_stable_offset=lso)
            if (
                version >= 11
                and replica == CONSUMER_ID
                and partition.is_leader
                and self.config is not None
                and self.metadata is not None
            ):
                preferred = preferred_read_replica(
                    self.config, self.metadata, partition, params.client_rack, req.fetch_offset, now_ms()
                )
                if preferred >= 0:  # as Kafka: no read here, the client fetches from that replica
                    log.debug(
                        "%s-%d: preferred read replica %d for a consumer in rack %r",
                        name,
                        req.partition,
                        preferred,
                        params.client_rack,
                    )
                    result["preferred_read_replica"] = preferred
                    return result, 0
            max_offset = lso if read_committed else hw
        max_bytes = min(req.partition_max_bytes, budget)
        if max_bytes <= 0 and not first:
            return result, 0
        try:
            data = plog.read(
                req.fetch_offset, max(max_bytes, 0), max_offset=max_offset, min_one_message=first and version >= 3
            )
        except OffsetOutOfRange:
            if replica >= 0:  # a Strom follower reads the leader's log start and high watermark here
                result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                return result, 0
            return fetch_partition_error(req.partition, ErrorCode.OFFSET_OUT_OF_RANGE), 0
        except StorageError as exc:  # unreadable segment, no descriptor left: logged by storage
            return fetch_partition_error(req.partition, ErrorCode[exc.error_code_name]), 0
        region = data.records
        if region is None or region.size == 0:
            return result, 0
        if read_committed:
            aborted = plog.aborted_transactions(req.fetch_offset, max_offset)
            if any(a.first_offset >= req.fetch_offset for a in aborted):
                # as Kafka: only transactions that start within the data returned, not up to the LSO
                end = _end_offset(region)
                aborted = [a for a in aborted if a.first_offset < end]
            result["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted
            ]
        if region.size <= _COPY_UNDER_PRESSURE and files.under_pressure():
            result["records"] = region.read()  # do not hold one more descriptor until it is sent
            return result, len(result["records"])
        if version < 4:
            converted = downconvert(region.read(), 0 if version < 2 else 1, min_offset=req.fetch_offset)
            result["records"] = converted
            return result, len(converted)
        result["records"] = region
        return result, region.size
