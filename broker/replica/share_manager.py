"""Share partitions and share sessions on a broker (Kafka's ``SharePartitionManager`` and
``ShareSessionCache``): what ShareFetch and ShareAcknowledge use.

A share partition (:class:`~.share_partition.SharePartition`) is made on the leader of its topic
partition the first time a member of its group fetches it, loaded from the persister. A share
session belongs to one member of one group: ShareFetch with epoch 0 opens it (releasing whatever
the member still held), each later request names the next epoch (1, 2, ... wrapping to 1) and
may add partitions or forget them; epoch -1 closes it (after its acknowledgements) and releases
what the member still holds. ShareAcknowledge never opens a session.

Reading: records are read from the log at the share partition's next fetch offset, up to the high
watermark (read_uncommitted) or the last stable offset (read_committed, which also archives the
batches of aborted transactions), and acquired there. The batches holding acquired records are
answered whole, with the acquired ranges beside them, as Kafka does. A fetch that found nothing
waits, up to its max wait, for new data or for records to become available again (released,
lock expired): both wake it through the replica manager's data waiters.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio

from strom.broker.coordinator.group.group_configs import GroupConfigs, parse_duration_ms
from strom.broker.coordinator.share.persister import (
    UNINITIALIZED_START_OFFSET,
    Persister,
    PersisterError,
    SharePartitionKey,
)
from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.share_partition import AckBatch, AcquiredRange, LogBatch, SharePartition, ShareSettings
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_batches
from strom.storage import clock
from strom.storage.errors import OffsetOutOfRange, StorageError

log = logging.getLogger("strom.share")

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
ShareTopicPartition = tuple[bytes, int]  # topic id, partition


def next_epoch(epoch: int) -> int:
    """Kafka's ShareRequestMetadata.nextEpoch: 1, 2, ... Integer.MAX_VALUE, then 1 again."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[ShareTopicPartition, None] = field(default_factory=dict)  # ordered set
    created: float = 0.0
    last_used: float = 0.0


class ShareSessionError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message  # Kafka answers the session errors without one


@dataclass
class PartitionRead:
    """One share partition's answer to a fetch: an error, or the batches and acquired ranges."""

    error: ErrorCode = ErrorCode.NONE
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)


SettingsFor = Callable[[str], ShareSettings]  # group id -> its share settings
ACK_TYPE_NAMES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}


@dataclass
class ShareMetrics:
    """Kafka's share-group broker metrics (KIP-932, KIP-1103), counted as they happen."""

    fetch_requests: Counter[str] = field(default_factory=Counter)  # per topic (TotalShareFetchRequestsPerSec)
    failed_fetch_requests: Counter[str] = field(default_factory=Counter)
    acknowledgement_requests: Counter[str] = field(default_factory=Counter)  # per topic
    failed_acknowledgement_requests: Counter[str] = field(default_factory=Counter)
    record_acknowledgements: Counter[str] = field(
        default_factory=Counter
    )  # per ack type (RecordAcknowledgementsPerSec)
    lock_timeouts: Counter[tuple[str, str, int]] = field(default_factory=Counter)  # (group, topic, partition)


def settings_from(configs: GroupConfigs) -> SettingsFor:
    """A group's share settings from its group configs (the broker's defaults where it has none)."""

    def settings_for(group_id: str) -> ShareSettings:
        return ShareSettings(
            record_lock_duration_ms=int(configs.get(group_id, "share.record.lock.duration.ms")),
            delivery_count_limit=int(configs.get(group_id, "share.delivery.count.limit")),
            max_record_locks=int(configs.get(group_id, "share.partition.max.record.locks")),
            read_committed=configs.get(group_id, "share.isolation.level") == "read_committed",
            auto_offset_reset=str(configs.get(group_id, "share.auto.offset.reset")),
        )

    return settings_for


