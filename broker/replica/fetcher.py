"""The replica fetcher: followers copy their leaders' logs (Kafka's ReplicaFetcherManager and
ReplicaFetcherThread / AbstractFetcherThread).

One task per leader broker fetches every partition this broker follows from it, with its replica
id, exactly as Kafka's followers do: Fetch v12 in an incremental fetch session (KIP-227), from the
log end offset with the last fetched epoch, so the leader answers a diverging epoch where the logs
part (KIP-320); the follower then truncates (`truncation_offset`) and fetches again. An offset
out of range truncates to the leader's high watermark or, behind its log start, starts the log
anew there. Fetched batches are appended with their offsets and epochs; the follower's high
watermark and log start offset follow the leader's. A throttled partition out of sync waits while
the follower replication quota is exceeded (`follower.replication.throttled.replicas`).

The fetcher talks to other brokers through the inter-broker client (`strom.broker.cluster.client`)
and learns of metadata changes (leaders, brokers) from the cluster member, which starts it and
tells it which leaders to follow; the `ReplicaManager` holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import validate_batches
from strom.protocol.records.errors import RecordsError
from strom.protocol.schema import ApiKey
from strom.storage.errors import StorageError
from strom.storage.log import Log

from ..cluster.client import BrokerClient, BrokerUnavailable
from ..fetch_session import FetchSessionHandler

if TYPE_CHECKING:
    from .manager import BrokerSettings, ReplicaManager
    from .partition import Partition

log = logging.getLogger("strom.replica.fetcher")

FETCH_VERSION = 12
FETCH_WAIT_MS = 500
FETCH_BACKOFF_S = 1.0


class InterBrokerClient(Protocol):
    """What the fetcher asks of a connection to a leader (`BrokerClient`)."""

    async def request(self, api_key: int, version: int, body: dict, *, timeout_s: float | None = None) -> Any: ...


class FollowerReplicationQuota(Protocol):
    """The follower's replication throttle (`ReplicationQuota`)."""

    def active(self) -> bool: ...

    def is_throttled(self, topic: str, partition: int) -> bool: ...

    def exceeded(self, now: float) -> bool: ...

    def delay(self, now: float) -> float: ...

    def record(self, size: int, now: float) -> None: ...


