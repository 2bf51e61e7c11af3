"""Writing transaction markers: Kafka's TransactionMarkerChannelManager, on trio.

When a transaction reaches PrepareCommit or PrepareAbort, the coordinator writes one control
batch (``protocol.records.control``) with the producer's id and epoch to every partition of the
transaction. Partitions led by this broker get it appended directly (:func:`append_marker`, the
same function the WriteTxnMarkers API uses); partitions led elsewhere get a WriteTxnMarkers
request sent to their leader. Every partition is retried, with its leader looked up again (leader
moved, broker down, fewer in-sync replicas than the topic's min.insync.replicas, replication timed
out, or leadership lost while the marker waited for the replicas: NOT_LEADER_OR_FOLLOWER, the
marker may be truncated; a leader that does not know the
partition yet, as one just restarted: UNKNOWN_TOPIC_OR_PARTITION) until it has its marker or the
coordinator stops owning the transaction; a partition whose topic is gone from this broker's
metadata (deleted) is skipped, as Kafka does. Only then does the coordinator write
CompleteCommit/CompleteAbort, so a coordinator that crashes in between leaves a Prepare* record
and the next coordinator writes the markers again (a repeated marker is harmless: it closes no
transaction a second time).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from strom.broker.coordinator.runtime import CoordinatorRuntime, PendingWrite
from strom.protocol.errors import ErrorCode
from strom.protocol.records.control import build_marker
from strom.protocol.schema import ApiKey
from strom.storage.errors import StorageError

log = logging.getLogger("strom.txn.markers")


class MarkerClient(Protocol):
    """A connection to another broker (`cluster.client.BrokerClient`)."""

    async def request(
        self, api_key: int, version: int, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> Any: ...

    async def close(self) -> None: ...


ClientFactory = Callable[[str, int], MarkerClient]

RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
REPLICATION_TIMEOUT_S = 10.0
WRITE_TXN_MARKERS_VERSION = 1
# a partition's answers that mean a later marker is there already: nothing left to write
_SUPERSEDED = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED)


def append_marker(
    runtime: CoordinatorRuntime,
    topic: str,
    index: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
) -> tuple[ErrorCode, PendingWrite | None]:
    """Append one marker to a local leader: (error, the append to wait for; None unless NONE)."""
    replica = runtime.replica(topic, index)
    if replica is None:
        count = runtime.partition_count(topic)
        known = count is not None and index < count
        return (ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
    if not replica.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    if replica.isr_size < replica.min_insync_replicas:
        # as Kafka's acks=all append of a marker: refused (retried) while the ISR is too small, so
        # a marker is never durable on fewer replicas than the topic asks of its records
        return ErrorCode.NOT_ENOUGH_REPLICAS, None
    data = bytearray(build_marker(producer_id, producer_epoch, commit, coordinator_epoch, runtime.now_ms()))
    try:
        pending = runtime.append(topic, index, data)
    except StorageError as exc:
        log.warning("marker for producer %d on %s-%d refused: %s", producer_id, topic, index, exc)
        return ErrorCode[exc.error_code_name], None
    runtime.markers_written(topic, index, producer_id, commit)
    return ErrorCode.NONE, pending


async def await_replicated(
    runtime: CoordinatorRuntime, pending: list[PendingWrite], timeout_s: float
) -> list[ErrorCode]:
    """Wait until every append is below its partition's high watermark while this broker still
    leads it in the epoch of the append: per append NONE, NOT_LEADER_OR_FOLLOWER (leadership
    lost: the record may have been truncated since, whatever the high watermark says) or
    REQUEST_TIMED_OUT."""
    return await runtime.await_replication(pending, timeout_s)


class TransactionMarkerChannelManager:
    """Sends markers until every partition of a transaction has one."""

    def __init__(self, port: CoordinatorRuntime, client_factory: ClientFactory | None = None) -> None:
        self.port = port
        self.client_factory = client_factory
        self._clients: dict[int, MarkerClient] = {}

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: set[tuple[str, int]],
        still_valid: Callable[[], bool],
    ) -> bool:
        """True once every partition has its marker; False if ``still_valid()`` turned false."""
        remaining = set(partitions)
        backoff = RETRY_BACKOFF_S
        why: dict[tuple[str, int], str] = {}
        while remaining:
            if not still_valid():
                return False
            by_leader: dict[int | None, list[tuple[str, int]]] = {}
            for tp in sorted(remaining):
                by_leader.setdefault(self.port.leader_of(*tp), []).append(tp)
            for leader, tps in by_leader.items():
                if leader is None:
                    for tp in tps:
                        if self.port.partition_count(tp[0]) is None:
                            remaining.discard(tp)  # topic deleted: nothing to mark
                        else:
                            why[tp] = "no leader known"
                    continue
                if leader == self.port.node_id:
                    done = await self._write_local(producer_id, producer_epoch, commit, coordinator_epoch, tps, why)
                else:
                    done = await self._write_remote(
                        leader, producer_id, producer_epoch, commit, coordinator_epoch, tps, why
                    )
                remaining -= done
            if remaining:
                log.info(
                    "%s markers for producer %d epoch %d still missing on %d partitions (%s); retrying",
                    "commit" if commit else "abort",
                    producer_id,
                    producer_epoch,
                    len(remaining),
                    ", ".join(f"{t}-{i}: {why.get((t, i), '?')}" for t, i in sorted(remaining)),
                )
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        return True

    async def _write_local(
        self,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        tps: list[tuple[str, int]],
        why: dict[tuple[str, int], str],
    ) -> set[tuple[str, int]]:
        """The partitions whose marker is appended here and replicated while this broker still
        led them: one whose leadership was lost meanwhile is not done (the marker may have been
        truncated), so the next round sends it to the new leader."""
        done: set[tuple[str, int]] = set()
        waits: list[tuple[tuple[str, int], PendingWrite]] = []
        for topic, index in tps:
            code, pending = append_marker(self.port, topic, index, pid, epoch, commit, coordinator_epoch)
            if code == ErrorCode.NONE and pending is not None:
                waits.append(((topic, index), pending))
            elif code in _SUPERSEDED:
                # the partition already knows a newer producer epoch or coordinator, so this
                # transaction's end was written there by a later marker (Kafka stops sending
                # them). UNKNOWN_TOPIC_OR_PARTITION is retried: the next round drops the
                # partition if its topic is gone from the metadata
                done.add((topic, index))
            else:
                why[(topic, index)] = f"{code.name} here"
        if waits:
            codes = await await_replicated(self.port, [p for _, p in waits], REPLICATION_TIMEOUT_S)
            for (tp, pending), code in zip(waits, codes, strict=False):
                if code == ErrorCode.NONE:
                    done.add(tp)
                else:
                    why[tp] = f"{code.name} here"
                    log.info(
                        "marker for producer %d on %s-%d (epoch %d) not replicated: %s; retrying",
                        pid,
                        *tp,
                        pending.leader_epoch,
                        code.name,
                    )
        return done

    async def _write_remote(
        self,
        leader: int,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        tps: list[tuple[str, int]],
        why: dict[tuple[str, int], str],
    ) -> set[tuple[str, int]]:
        address = self.port.endpoint(leader)
        if address is None or self.client_factory is None:
            why.update((tp, f"no address of broker {leader}") for tp in tps)
            return set()
        client = self._clients.get(leader)
        if client is None:
            client = self._clients[leader] = self.client_factory(*address)
        topics: dict[str, list[int]] = {}
        for topic, index in tps:
            topics.setdefault(topic, []).append(index)
        body = {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
                }
            ]
        }
        try:
            response = await client.request(
                ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, timeout_s=REPLICATION_TIMEOUT_S + 5
            )
        except Exception as exc:  # BrokerUnavailable and decoding errors: retried
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            self._clients.pop(leader, None)
            why.update((tp, f"broker {leader}: {exc}") for tp in tps)
            return set()
        done = set()
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    # UNKNOWN_TOPIC_OR_PARTITION is retried, as Kafka's marker completion handler
                    # does: a leader that has just restarted answers it until it has learnt its
                    # partitions (sim finding 8); a deleted topic leaves the metadata and the next
                    # round drops it
                    if p.error_code == ErrorCode.NONE or p.error_code in _SUPERSEDED:
                        done.add((topic.name, p.partition_index))
                    else:
                        why[(topic.name, p.partition_index)] = f"broker {leader}: {ErrorCode(p.error_code).name}"
        return done

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