class SharePartitionManager:
    """Every share partition and share session of this broker."""

    def __init__(
        self, replicas: ReplicaManager, persister: Persister, settings_for: SettingsFor, max_sessions: int = 2000
    ) -> None:
        self.replicas = replicas
        self.persister = persister
        self.settings_for = settings_for
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}  # (group, topic name, partition)
        self._locks: dict[tuple[str, str, int], trio.Lock] = {}
        self._timers_changed = trio.Event()
        self._released: list[tuple[str, str]] = []  # members gone whose records the timer task releases
        self.metrics = ShareMetrics()

    # ------------------------------------------------------------------ sessions
    def open_session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[ShareTopicPartition],
        forgotten: Iterable[ShareTopicPartition],
    ) -> ShareSession | None:
        """The session a ShareFetch names (None for the final epoch), after adding and forgetting
        partitions; raises ShareSessionError with Kafka's code."""
        key = (group_id, member_id)
        now = trio.current_time()
        if epoch == FINAL_EPOCH:
            if key not in self.sessions:
                raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
            return None
        if epoch == INITIAL_EPOCH:
            self.sessions.pop(key, None)
            if len(self.sessions) >= self.max_sessions:  # group.share.max.share.sessions
                raise ShareSessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = self.sessions[key] = ShareSession(group_id, member_id, next_epoch(0), created=now)
        else:
            session = self.check_session(group_id, member_id, epoch)
            session.epoch = next_epoch(epoch)
        for tp in added:
            session.partitions[tp] = None
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.last_used = now
        return session

    def check_session(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch != session.epoch:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        return session

    def acknowledge_session(self, group_id: str, member_id: str, epoch: int) -> None:
        """ShareAcknowledge's session check: never opens one; the next epoch is expected after it."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        if epoch == FINAL_EPOCH:
            if (group_id, member_id) not in self.sessions:
                raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
            return
        session = self.check_session(group_id, member_id, epoch)
        session.epoch = next_epoch(epoch)
        session.last_used = trio.current_time()

    async def close_session(self, group_id: str, member_id: str) -> None:
        """Epoch -1, or a new session (epoch 0): the member's acquired records are released."""
        self.sessions.pop((group_id, member_id), None)
        await self.release_member(group_id, member_id)

    async def release_member(self, group_id: str, member_id: str) -> None:
        for (group, topic, index), sp in list(self.partitions.items()):
            if group == group_id and sp.initialized:
                async with self._lock((group, topic, index)):
                    await sp.release_member(member_id)
                self.replicas.notify_data([(topic, index)])

    def member_gone(self, group_id: str, member_id: str) -> None:
        """The group coordinator removed a member (left, session timed out): close its session."""
        if (group_id, member_id) in self.sessions or any(g == group_id for g, _, _ in self.partitions):
            self.sessions.pop((group_id, member_id), None)
            self._released.append((group_id, member_id))
            self._timers_changed.set()

    # ------------------------------------------------------------------ share partitions
    def _lock(self, key: tuple[str, str, int]) -> trio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        return lock

    async def share_partition(
        self, group_id: str, topic: str, topic_id: bytes, index: int
    ) -> tuple[SharePartition | None, ErrorCode]:
        """The share partition, loaded, when this broker leads ``topic``-``index``."""
        partition, code = self.replicas.partition_or_error(topic, index)
        if code != ErrorCode.NONE or partition is None:
            return None, code
        key = (group_id, topic, index)
        sp = self.partitions.get(key)
        if sp is not None and sp.leader_epoch != partition.leader_epoch:
            sp = None  # leadership moved away and back: load the state again
        if sp is None:
            sp = SharePartition(
                SharePartitionKey(group_id, topic_id, index),
                self.persister,
                trio.current_time,
                self.settings_for(group_id),
                leader_epoch=partition.leader_epoch,
            )
            self.partitions[key] = sp
        if not sp.initialized:
            plog = partition.log
            settings = sp.settings

            def reset_offset(policy: str) -> int:
                if policy == "earliest":
                    return plog.log_start_offset
                if policy.startswith("by_duration:"):
                    ms = parse_duration_ms(policy[len("by_duration:") :]) or 0
                    found = plog.fetch_offset_by_timestamp(clock.wall_ms() - ms)
                    return found.offset if found is not None else partition.high_watermark
                return plog.last_stable_offset if settings.read_committed else partition.high_watermark

            async with self._lock(key):
                try:
                    await sp.initialize(reset_offset)
                except PersisterError as exc:
                    log.warning("%s: reading share state failed: %s", sp.key, exc)
                    return None, exc.code
            self._timers_changed.set()
        return sp, ErrorCode.NONE

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        topic_id: bytes,
        index: int,
        batches: list[AckBatch],
        renew: bool,
    ) -> tuple[ErrorCode, str | None]:
        """The outcome of acknowledging ``batches``: the error code and Kafka's message, if any."""
        sp, code = await self.share_partition(group_id, topic, topic_id, index)
        if sp is None:
            return code, None
        async with self._lock((group_id, topic, index)):
            code = await sp.acknowledge(member_id, batches, renew_allowed=renew)
            message = sp.ack_error_message if code != ErrorCode.NONE else None
        if code == ErrorCode.NONE:
            for batch in batches:
                size = batch.last_offset - batch.first_offset + 1
                kinds = Counter(batch.types) if len(batch.types) > 1 else Counter({batch.types[0]: size})
                for kind, n in kinds.items():
                    if kind in ACK_TYPE_NAMES:
                        self.metrics.record_acknowledgements[ACK_TYPE_NAMES[kind]] += n
        self.replicas.notify_data([(topic, index)])  # released records may be fetched again
        self._timers_changed.set()
        return code, message

    def read(
        self, group_id: str, member_id: str, topic: str, sp: SharePartition, max_records: int, max_bytes: int
    ) -> PartitionRead:
        """Acquire what the log holds at ``sp``'s next fetch offset for ``member_id``."""
        partition, code = self.replicas.partition_or_error(topic, sp.key.partition)
        if code != ErrorCode.NONE or partition is None:
            return PartitionRead(code)
        plog = partition.log
        sp.move_start_to(plog.log_start_offset)
        if max_records <= 0 or not sp.can_acquire():
            return PartitionRead()
        read_committed = sp.settings.read_committed
        upper = plog.last_stable_offset if read_committed else partition.high_watermark
        offset = sp.next_fetch_offset()
        if offset >= upper:
            return PartitionRead()
        try:
            data = plog.read(offset, max(max_bytes, 1), max_offset=upper, min_one_message=True)
        except OffsetOutOfRange:
            sp.move_start_to(plog.log_start_offset)
            return PartitionRead()
        except StorageError as exc:
            return PartitionRead(ErrorCode[exc.error_code_name])
        region = data.records
        if region is None or region.size == 0:
            return PartitionRead()
        raw = region.read()
        aborted = plog.aborted_transactions(offset, upper) if read_committed else []
        batches: list[tuple[int, int, LogBatch]] = []  # position, end, facts
        for pos, header in iter_batches(raw, partial_tail=True):
            skip = header.is_control or (
                read_committed
                and header.is_transactional
                and any(
                    a.producer_id == header.producer_id and a.first_offset <= header.base_offset <= a.last_offset
                    for a in aborted
                )
            )
            batches.append((pos, pos + header.size, LogBatch(header.base_offset, header.last_offset, skip)))
        acquired = sp.acquire(member_id, [b for _, _, b in batches], max_records)
        if not acquired:
            self._timers_changed.set()
            return PartitionRead()
        keep = bytearray()
        for pos, end, facts in batches:
            if any(r.first_offset <= facts.last_offset and r.last_offset >= facts.first_offset for r in acquired):
                keep += raw[pos:end]
        self._timers_changed.set()
        return PartitionRead(records=bytes(keep), acquired=acquired)

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        """Expire acquisition locks and release the records of members gone, until cancelled."""
        while True:
            self._timers_changed = trio.Event()
            released, self._released = self._released, []
            for group_id, member_id in released:
                await self.release_member(group_id, member_id)
            now = trio.current_time()
            for (group, topic, index), sp in list(self.partitions.items()):
                deadline = sp.next_deadline()
                if deadline is not None and deadline <= now:
                    async with self._lock((group, topic, index)):
                        expired = await sp.expire_locks()
                    self.metrics.lock_timeouts[(group, topic, index)] += expired
                    if expired:
                        self.replicas.notify_data([(topic, index)])
            deadline = min(
                (d for d in (sp.next_deadline() for sp in self.partitions.values()) if d is not None),
                default=float("inf"),
            )
            with trio.move_on_at(deadline):
                await self._timers_changed.wait()

    async def initialize_group_partitions(self, group_id: str, partitions: Iterable[ShareTopicPartition]) -> None:
        """The group coordinator assigns these share partitions for the first time: their state is
        initialized (start offset -1: the leader starts where share.auto.offset.reset says), unless
        the persister already has one (a group whose members come back after a restart)."""
        for topic_id, index in partitions:
            key = SharePartitionKey(group_id, topic_id, index)
            summary = await self.persister.read_summary(key, -1)
            if summary.start_offset == UNINITIALIZED_START_OFFSET:
                await self.persister.initialize_state(key, summary.state_epoch, UNINITIALIZED_START_OFFSET)

    async def delete_group_state(self, group_id: str, partitions: Iterable[ShareTopicPartition]) -> None:
        """A share group was deleted: its share partitions and their persisted state go."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
            self._locks.pop(key, None)
        for session_key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[session_key]
        for topic_id, index in partitions:
            await self.persister.delete_state(SharePartitionKey(group_id, topic_id, index))
