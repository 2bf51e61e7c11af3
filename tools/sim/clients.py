"""Kafka clients inside the simulation, speaking the protocol through ``BrokerClient`` (the
protocol's client-role ``Connection``) over the simulated network: an idempotent acks=all
producer, a transactional producer (InitProducerId, AddPartitionsToTxn, Produce,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and read_committed / read_uncommitted consumers.

Every request and its answer goes into the trace; what the checker needs (acknowledged records,
transaction outcomes, what consumers read) goes into :class:`History`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from strom.broker.cluster.client import BrokerClient, BrokerUnavailable
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch, decode_records, iter_batches
from strom.protocol.records.control import ABORT, control_type
from strom.storage import clock

from .network import NodeNetwork
from .trace import Trace

METADATA, PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FETCH, FIND_COORDINATOR = 3, 0, 1, 2, 9, 10
CREATE_TOPICS, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 19, 22, 24, 25, 26, 28
REQUEST_TIMEOUT_S = 15.0
BACKOFF_S = 0.1

E = ErrorCode
RETRIABLE = {
    E.NOT_LEADER_OR_FOLLOWER,
    E.LEADER_NOT_AVAILABLE,
    E.UNKNOWN_TOPIC_OR_PARTITION,
    E.NOT_ENOUGH_REPLICAS,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.REQUEST_TIMED_OUT,
    E.KAFKA_STORAGE_ERROR,
    E.FENCED_LEADER_EPOCH,
    E.UNKNOWN_LEADER_EPOCH,
    E.NOT_COORDINATOR,
    E.COORDINATOR_NOT_AVAILABLE,
    E.COORDINATOR_LOAD_IN_PROGRESS,
    E.CONCURRENT_TRANSACTIONS,
    E.OFFSET_NOT_AVAILABLE,
    E.UNSTABLE_OFFSET_COMMIT,
    E.NETWORK_EXCEPTION,
}

TP = tuple[str, int]


@dataclass
class Txn:
    """One transaction of a transactional producer and what became of it."""

    producer: str
    number: int
    records: list[tuple[TP, int, str]] = field(default_factory=list)  # acknowledged (partition, offset, value)
    sent: list[str] = field(default_factory=list)  # every value produced in it
    offsets: dict[TP, int] = field(default_factory=dict)  # the group offsets it committed
    group: str = ""
    outcome: str = "open"  # committed | aborted | unknown


@dataclass
class History:
    acked: list[tuple[str, TP, int, str]] = field(default_factory=list)  # (producer, partition, offset, value)
    txns: list[Txn] = field(default_factory=list)
    # what readers saw below the high watermark: (partition, offset) -> (value, reader, time)
    seen: dict[tuple[TP, int], tuple[str, str, float]] = field(default_factory=dict)
    committed_reads: list[tuple[str, TP, int, str]] = field(default_factory=list)  # read_committed deliveries
    violations: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)  # producer errors that end an idempotent session

    def saw(self, reader: str, tp: TP, offset: int, value: str) -> None:
        known = self.seen.get((tp, offset))
        if known is None:
            self.seen[(tp, offset)] = (value, reader, trio.current_time())
        elif known[0] != value:
            self.violations.append(
                f"offset {tp[0]}-{tp[1]}@{offset} read as {value!r} by {reader} at {trio.current_time():.4f}, "
                f"but as {known[0]!r} by {known[1]} at {known[2]:.4f}"
            )


def _value(record_value: bytes | None) -> str:
    return record_value.decode() if record_value is not None else "<null>"


def summarize(body: Any, limit: int = 300) -> str:
    text = repr(_plain(body))
    return text if len(text) <= limit else text[:limit] + "..."


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items() if not k.startswith("_") and k != "records"}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return f"<{len(obj)} bytes>"
    return obj


class KafkaClient:
    """Connections to the brokers, cluster metadata, and a traced request."""

    def __init__(
        self,
        name: str,
        net: NodeNetwork,
        bootstrap: list[tuple[str, int]],
        trace: Trace,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.name, self.net, self.bootstrap, self.trace = name, net, bootstrap, trace
        self.request_timeout = request_timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[TP, tuple[int, int]] = {}  # partition -> (leader, leader epoch)
        self._conns: dict[tuple[str, int], BrokerClient] = {}
        self._rotation = 0

    def _conn(self, address: tuple[str, int]) -> BrokerClient:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = BrokerClient(
                address[0], address[1], self.name, request_timeout_s=self.request_timeout, connect=self.net.connect
            )
        return conn

    async def request(self, address: tuple[str, int], api: int, version: int, body: dict) -> Any:
        self.trace.add(self.name, f"-> {address[0]} api{api}v{version} {summarize(body)}")
        try:
            answer = await self._conn(address).request(api, version, body)
        except BrokerUnavailable as exc:
            self.trace.add(self.name, f"<- {address[0]} api{api} failed: {exc}")
            raise
        self.trace.add(self.name, f"<- {address[0]} api{api} {summarize(answer)}")
        return answer

    def any_broker(self) -> tuple[str, int]:
        known = [self.brokers[b] for b in sorted(self.brokers)] or self.bootstrap
        self._rotation += 1
        return known[self._rotation % len(known)]

    async def any_request(self, api: int, version: int, body: dict) -> Any:
        return await self.request(self.any_broker(), api, version, body)

    async def refresh(self, topics: list[str]) -> None:
        try:
            answer = await self.any_request(
                METADATA,
                9,
                {
                    "topics": [{"name": t} for t in topics],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
        except BrokerUnavailable:
            return
        for b in answer.brokers:
            self.brokers[b.node_id] = (b.host, b.port)
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.leader_id >= 0:
                    self.leaders[(t.name, p.partition_index)] = (p.leader_id, p.leader_epoch)
                else:
                    self.leaders.pop((t.name, p.partition_index), None)

    def leader_address(self, tp: TP) -> tuple[str, int] | None:
        leader = self.leaders.get(tp)
        return self.brokers.get(leader[0]) if leader is not None else None

    async def coordinator(self, key_type: int, key: str) -> tuple[str, int] | None:
        try:
            answer = await self.any_request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
        except BrokerUnavailable:
            return None
        c = answer.coordinators[0]
        return (c.host, c.port) if c.error_code == 0 else None


def _records(values: list[str], base_ts: int) -> list[Record]:
    return [Record(i, 0, None, v.encode()) for i, v in enumerate(values)]


class IdempotentProducer:
    """acks=all with idempotence: one batch in flight, retried with its sequence until answered."""

    def __init__(self, client: KafkaClient, topic: str, partitions: int, history: History, rng: random.Random) -> None:
        self.client, self.topic, self.partitions, self.history, self.rng = client, topic, partitions, history, rng
        self.pid, self.epoch = -1, -1
        self.seq: dict[int, int] = {}
        self.n = 0

    async def init(self) -> None:
        while True:
            try:
                a = await self.client.any_request(
                    INIT_PRODUCER_ID,
                    4,
                    {"transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1, "producer_epoch": -1},
                )
                if a.error_code == 0:
                    self.pid, self.epoch, self.seq = a.producer_id, a.producer_epoch, {}
                    return
            except BrokerUnavailable:
                pass
            await trio.sleep(BACKOFF_S)

    async def run(self, stop_at: float) -> None:
        await self.init()
        while trio.current_time() < stop_at:
            index = self.rng.randrange(self.partitions)
            values = [f"{self.client.name}-{self.n}-{i}" for i in range(self.rng.randint(1, 3))]
            self.n += 1
            await self.send(index, values, stop_at + 30)
            await trio.sleep(self.rng.uniform(0.0, 0.05))

    async def send(self, index: int, values: list[str], give_up_at: float) -> None:
        tp = (self.topic, index)
        seq = self.seq.get(index, 0)
        batch = _batch(values, self.pid, self.epoch, seq, transactional=False)
        p = await produce_until_answered(self.client, self.topic, index, batch, None, give_up_at)
        if p is None:
            return
        if p.error_code == 0:
            self.seq[index] = seq + len(values)
            for i, v in enumerate(values):
                self.history.acked.append((self.client.name, tp, p.base_offset + i, v))
            return
        # OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, ...: the idempotent session ends
        self.history.fatal.append(f"{self.client.name} {tp} seq {seq}: {ErrorCode(p.error_code).name}")
        await self.init()


class LeaderAckProducer:
    """acks=1 without idempotence, as many applications produce: answered once the leader has
    appended, before the followers have it. Each batch is sent once (no retries, so never
    duplicated); its acknowledgement promises nothing after a leader change, so the checker does
    not count it, but the records are there for readers and retention, and they let the leader's
    log run ahead of the high watermark while a follower lags (acks=all producers wait instead)."""

    def __init__(self, client: KafkaClient, topic: str, partitions: int, rng: random.Random) -> None:
        self.client, self.topic, self.partitions, self.rng = client, topic, partitions, rng
        self.n = 0

    async def run(self, stop_at: float) -> None:
        while trio.current_time() < stop_at:
            index = self.rng.randrange(self.partitions)
            values = [f"{self.client.name}-{self.n}-{i}" for i in range(self.rng.randint(1, 3))]
            self.n += 1
            address = self.client.leader_address((self.topic, index))
            if address is None:
                await self.client.refresh([self.topic])
                await trio.sleep(BACKOFF_S)
                continue
            body = {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 10000,
                "topic_data": [
                    {"name": self.topic, "partition_data": [{"index": index, "records": _batch(values, -1, -1, -1)}]}
                ],
            }
            try:
                answer = await self.client.request(address, PRODUCE, 9, body)
                if answer.responses[0].partition_responses[0].error_code != 0:
                    await self.client.refresh([self.topic])
            except BrokerUnavailable:
                await self.client.refresh([self.topic])
            await trio.sleep(self.rng.uniform(0.0, 0.05))


class TransactionalProducer:
    """Transactions over several partitions, each also committing a group offset, committed or
    aborted by the seed; a fatal answer re-initializes (which aborts the open transaction).

    With a ``delivery_timeout`` (seconds), a Produce not answered in time is an abortable error,
    as in the Java producer: the transaction is aborted with EndTxn in its epoch (the batch may
    still be on its way to the leader) and the epoch bumped with InitProducerId."""

    def __init__(
        self,
        client: KafkaClient,
        topic: str,
        partitions: int,
        history: History,
        rng: random.Random,
        group: str,
        delivery_timeout: float = 0.0,
    ) -> None:
        self.client, self.topic, self.partitions, self.history, self.rng = client, topic, partitions, history, rng
        self.delivery_timeout = delivery_timeout
        self.timed_out = False  # the last Produce was not answered within the delivery timeout
        self.txn_id = f"txn-{client.name}"
        self.group = group
        self.pid, self.epoch = -1, -1
        self.seq: dict[int, int] = {}
        self.n = 0

    async def _coordinated(self, key_type: int, key: str, api: int, version: int, body: dict, stop: float) -> Any:
        """Send to the coordinator of ``key`` until answered (retrying while it moves); None on give-up."""
        while trio.current_time() < stop:
            address = await self.client.coordinator(key_type, key)
            if address is None:
                await trio.sleep(BACKOFF_S)
                continue
            try:
                answer = await self.client.request(address, api, version, body)
            except BrokerUnavailable:
                await trio.sleep(BACKOFF_S)
                continue
            code = getattr(answer, "error_code", 0)
            if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS) or (
                code == E.CONCURRENT_TRANSACTIONS
            ):
                await trio.sleep(BACKOFF_S)
                continue
            return answer
        return None

    async def init(self, stop: float) -> bool:
        body = {
            "transactional_id": self.txn_id,
            "transaction_timeout_ms": 10000,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        answer = await self._coordinated(1, self.txn_id, INIT_PRODUCER_ID, 4, body, stop)
        if answer is None or answer.error_code != 0:
            return False
        self.pid, self.epoch, self.seq = answer.producer_id, answer.producer_epoch, {}
        return True

    async def run(self, stop_at: float) -> None:
        while trio.current_time() < stop_at:
            if self.pid < 0 and not await self.init(stop_at + 30):
                return
            txn = Txn(self.client.name, self.n, group=self.group)
            self.n += 1
            self.history.txns.append(txn)
            ok = await self._one(txn, stop_at + 30)
            if not ok:
                if txn.outcome == "open":
                    txn.outcome = "unknown"
                self.pid = -1  # re-initialize: aborts what is open
            await trio.sleep(self.rng.uniform(0.0, 0.1))

    async def _one(self, txn: Txn, stop: float) -> bool:
        indexes = sorted(self.rng.sample(range(self.partitions), self.rng.randint(1, self.partitions)))
        ids = {"transactional_id": self.txn_id, "producer_id": self.pid, "producer_epoch": self.epoch}
        body = {
            "v3_and_below_transactional_id": self.txn_id,
            "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": self.topic, "partitions": indexes}],
        }
        while True:
            answer = await self._coordinated(1, self.txn_id, ADD_PARTITIONS, 3, body, stop)
            if answer is None:
                return False
            codes = {
                r.partition_error_code for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition
            }
            if codes == {0}:
                break
            if codes & {E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS}:
                await trio.sleep(BACKOFF_S)
                continue
            return False
        for index in indexes:
            values = [f"{self.client.name}-t{txn.number}-{index}-{i}" for i in range(self.rng.randint(1, 2))]
            txn.sent.extend(values)
            if not await self._produce(txn, index, values, stop):
                if self.timed_out:  # an abortable error: abort in this epoch, then bump it
                    answer = await self._coordinated(1, self.txn_id, END_TXN, 3, {**ids, "committed": False}, stop)
                    if answer is not None and answer.error_code == 0:
                        txn.outcome = "aborted"
                return False
        if self.rng.random() < 0.7:
            answer = await self._coordinated(1, self.txn_id, ADD_OFFSETS, 3, {**ids, "group_id": self.group}, stop)
            if answer is None or answer.error_code != 0:
                return False
            offsets = {(self.topic, i): txn.number + 1 for i in indexes}
            commit = {
                **ids,
                "group_id": self.group,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": self.topic,
                        "partitions": [
                            {
                                "partition_index": tp[1],
                                "committed_offset": off,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for tp, off in offsets.items()
                        ],
                    }
                ],
            }
            while True:
                answer = await self._coordinated(0, self.group, TXN_OFFSET_COMMIT, 3, commit, stop)
                if answer is None:
                    return False
                codes = {p.error_code for t in answer.topics for p in t.partitions}
                if codes == {0}:
                    txn.offsets = offsets
                    break
                if codes & RETRIABLE:
                    await trio.sleep(BACKOFF_S)
                    continue
                return False
        commit_it = self.rng.random() < 0.75
        answer = await self._coordinated(1, self.txn_id, END_TXN, 3, {**ids, "committed": commit_it}, stop)
        if answer is None or answer.error_code != 0:
            return False
        txn.outcome = "committed" if commit_it else "aborted"
        return True

    async def _produce(self, txn: Txn, index: int, values: list[str], stop: float) -> bool:
        tp = (self.topic, index)
        seq = self.seq.get(index, 0)
        batch = _batch(values, self.pid, self.epoch, seq, transactional=True)
        give_up = min(stop, trio.current_time() + self.delivery_timeout) if self.delivery_timeout else stop
        p = await produce_until_answered(self.client, self.topic, index, batch, self.txn_id, give_up)
        self.timed_out = p is None and give_up < stop
        if p is None or p.error_code != 0:
            return False
        self.seq[index] = seq + len(values)
        for i, v in enumerate(values):
            txn.records.append((tp, p.base_offset + i, v))
        return True


def _batch(values: list[str], pid: int, epoch: int, seq: int, *, transactional: bool = False) -> bytes:
    return build_batch(
        _records(values, 0),
        base_timestamp=clock.wall_ms(),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


async def produce_until_answered(
    client: KafkaClient, topic: str, index: int, batch: bytes, transactional_id: str | None, give_up_at: float
) -> Any:
    """Send one acks=all batch to the partition's leader, again (the same batch, so the same
    sequence) while the answer is a retriable error or none; the partition's answer, or None
    when ``give_up_at`` passes first."""
    tp = (topic, index)
    while trio.current_time() < give_up_at:
        address = client.leader_address(tp)
        if address is None:
            await client.refresh([topic])
            await trio.sleep(BACKOFF_S)
            continue
        body = {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": batch}]}],
        }
        try:
            answer = await client.request(address, PRODUCE, 9, body)
        except BrokerUnavailable:
            await client.refresh([topic])
            await trio.sleep(BACKOFF_S)
            continue
        p = answer.responses[0].partition_responses[0]
        if p.error_code in RETRIABLE:
            await client.refresh([topic])
            await trio.sleep(BACKOFF_S)
            continue
        return p
    return None


def fetch_request(
    topic: str, index: int, leader_epoch: int, offset: int, read_committed: bool, max_wait_ms: int, min_bytes: int
) -> dict:
    """A consumer's Fetch v12 body for one partition, outside any fetch session."""
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "isolation_level": 1 if read_committed else 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": index,
                        "current_leader_epoch": leader_epoch,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def earliest_offset(
    client: KafkaClient, address: tuple[str, int], topic: str, index: int, epoch: int
) -> int | None:
    """The partition's log start offset as its leader answers ListOffsets EARLIEST (what a
    consumer with auto.offset.reset=earliest asks when its position is out of range); None when
    there is no answer."""
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": index, "current_leader_epoch": epoch, "timestamp": -2}]}
        ],
    }
    try:
        answer = await client.request(address, LIST_OFFSETS, 7, body)
    except BrokerUnavailable:
        return None
    p = answer.topics[0].partitions[0]
    return p.offset if p.error_code == 0 else None