class ReplicaFetcher:
    """Fetches from each leader the partitions this broker follows of it, until cancelled.

    ``endpoint_of(leader)`` is where to reach a leader broker (None while it is unknown);
    ``security`` the inter-broker TLS/SASL settings of the connections."""

    def __init__(
        self,
        replicas: ReplicaManager,
        config: BrokerSettings,
        quota: FollowerReplicationQuota,
        endpoint_of: Callable[[int], tuple[str, int] | None],
        security: Any = None,
        connect: Any = None,
    ):
        self.connect = connect  # cluster.client.Connector: how to reach a leader (None: TCP)
        self.replicas = replicas
        self.node_id = replicas.node_id
        self.config = config
        self.quota = quota
        self.endpoint_of = endpoint_of
        self.security = security
        self._fetchers: dict[int, trio.CancelScope] = {}
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The fetcher tasks' home: runs until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def metadata_changed(self) -> None:
        """Leaders, brokers or endpoints may have changed: every fetcher task looks again."""
        self._changed.set()
        self._changed = trio.Event()

    def follow(self, leaders: set[int]) -> None:
        """Fetch from each of ``leaders`` (its task keeps running while it leads nothing here)."""
        for leader in leaders:
            if leader not in self._fetchers and self._nursery is not None:
                scope = trio.CancelScope()
                self._fetchers[leader] = scope
                self._nursery.start_soon(self._fetch_loop, leader, scope)

    def leaders(self) -> set[int]:
        """The leaders fetched from now."""
        return set(self._fetchers)

    def followed(self, leader: int) -> list[Partition]:
        return [
            p
            for p in self.replicas.partitions.values()
            if p.leader_id == leader and not p.is_leader and p.log.offline is None
        ]

    async def _fetch_loop(self, leader: int, scope: trio.CancelScope) -> None:
        client: BrokerClient | None = None
        session = FetchSessionHandler()  # an incremental fetch session with this leader (KIP-227)
        with scope:
            try:
                while True:
                    partitions = self.followed(leader)
                    endpoint = self.endpoint_of(leader)
                    if not partitions or endpoint is None:
                        await self._changed.wait()
                        continue
                    if client is None or (client.host, client.port) != endpoint:
                        if client is not None:
                            await client.close()
                        client = BrokerClient(
                            endpoint[0],
                            endpoint[1],
                            f"strom-replica-{self.node_id}",
                            security=self.security,
                            connect=self.connect,
                        )
                        session.reset()
                    try:
                        await self.fetch_once(client, partitions, session)
                    except BrokerUnavailable as exc:
                        session.reset()
                        log.debug("fetching from broker %d failed: %s", leader, exc)
                        with trio.move_on_after(FETCH_BACKOFF_S):
                            await self._changed.wait()
            finally:
                self._fetchers.pop(leader, None)
                if client is not None:
                    with trio.CancelScope(shield=True):
                        await client.close()

    async def fetch_once(
        self, client: InterBrokerClient, partitions: list[Partition], session: FetchSessionHandler | None = None
    ) -> None:
        """One Fetch to a leader for ``partitions`` and its answer applied (Kafka's processFetchRequest)."""
        wanted: dict[tuple[str, int], dict] = {}
        quota = self.quota
        throttling = quota.active()
        now = trio.current_time()
        held = (
            [
                p
                for p in partitions
                if not p.fetch_caught_up and quota.is_throttled(p.topic, p.index) and quota.exceeded(now)
            ]
            if throttling
            else []
        )
        if held:  # Kafka's follower throttle: out-of-sync throttled partitions wait for the rate to fall
            partitions = [p for p in partitions if p not in held]
            if not partitions:
                with trio.move_on_after(min(max(quota.delay(now), 0.01), FETCH_BACKOFF_S)):
                    await self._changed.wait()
                return
        # an answer is applied only while the partition is still at the leader epoch and fetch
        # offset it was asked with (Kafka's processFetchRequest): a fetch still in flight to an old
        # leader, or one whose offset the log has left, would otherwise truncate or append where
        # it no longer fits
        for p in partitions:
            epoch = p.log.latest_epoch()
            wanted[(p.topic, p.index)] = {
                "partition": p.index,
                "current_leader_epoch": p.leader_epoch,
                "fetch_offset": p.log.log_end_offset,
                "last_fetched_epoch": epoch if epoch is not None else -1,
                "log_start_offset": p.log.log_start_offset,
                "partition_max_bytes": self.config["replica.fetch.max.bytes"],
            }
        session = session if session is not None else FetchSessionHandler()
        session_id, session_epoch, send, forget = session.build(wanted)
        by_topic: dict[str, list] = {}
        for (topic, _), fields in send.items():
            by_topic.setdefault(topic, []).append(fields)
        forgotten: dict[str, list[int]] = {}
        for topic, index in forget:
            forgotten.setdefault(topic, []).append(index)
        body = {
            "replica_id": self.node_id,
            "max_wait_ms": FETCH_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": self.config["replica.fetch.response.max.bytes"],
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": session_epoch,
            "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten.items()],
        }
        try:
            response = await client.request(ApiKey.FETCH, FETCH_VERSION, body, timeout_s=FETCH_WAIT_MS / 1000 + 30)
        except BaseException:
            session.reset()
            raise
        session.handle(response.error_code, response.session_id)
        if response.error_code != ErrorCode.NONE:
            log.debug("fetch from the leader answered %s", ErrorCode(response.error_code).name)
            return
        progressed: list[tuple[str, int]] = []  # partitions whose data or high watermark changed
        failed_append = False
        throttled_bytes = 0
        for topic in response.responses:
            for data in topic.partitions:
                partition = self.replicas.partition(topic.topic, data.partition_index)
                if partition is None or partition.is_leader:
                    continue
                asked = wanted.get((partition.topic, partition.index))
                if (
                    asked is None
                    or asked["current_leader_epoch"] != partition.leader_epoch
                    or asked["fetch_offset"] != partition.log.log_end_offset
                ):
                    continue  # the partition moved on while the fetch was in flight
                if data.records and quota.is_throttled(
                    partition.topic, partition.index
                ):  # measured as Kafka: rate or not
                    throttled_bytes += len(data.records)
                try:
                    if apply_fetched(partition, data):
                        progressed.append((partition.topic, partition.index))
                except StorageError as exc:
                    # cannot write (full or failed dir, or an append the log refuses): this replica
                    # falls behind and the leader drops it from the ISR; the broker and its other
                    # partitions carry on, and the next fetch waits (found by the simulation: the
                    # leader answers the same data at once, so without a pause this spun)
                    failed_append = True
                    log.debug("follower append to %s-%d failed: %s", partition.topic, partition.index, exc)
                if data.error_code == ErrorCode.NONE:
                    partition.fetch_caught_up = partition.log.log_end_offset >= data.high_watermark
        quota.record(throttled_bytes, trio.current_time())
        if progressed:  # wakes the long polls of consumers fetching these from this follower (KIP-392)
            self.replicas.notify_data(progressed)
        elif failed_append or any(d.error_code for t in response.responses for d in t.partitions):
            with trio.move_on_after(FETCH_BACKOFF_S):
                await self._changed.wait()