def read_batches(data: bytes, aborted: list[tuple[int, int]], read_committed: bool) -> Iterator[tuple[int, str]]:
    """(offset, value) of the data records in ``data`` a consumer delivers: for read_committed,
    without the aborted transactions (the answer's list) and never control records; for
    read_uncommitted, every data record."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    view = memoryview(data)
    for pos, header in iter_batches(view, partial_tail=True):
        if read_committed:
            while pending and pending[0][1] <= header.last_offset:
                aborting.add(pending.pop(0)[0])
        if header.is_control:
            if header.is_transactional and control_type(view, pos) == ABORT:
                aborting.discard(header.producer_id)
            continue
        if read_committed and header.is_transactional and header.producer_id in aborting:
            continue
        payload = bytes(view[pos + 61 : pos + header.size])
        for record in decode_records(payload, header.records_count):
            yield header.base_offset + record.offset_delta, _value(record.value)


def transactional_records(data: bytes) -> Iterator[tuple[int, int, str | None]]:
    """(offset, producer id, value) of every record of a transactional batch in ``data``, in log
    order; a transaction marker as (offset, producer id, None)."""
    view = memoryview(data)
    for pos, header in iter_batches(view, partial_tail=True):
        if not header.is_transactional:
            continue
        if header.is_control:
            yield header.base_offset, header.producer_id, None
            continue
        payload = bytes(view[pos + 61 : pos + header.size])
        for record in decode_records(payload, header.records_count):
            yield header.base_offset + record.offset_delta, header.producer_id, _value(record.value)


class Consumer:
    """Reads every partition from the start, forever: from the leader of the epoch it knows
    (current_leader_epoch), checking that the high watermark it is shown never goes back within
    an epoch and that no offset ever reads as two different records."""

    def __init__(
        self,
        client: KafkaClient,
        topic: str,
        partitions: int,
        history: History,
        read_committed: bool,
        reset_to_earliest: bool = False,
    ) -> None:
        self.client, self.topic, self.partitions, self.history = client, topic, partitions, history
        self.read_committed = read_committed
        self.reset_to_earliest = reset_to_earliest  # auto.offset.reset=earliest (a topic with retention)
        self.position = dict.fromkeys(range(partitions), 0)
        self.hw: dict[tuple[int, int], int] = {}  # (partition, epoch) -> highest high watermark shown
        self.went_back: set[tuple[int, int]] = set()
        self.start_above_hw: set[tuple[int, int]] = set()

    async def run(self, stop_at: float) -> None:
        while trio.current_time() < stop_at:
            for index in range(self.partitions):
                await self.fetch(index)
            await trio.sleep(0.05)

    async def fetch(self, index: int) -> None:
        tp = (self.topic, index)
        leader = self.client.leaders.get(tp)
        address = self.client.leader_address(tp)
        if leader is None or address is None:
            await self.client.refresh([self.topic])
            return
        body = fetch_request(self.topic, index, leader[1], self.position[index], self.read_committed, 100, 1)
        try:
            answer = await self.client.request(address, FETCH, 12, body)
        except BrokerUnavailable:
            await self.client.refresh([self.topic])
            return
        if answer.error_code != 0 or not answer.responses:
            return
        p = answer.responses[0].partitions[0]
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and self.reset_to_earliest:
            # behind the log start (retention deleted what it had not read yet): from the earliest
            # offset, as a consumer with auto.offset.reset=earliest goes on
            earliest = await earliest_offset(self.client, address, self.topic, index, leader[1])
            if earliest is not None and self.position[index] < earliest:
                self.position[index] = earliest
            return
        if p.error_code != 0:
            await self.client.refresh([self.topic])
            return
        key = (index, leader[1])
        if p.log_start_offset > p.high_watermark and key not in self.start_above_hw:
            # Kafka's invariant logStartOffset <= highWatermark: retention and DeleteRecords delete
            # only below the high watermark (records followers and acks=all may still need are above)
            self.start_above_hw.add(key)
            self.history.violations.append(
                f"{self.client.name} saw the log start offset of {self.topic}-{index} in epoch {leader[1]} at "
                f"{p.log_start_offset}, above the high watermark {p.high_watermark}, at {trio.current_time():.4f}"
            )
        if p.high_watermark < self.hw.get(key, -1) and key not in self.went_back:
            self.went_back.add(key)  # once per partition and epoch is enough
            self.history.violations.append(
                f"{self.client.name} saw the high watermark of {self.topic}-{index} in epoch {leader[1]} go back "
                f"from {self.hw[key]} to {p.high_watermark} at {trio.current_time():.4f}"
            )
        self.hw[key] = max(self.hw.get(key, -1), p.high_watermark)
        data = bytes(p.records or b"")
        aborted = [(a.producer_id, a.first_offset) for a in (p.aborted_transactions or [])]
        limit = p.last_stable_offset if self.read_committed else p.high_watermark
        next_offset = self.position[index]
        for _, header in iter_batches(memoryview(data), partial_tail=True):
            next_offset = max(next_offset, header.last_offset + 1)
        for offset, value in read_batches(data, aborted, False):
            if offset < p.high_watermark:
                self.history.saw(self.client.name, tp, offset, value)
            else:
                self.history.violations.append(
                    f"{self.client.name} was given {self.topic}-{index}@{offset} at or above the high "
                    f"watermark {p.high_watermark}"
                )
        if self.read_committed:
            for offset, value in read_batches(data, aborted, True):
                if offset < limit:
                    self.history.committed_reads.append((self.client.name, tp, offset, value))
        self.position[index] = next_offset