def apply_fetched(partition: Partition, data: Any) -> bool:
    """Apply one partition of a leader's Fetch answer to the follower's log: truncate (out of
    range, diverging epoch) or append, then follow the leader's high watermark and log start.
    Whether the log or its high watermark changed."""
    plog = partition.log
    code = data.error_code
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        if plog.log_end_offset < data.log_start_offset:
            plog.truncate_fully_and_start_at(data.log_start_offset)
        else:
            plog.truncate_to(min(plog.log_end_offset, max(data.high_watermark, 0)))
        return True
    if code != ErrorCode.NONE:
        return False
    diverging = data.diverging_epoch
    if diverging.end_offset >= 0 and diverging.epoch >= 0:
        target = truncation_offset(plog, diverging.epoch, diverging.end_offset)
        log.info(
            "truncating %s-%d to %d (diverged from the leader at epoch %d)",
            partition.topic,
            partition.index,
            target,
            diverging.epoch,
        )
        plog.truncate_to(target)
        return True
    appended = False
    records = data.records
    if records:
        try:
            headers = validate_batches(whole_batches(records))
        except RecordsError as exc:
            log.warning("bad data from leader for %s-%d: %s", partition.topic, partition.index, exc)
            return False
        if headers:
            whole = memoryview(records)[: sum(h.size for h in headers)]
            plog.append_as_follower(bytearray(whole), headers)
            appended = True
    hw = min(data.high_watermark, plog.log_end_offset)
    if hw > plog.high_watermark:
        plog.high_watermark = hw
        appended = True
    # the leader's log start offset, but never past this replica's own high watermark (as the
    # leader's own never passes its): what is above it may not be everywhere yet
    if data.log_start_offset > plog.log_start_offset:
        plog.maybe_increment_log_start_offset(min(data.log_start_offset, plog.high_watermark))
    return appended


def truncation_offset(plog: Log, leader_epoch: int, leader_end_offset: int) -> int:
    """Where a follower cuts its log when the leader answers that it diverged: the leader's largest
    epoch at or below the follower's last one is ``leader_epoch`` and ends at ``leader_end_offset``
    (KIP-101/KIP-279, as Kafka's fetcher decides).

    The follower looks up its own largest epoch at or below ``leader_epoch`` and where that ends.
    If it is ``leader_epoch`` itself, both logs agree up to the smaller end. If it is smaller, the
    follower never had the leader's epoch: its records from where its own epoch ends belong to
    epochs the leader never had, so it cuts there, not at the leader's offset (which would keep
    them); the next fetch, with an older last epoch, finds any divergence further back. If it
    has no epoch that old, it cuts at the leader's offset. Never past either end offset: at or
    beyond ``leader_end_offset`` the leader holds only epochs newer than any of the follower's,
    so nothing the follower has there can be the leader's.
    """
    ours_epoch, ours_end = plog.end_offset_for_epoch(leader_epoch)
    target = min(leader_end_offset, plog.log_end_offset)
    if ours_epoch >= 0 and ours_end >= 0:
        target = min(target, ours_end)
    return target


def whole_batches(records: bytes | bytearray | memoryview) -> memoryview:
    """The leading whole batches of a fetch response (a size limit may cut the last one)."""
    view = memoryview(records)
    pos = 0
    while pos + 12 <= len(view):
        size = 12 + int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if size < 12 or pos + size > len(view):
            break
        pos += size
    return view[:pos]
