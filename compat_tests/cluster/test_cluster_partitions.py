"""A Jepsen-style nemesis on three real `strom serve` processes and a real ZooKeeper: network
partitions between brokers and between a broker and ZooKeeper (compat_tests/support/netproxy.py,
compat_tests/support/partitioned_cluster.py), delays, SIGSTOP/SIGCONT and kill -9, while idempotent
acks=all producers, a transactional producer and a read_committed consumer run; then heal,
converge (full ISRs) and check the history:

- every acknowledged record is in the log exactly once, at the offset it was acknowledged at;
- no value twice in the log (idempotence), each producer's values in each partition in order
  (one allowance: a value librdkafka itself wrote again after bumping its epoch, its issue 4953,
  when its own log says so and the later copy is the acknowledged one; see
  client_epoch_bump_duplicates);
- committed transactions wholly visible to read_committed (at the offsets acknowledged), aborted
  ones never seen (also by a read_committed consumer reading all along), a transaction whose end
  the client could not learn wholly there or wholly absent; the group offset each transaction
  commits (TxnOffsetCommit) ends as the last committed transaction left it;
- the high watermark (ListOffsets latest, read_uncommitted, asked of every broker) never observed
  going backwards;
- the cluster converges (every replica back in the ISR) within 60 s of each heal.

The schedule comes from a seed, printed with the summary; ``STROM_NEMESIS_SEED=<seed>`` replays it
(the fault kinds, their order, durations and parameters; the brokers they hit are named by role,
e.g. "the leader of nemesis-tx-1" or of a coordinator's partition of `__transaction_state` or
`__consumer_offsets`, and found in the running cluster).
"""

from __future__ import annotations

import logging
import os
import random
import statistics
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.cluster import (
    SESSION_TIMEOUT_MS,
    wait,
)
from compat_tests.support.partitioned_cluster import PartitionedNetwork, partitioned_cluster
from compat_tests.support.wire import Raw
from strom.protocol.schema import ApiKey
from strom.tools.broker_process import BrokerProcessError

TOPIC, TX_TOPIC, PARTITIONS = "nemesis", "nemesis-tx", 3
SESSION_S = SESSION_TIMEOUT_MS / 1000
CONFIGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
# a fault hits the leader of a partition of one of these (the coordinators' topics have PARTITIONS
# partitions in these clusters: offsets.topic.num.partitions, transaction.state.log.num.partitions)
TARGET_TOPICS = (TOPIC, TX_TOPIC, "__transaction_state", "__consumer_offsets")
FAULTS = ("isolate-leader", "leader-from-zk", "zk-cut-only", "one-way", "delay", "pause", "kill")


def servers(net: PartitionedNetwork) -> str:
    return ",".join(b.bootstrap for b in net.brokers)


# -- the workload -------------------------------------------------------------------------
class _Keep(logging.Handler):
    """Keeps a client's log lines (time and message) in a bounded deque, and every line that says
    the idempotent producer bumped its epoch in ``bumps``."""

    def __init__(self, lines: deque[str], bumps: list[str]) -> None:
        super().__init__()
        self.lines, self.bumps = lines, bumps

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.created:.3f} {record.getMessage()}"
        self.lines.append(line)
        if "bumped epoch" in line or "epoch bump" in line:  # the bump, and its reason
            self.bumps.append(line)


class IdempotentWriter(threading.Thread):
    """acks=all, enable.idempotence: values ``w<id>-<seq>`` to partition seq % PARTITIONS, paced;
    keeps (partition, offset) of every acknowledged value and the values that failed."""

    def __init__(self, bootstrap: str, writer_id: int) -> None:
        super().__init__(name=f"nemesis-writer-{writer_id}", daemon=True)
        self.writer_id = writer_id
        # librdkafka's idempotence log (debug "eos": epoch bumps and their reasons, sequence
        # errors), kept for a failure message
        self.eos_log: deque[str] = deque(maxlen=400)
        self.bumps: list[str] = []
        eos = logging.getLogger(f"nemesis.writer{writer_id}")
        eos.propagate = False
        eos.setLevel(logging.DEBUG)
        eos.handlers = [_Keep(self.eos_log, self.bumps)]
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "request.timeout.ms": 10000,
                "error_cb": self._error,
                "debug": "eos",
                "logger": eos,
            }
        )
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self.acked_at: dict[bytes, float] = {}
        self.refused: dict[str, int] = {}  # produce() calls the client refused, by error
        self.fatal: str | None = None
        self.started = time.monotonic()
        self.sent = 0
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
            self.acked_at[msg.value()] = time.monotonic()
        else:
            self.failed[msg.value()] = err.name()

    def _error(self, err) -> None:
        if err.fatal():
            self._fatal(err)

    def _fatal(self, err) -> None:
        if self.fatal is None:
            self.fatal = f"{time.monotonic() - self.started:.1f}s {err.name()}: {err.str()}"

    def run(self) -> None:
        while not self.stopping.is_set() and self.fatal is None:
            value = b"w%d-%08d" % (self.writer_id, self.sent)
            try:
                try:
                    self.producer.produce(TOPIC, value, partition=self.sent % PARTITIONS, on_delivery=self._delivered)
                    self.sent += 1
                except BufferError:
                    pass
                self.producer.poll(0.004)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():  # the producer is done (error_cb has kept why)
                    self._fatal(error)
                    break
                # _UNKNOWN_TOPIC: a broker answered Metadata before it knew the topic (a restarted
                # one); the client refuses new records until its next metadata refresh
                self.refused[error.name()] = self.refused.get(error.name(), 0) + 1
                time.sleep(0.1)

    def finish(self, timeout_s: float) -> list[str]:
        self.stopping.set()
        self.join(30)
        try:
            left = self.producer.flush(timeout_s)
        except KafkaException as exc:  # a fatal error: every record left failed
            self._fatal(exc.args[0])
            left = len(self.producer)
        return (
            [f"writer {self.writer_id}: {left} records neither acknowledged nor failed after {timeout_s:.0f} s"]
            if left
            else []
        )


@dataclass
class TxnHistory:
    committed: list[tuple[int, list[bytes]]] = field(default_factory=list)  # (txn, values)
    aborted: list[tuple[int, list[bytes]]] = field(default_factory=list)
    uncertain: list[tuple[int, list[bytes]]] = field(default_factory=list)
    offsets: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # delivery reports
    errors: list[str] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)  # seconds from begin to commit or abort
    producers: int = 0


class TransactionalWriter(threading.Thread):
    """Transactions of six values (two per partition); every fourth one aborted on purpose. An
    error the client cannot get past leaves the transaction uncertain and a new producer (same
    transactional.id: it fences the old one and ends what it left open) carries on; so does a
    send_offsets_to_transaction that blocks past its timeout (librdkafka's hang, see finish),
    whose stuck producer is left to its helper thread."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="nemesis-txn", daemon=True)
        self.bootstrap = bootstrap
        self.history = TxnHistory()
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.crashed: str | None = None
        self.producer: Producer | None = None
        # the transactional API call under way: (name, started, its timeout), and the transaction
        self.call: tuple[str, float, float] | None = None
        self.current: tuple[int, list[bytes]] | None = None
        self.client_hang: str | None = None
        self.hangs: list[str] = []  # transactions whose producer hung and was replaced
        # every transaction also commits offset <txn + 1> of TOPIC-0 for this group (TxnOffsetCommit):
        # the group's committed offset must end as the last committed transaction left it
        self.group = Consumer({"bootstrap.servers": bootstrap, "group.id": "nemesis-eos", "enable.auto.commit": False})

    def _new_producer(self) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "nemesis-txn",
                "linger.ms": 5,
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 30000,
                "request.timeout.ms": 10000,
            }
        )
        self.history.producers += 1
        deadline = time.monotonic() + 120
        while True:
            try:
                self.producer.init_transactions(30)
                return
            except KafkaException as exc:
                if time.monotonic() > deadline or not exc.args[0].retriable():
                    raise
                self.note(f"init: {exc.args[0].name()}")

    def note(self, text: str) -> None:
        self.history.errors.append(f"{time.monotonic() - self.started:.1f}s {text}")

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.history.offsets[msg.value()] = (msg.partition(), msg.offset())

    def run(self) -> None:
        txn = 0
        try:
            self._new_producer()
            while not self.stopping.is_set():
                values = [b"t%05d-%d" % (txn, i) for i in range(6)]
                self._one(txn, values, abort=txn % 4 == 3)
                txn += 1
                time.sleep(0.02)
        except KafkaException as exc:  # init_transactions gave up, or an error _one does not expect
            self.crashed = f"txn {txn}: {exc.args[0].name()}: {exc.args[0].str()}"

    def _one(self, txn: int, values: list[bytes], abort: bool) -> None:
        began = time.monotonic()
        try:
            self._run_one(txn, values, abort)
        finally:
            self.history.durations.append(time.monotonic() - began)

    def _run_one(self, txn: int, values: list[bytes], abort: bool) -> None:
        p, h = self.producer, self.history
        assert p is not None
        self.current = (txn, values)
        try:
            p.begin_transaction()
            for i, v in enumerate(values):
                p.produce(TX_TOPIC, v, partition=i % PARTITIONS, on_delivery=self._delivered)
            metadata = self.group.consumer_group_metadata()
            self.call = ("send_offsets_to_transaction", time.monotonic(), 60)
            if not self._bounded(p.send_offsets_to_transaction, [TopicPartition(TOPIC, 0, txn + 1)], metadata, 60):
                # librdkafka's hang (see finish): the transaction is uncertain, and a new producer
                # with the same transactional.id fences the stuck one and carries on
                self.hangs.append(f"txn {txn}: send_offsets_to_transaction blocked past its 60 s timeout + 30 s")
                self.note(self.hangs[-1])
                self.call = None
                h.uncertain.append((txn, values))
                self._new_producer()
                return
            self.call = None
            if abort:
                p.abort_transaction(60)
                h.aborted.append((txn, values))
            else:
                self._commit(p)
                h.committed.append((txn, values))
        except KafkaException as exc:
            error = exc.args[0]
            self.note(f"txn {txn}: {error.name()}: {error.str()}")
            if error.txn_requires_abort():
                try:
                    p.abort_transaction(60)
                    h.aborted.append((txn, values))
                    return
                except KafkaException as again:
                    self.note(f"txn {txn} abort: {again.args[0].name()}")
            h.uncertain.append((txn, values))
            self._new_producer()

    @staticmethod
    def _bounded(call, *args, grace_s: float = 30) -> bool:
        """Run ``call(*args)`` (a transactional API call whose last argument is its timeout) in a
        helper thread; False when it has not returned ``grace_s`` after that timeout (the helper is
        left blocked: a daemon). Its exception, if any, is raised here."""
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                call(*args)
                outcome.append(None)
            except BaseException as exc:  # handed to the caller's thread
                outcome.append(exc)

        helper = threading.Thread(target=run, name="nemesis-txn-call", daemon=True)
        helper.start()
        helper.join(args[-1] + grace_s)
        if not outcome:
            return False
        if outcome[0] is not None:
            raise outcome[0]
        return True

    def _commit(self, p: Producer) -> None:
        for attempt in range(5):
            try:
                p.commit_transaction(30)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or attempt == 4:
                    raise
                self.note(f"commit, retried: {exc.args[0].name()}")

    def finish(self, timeout_s: float) -> list[str]:
        self.stopping.set()
        self.join(timeout_s)
        call = self.call
        if (
            self.is_alive()
            and call is not None
            and call[0] == "send_offsets_to_transaction"
            and time.monotonic() - call[1] > call[2] + 30
            and self.current is not None
        ):
            # A client defect, not the broker's: librdkafka (2.16 here) never checks the timeout of a
            # request to a coordinator it must look up (its issue 5456, open), and once a killed
            # broker drops out of Metadata answers while cached as the group coordinator it is not
            # looked up again until another broker changes state (its issue 5511, open), so
            # send_offsets_to_transaction can block for ever. The broker aborts that transaction
            # when it times out; it is uncertain here, and every check below still applies.
            self.history.uncertain.append(self.current)
            self.client_hang = (
                f"txn {self.current[0]}: send_offsets_to_transaction blocked "
                f"{time.monotonic() - call[1]:.0f} s past its {call[2]:.0f} s timeout "
                "(librdkafka issues 5456/5511)"
            )
            return []
        if self.is_alive():
            where = f" (in {call[0]} for {time.monotonic() - call[1]:.0f} s)" if call else ""
            return [f"the transactional writer did not finish its transaction in {timeout_s:.0f} s{where}"]
        return [f"the transactional writer stopped at {self.crashed}"] if self.crashed else []

    def committed_offset(self) -> int:
        """The group's committed offset of TOPIC-0 (read_committed: the group's offsets are stable)."""

        def ask():
            try:
                return [self.group.committed([TopicPartition(TOPIC, 0)], 10)[0].offset]
            except KafkaException as exc:  # NOT_COORDINATOR while the group's coordinator moves
                if (
                    exc.args[0].code()
                    not in (
                        KafkaError.NOT_COORDINATOR,
                        KafkaError.COORDINATOR_NOT_AVAILABLE,
                        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                        KafkaError._TIMED_OUT,
                        KafkaError._TRANSPORT,
                    )
                    and not exc.args[0].retriable()
                ):
                    raise
                return None

        try:
            return wait(ask, 60, "the group's committed offset", interval_s=0.5)[0]
        finally:
            self.group.close()


class CommittedReader(threading.Thread):
    """A read_committed consumer of the transactional topic from offset 0, all along."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="nemesis-reader", daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "nemesis-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.seen: list[tuple[int, int, bytes]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.assign([TopicPartition(TX_TOPIC, p, 0) for p in range(PARTITIONS)])
        try:
            while not self.stopping.is_set():
                for m in self.consumer.consume(500, 0.2):
                    if not m.error():
                        self.seen.append((m.partition(), m.offset(), m.value()))
        finally:
            self.consumer.close()

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)


class WatermarkWatcher(threading.Thread):
    """Asks one broker for the high watermark of each partition of TOPIC (ListOffsets v7, latest,
    read_uncommitted) every 0.2 s; keeps (time, leader epoch, offset) of every answer a leader gave."""

    def __init__(self, broker, node: int) -> None:
        super().__init__(name=f"nemesis-hw-{node}", daemon=True)
        self.broker, self.node = broker, node
        self.observed: dict[int, list[tuple[float, int, int, int]]] = defaultdict(list)
        self.stopping = threading.Event()

    def _ask(self, raw: Raw) -> None:
        answer = raw.request(
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                            for p in range(PARTITIONS)
                        ],
                    }
                ],
            },
        )
        now = time.monotonic()
        for part in answer.topics[0].partitions:
            if part.error_code == 0:
                self.observed[part.partition_index].append((now, part.leader_epoch, part.offset, self.node))

    def run(self) -> None:
        raw = None
        while not self.stopping.is_set():
            try:
                if raw is None:
                    raw = Raw(self.broker.port)
                    raw.sock.settimeout(2)
                self._ask(raw)
            except (OSError, AssertionError, BrokerProcessError):
                if raw is not None:
                    raw.close()
                raw = None
            time.sleep(0.2)
        if raw is not None:
            raw.close()

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)


# -- the nemesis --------------------------------------------------------------------------
class Nemesis:
    def __init__(self, net: PartitionedNetwork, seed: int) -> None:
        self.net, self.rng = net, random.Random(seed)
        self.log: list[str] = []
        self.started = time.monotonic()

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self.started:7.1f}s {text}"
        self.log.append(line)
        print(line, flush=True)

    def schedule(self, rounds: int) -> list[str]:
        kinds = list(FAULTS)
        self.rng.shuffle(kinds)
        return (kinds * (1 + rounds // len(kinds)))[:rounds]

    def target(self) -> tuple[str, int]:
        """The partition whose leader a fault hits: of the idempotent writers' topic, the
        transactional topic, or the transaction and group coordinators' topics (all have
        PARTITIONS partitions here)."""
        return self.rng.choice(TARGET_TOPICS), self.rng.randrange(PARTITIONS)

    def pick(self) -> tuple[int, str]:
        """The broker a fault hits, and its role for the log: "leader of <topic>-<partition>"."""
        topic, partition = self.target()
        return self.leader(topic, partition), f"leader of {topic}-{partition}"

    def leader(self, topic: str = TOPIC, partition: int = 0) -> int:
        def find():
            for b in self.net.brokers:
                if not b.running or b.paused:
                    continue
                try:
                    meta = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(topic, timeout=5)
                    leader = meta.topics[topic].partitions[partition].leader
                except (KafkaException, KeyError):
                    continue
                if leader >= 0:
                    return [leader]
            return None

        return wait(find, 30, f"a leader of {topic}-{partition}")[0]

    def apply(self, kind: str) -> None:
        net, rng = self.net, self.rng
        others = lambda n: [i for i in range(net.size) if i != n]  # noqa: E731
        hold = rng.uniform(SESSION_S + 2, SESSION_S + 5)
        stall = rng.random() < 0.5
        how = "stall" if stall else "cut"
        if kind == "isolate-leader":  # leader cut from the other brokers, not from ZooKeeper
            leader, role = self.pick()
            self.note(f"{kind}: {how} broker {leader} ({role}) <-> brokers {others(leader)}, {hold:.1f}s")
            net.isolate_from_brokers(leader, stall=stall)
            time.sleep(hold)
        elif kind == "leader-from-zk":  # leader cut from ZooKeeper and from the other brokers
            leader, role = self.pick()
            self.note(f"{kind}: {how} broker {leader} ({role}) from ZooKeeper and brokers, {hold:.1f}s")
            net.isolate_from_brokers(leader, stall=stall)
            net.zk_link(leader).stall() if stall else net.zk_link(leader).cut()
            time.sleep(hold)
        elif kind == "zk-cut-only":  # leader cut from ZooKeeper, still talking to its followers
            leader, role = self.pick()
            self.note(f"{kind}: {how} broker {leader} ({role}) from ZooKeeper only, {hold:.1f}s")
            net.zk_link(leader).stall() if stall else net.zk_link(leader).cut()
            time.sleep(hold)
        elif kind == "one-way":  # followers cannot reach the leader; the leader reaches them
            leader, role = self.pick()
            self.note(f"{kind}: {how} brokers {others(leader)} -> {leader} ({role}) only, {hold:.1f}s")
            for n in others(leader):
                net.link(n, leader).stall() if stall else net.link(n, leader).cut()
            time.sleep(hold)
        elif kind == "delay":
            delay = rng.uniform(0.05, 0.4)
            zk_delay = rng.uniform(0.05, 0.6)
            self.note(
                f"{kind}: every broker link {delay * 1000:.0f} ms, ZooKeeper {zk_delay * 1000:.0f} ms, {hold:.1f}s"
            )
            for link in net.links.values():
                link.delay(delay)
            for link in net.zk_links:
                link.delay(zk_delay)
            time.sleep(hold)
        elif kind == "pause":
            leader, role = self.pick()
            self.note(f"{kind}: SIGSTOP broker {leader} ({role}), {hold:.1f}s, SIGCONT")
            net.brokers[leader].pause()
            time.sleep(hold)
            net.brokers[leader].resume()
        elif kind == "kill":
            leader, role = self.pick()
            down = rng.uniform(1, SESSION_S + 2)
            self.note(f"{kind}: kill -9 broker {leader} ({role}), restart after {down:.1f}s")
            net.brokers[leader].kill()
            time.sleep(down)
            net.start(leader)
        else:
            raise AssertionError(kind)
        net.heal()
        self.note("healed")


def views(net: PartitionedNetwork) -> str:
    """Each broker's answer: leader and ISR of every partition (for a failure message)."""
    lines = []
    for node, b in enumerate(net.brokers):
        try:
            meta = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5)
        except KafkaException as exc:
            lines.append(f"broker {node}: {exc}")
            continue
        parts = [
            f"{t}-{p.id} leader {p.leader} isr {sorted(p.isrs)}"
            for t in sorted(meta.topics)
            for p in meta.topics[t].partitions.values()
            if sorted(p.isrs) != list(range(net.size))
        ]
        lines.append(f"broker {node} (controller {meta.controller_id}): " + ("; ".join(parts) or "all full"))
    return "\n".join(lines)


def converged(net: PartitionedNetwork) -> bool:
    """Every broker reports a leader and the full ISR for every partition of both topics."""
    for b in net.brokers:
        try:
            meta = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5)
        except KafkaException:
            return False
        for topic in (TOPIC, TX_TOPIC):
            parts = meta.topics.get(topic)
            if parts is None or len(parts.partitions) != PARTITIONS:
                return False
            if any(p.leader < 0 or sorted(p.isrs) != list(range(net.size)) for p in parts.partitions.values()):
                return False
    return True


# -- reading the outcome ------------------------------------------------------------------
def read_all(bootstrap: str, topic: str, isolation: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` up to the end (the high watermark, or the LSO for read_committed)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"final-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 120
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: read to the end of {sorted(at_end)} only in 120 s"
            for m in c.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise KafkaException(m.error())
                at_end.discard(m.partition())
                out[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def excerpt(
    w: IdempotentWriter,
    records: list[tuple[bytes, tuple[int, int]]],
    log: dict[int, list[tuple[int, bytes]]],
    started: float,
) -> str:
    """Each record: when it was acknowledged at which partition/offset, and what the log holds there."""
    held = {(p, o): v for p, rs in log.items() for o, v in rs}
    return "; ".join(
        f"{v.decode()} acked {w.acked_at[v] - started:.1f}s at {p}/{o}, the log has "
        f"{held.get((p, o), b'nothing').decode()} there"
        for v, (p, o) in records
    )


def client_epoch_bump_duplicates(
    writers: list[IdempotentWriter], twice: dict[bytes, list[tuple[int, int]]]
) -> dict[bytes, tuple[int, int]]:
    """Values written twice by the client itself, with the copy to drop: librdkafka's idempotent
    producer bumps its epoch when one partition answers OUT_OF_ORDER_SEQUENCE_NUMBER behind a
    failed request (normal: the broker refuses what follows a batch it did not write), and then
    sends again, as new records of the new epoch, the batches of every partition whose answer was
    uncertain (NOT_ENOUGH_REPLICAS_AFTER_APPEND, a timeout) although the broker had written them.
    No broker can tell those apart from new records; Kafka's get the same duplicates. This is
    librdkafka's issue 4953 (open; its pull request 4972 stops the bump), seen here once in 18
    local runs on 2026-11-27. Counted as the client's only when it says so: the writer logged that epoch bump, the
    value is in the log exactly twice, and its acknowledged offset is the later copy (the first
    was never acknowledged). Anything else stays a problem."""
    out: dict[bytes, tuple[int, int]] = {}
    for w in writers:
        if not w.bumps:
            continue
        prefix = b"w%d-" % w.writer_id
        for v, at in twice.items():
            if v.startswith(prefix) and len(at) == 2 and w.acked.get(v) == max(at):
                out[v] = min(at)
    return out


def check_idempotent(
    writers: list[IdempotentWriter], log: dict[int, list[tuple[int, bytes]]], started: float
) -> list[str]:
    problems: list[str] = [f"writer {w.writer_id}: fatal error at {w.fatal}" for w in writers if w.fatal]
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, records in log.items():
        for offset, value in records:
            where[value].append((p, offset))
    twice = {v: at for v, at in where.items() if len(at) > 1}
    resent = client_epoch_bump_duplicates(writers, twice)
    for v in resent:  # the client's, not the broker's: told apart, and each copy after the first dropped
        del twice[v]
        where[v] = [where[v][-1]]
    if twice:
        problems.append(f"{len(twice)} values in the log more than once, e.g. {sorted(twice.items())[:5]}")
    for w in writers:
        lost = {v: at for v, at in w.acked.items() if v not in where}
        if lost:
            problems.append(
                f"writer {w.writer_id}: {len(lost)} acknowledged records lost, e.g. "
                + excerpt(w, sorted(lost.items())[:5], log, started)
            )
        # librdkafka acknowledges without an offset (None) the records of a batch whose answer was
        # lost once a later batch of the same producer succeeded (an implicit ack): only the
        # partition is known for those
        moved = {
            v: at
            for v, at in w.acked.items()
            if v in where and where[v] != [at] and not (at[1] is None and where[v][0][0] == at[0])
        }
        if moved:
            problems.append(
                f"writer {w.writer_id}: {len(moved)} records not at their acknowledged offset, e.g. "
                + excerpt(w, sorted(moved.items())[:5], log, started)
                + f"; found at {[where[v] for v, _ in sorted(moved.items())[:5]]}"
            )
        prefix = b"w%d-" % w.writer_id
        for p, records in log.items():
            mine = [v for o, v in records if v.startswith(prefix) and (v not in resent or resent[v] != (p, o))]
            if mine != sorted(mine):
                first = next(i for i in range(1, len(mine)) if mine[i] < mine[i - 1])
                problems.append(
                    f"writer {w.writer_id} partition {p}: out of order at {mine[first - 1]!r}, {mine[first]!r}"
                )
    return problems


def check_transactions(
    h: TxnHistory, final: dict[int, list[tuple[int, bytes]]], seen: list[tuple[int, int, bytes]], group_offset: int
) -> list[str]:
    problems: list[str] = []
    committed = {txn for txn, _ in h.committed}
    last = max(committed, default=-1)
    by = group_offset - 1  # the transaction whose TxnOffsetCommit the group's offset is
    if not (by == last or (by > last and by in {txn for txn, _ in h.uncertain})):
        problems.append(
            f"the group's committed offset {group_offset} is transaction {by}'s; the last committed "
            f"transaction is {last}" + (" (that one was aborted)" if by in {txn for txn, _ in h.aborted} else "")
        )
    visible = {v: (p, o) for p, records in final.items() for o, v in records}
    count = sum(len(r) for r in final.values())
    if count != len(visible):
        problems.append(f"read_committed: {count - len(visible)} values twice")
    for txn, values in h.committed:
        missing = [v for v in values if v not in visible]
        if missing:
            problems.append(f"committed txn {txn}: {len(missing)}/6 not visible: {missing}")
        moved = [
            (v, h.offsets.get(v), visible[v])
            for v in values
            if v in visible and v in h.offsets and h.offsets[v] != visible[v]
        ]
        if moved:
            problems.append(f"committed txn {txn}: not at the acknowledged offset: {moved}")
    for txn, values in h.aborted:
        shown = [v for v in values if v in visible]
        if shown:
            problems.append(f"aborted txn {txn}: visible to read_committed: {shown}")
    for txn, values in h.uncertain:
        shown = [v for v in values if v in visible]
        if shown and len(shown) != len(values):
            problems.append(f"uncertain txn {txn}: partly visible: {shown}")
    aborted = {v for _, values in h.aborted for v in values}
    for p, offset, value in seen:
        if value in aborted:
            problems.append(f"the live read_committed consumer saw aborted {value!r} at {p}/{offset}")
        elif visible.get(value) != (p, offset):
            problems.append(
                f"the live read_committed consumer saw {value!r} at {p}/{offset}, finally at {visible.get(value)}"
            )
    return problems[:20]


def stable_offsets(net: PartitionedNetwork) -> str:
    """Each leader's answer for TX_TOPIC: last stable offset and high watermark per partition (for
    a failure message: a last stable offset stuck below committed records hides them)."""
    lines = []
    for node, b in enumerate(net.brokers):
        try:
            raw = Raw(b.port)
            raw.sock.settimeout(5)
            try:
                found = []
                for isolation in (1, 0):
                    body = {
                        "replica_id": -1,
                        "isolation_level": isolation,
                        "topics": [
                            {
                                "name": TX_TOPIC,
                                "partitions": [
                                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                    for p in range(PARTITIONS)
                                ],
                            }
                        ],
                    }
                    found.append(
                        {
                            q.partition_index: (q.offset if q.error_code == 0 else f"error {q.error_code}")
                            for q in raw.request(ApiKey.LIST_OFFSETS, 7, body).topics[0].partitions
                        }
                    )
            finally:
                raw.close()
        except (OSError, AssertionError, BrokerProcessError) as exc:
            lines.append(f"broker {node}: {exc!r}")
            continue
        lines.append(
            f"broker {node}: "
            + "; ".join(f"{TX_TOPIC}-{p} LSO {found[0][p]} HW {found[1][p]}" for p in range(PARTITIONS))
        )
    return "\n".join(lines)


def transactional_log(h: TxnHistory, raw_log: dict[int, list[tuple[int, bytes]]], missing: list[bytes]) -> list[str]:
    """Where the records of the transactions that are not wholly visible are: acknowledged at,
    and what the log (read_uncommitted) holds around them (for a failure message)."""
    where = {v: (p, o) for p, records in raw_log.items() for o, v in records}
    lines = []
    for v in missing:
        at = where.get(v)
        lines.append(f"{v.decode()}: acknowledged at {h.offsets.get(v)}, in the log at {at}")
        if at is not None:
            p, o = at
            near = [f"{q}:{w.decode()}" for q, w in raw_log[p] if abs(q - o) <= 8]
            lines.append(f"  {TX_TOPIC}-{p} near {o}: {' '.join(near)}")
    return lines


def check_watermarks(watchers: list[WatermarkWatcher], started: float) -> list[str]:
    """The high watermark never goes backwards, as clients see it: within a leader epoch each answer
    is at least the previous one, and a later epoch's leader never answers less than what an earlier
    epoch's leader answered (KIP-207: a new leader says OFFSET_NOT_AVAILABLE until its high watermark
    reaches its epoch's start). A deposed leader that has not heard yet answers its own, older
    value in its old epoch; that is not a step back."""
    problems = []
    for p in range(PARTITIONS):
        seen = sorted((o for w in watchers for o in w.observed[p]), key=lambda o: o[0])
        best: dict[int, tuple[float, int, int]] = {}  # epoch -> (time, offset, node) of its highest answer
        for at, epoch, offset, node in seen:
            earlier = [(e, b) for e, b in best.items() if e <= epoch and b[1] > offset]
            for e, (t, high, by) in earlier[:1]:
                problems.append(
                    f"partition {p}: broker {node} answered {offset} at epoch {epoch} "
                    f"({at - started:.1f}s) after broker {by} answered {high} at epoch {e} "
                    f"({t - started:.1f}s)"
                )
            if offset > best.get(epoch, (0, -1, -1))[1]:
                best[epoch] = (at, offset, node)
    return problems[:20]


def test_a_duplicate_is_the_clients_only_when_it_says_so():
    """The history check's one allowance (client_epoch_bump_duplicates), on the run that met it
    (seed 244727415): w1-00015688 written at 1/10577, answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, and
    written again at 1/11277 after librdkafka bumped its epoch. Without the client's word for the
    bump, or with the earlier copy acknowledged, it is a problem."""

    @dataclass
    class Writer:
        writer_id: int
        bumps: list[str]
        acked: dict[bytes, tuple[int, int]]
        fatal: str | None = None
        acked_at: dict[bytes, float] = field(default_factory=dict)

    log = {
        0: [],
        1: [(10577, b"w1-00015688"), (10580, b"w0-1"), (11277, b"w1-00015688"), (11281, b"w1-00015691")],
        2: [],
    }
    bump = ["1.0 All partitions drained, bumped epoch to PID{Id:1000,Epoch:1}"]
    acked = {b"w1-00015688": (1, 11277), b"w1-00015691": (1, 11281)}
    w0 = Writer(0, [], {b"w0-1": (1, 10580)})
    for writer, ok in (
        (Writer(1, bump, acked), True),
        (Writer(1, [], acked), False),  # no epoch bump logged
        (Writer(1, bump, {**acked, b"w1-00015688": (1, 10577)}), False),  # the first copy acknowledged
    ):
        writer.acked_at = w0.acked_at = {v: 0.0 for v in [*writer.acked, *w0.acked]}
        problems = check_idempotent([w0, writer], log, 0.0)  # type: ignore[list-item]
        assert (problems == []) is ok, problems
    thrice = {**log, 1: [*log[1], (11300, b"w1-00015688")]}
    writer = Writer(1, bump, acked, acked_at=dict.fromkeys(acked, 0.0))
    assert check_idempotent([w0, writer], thrice, 0.0)  # type: ignore[list-item]


# -- the test -----------------------------------------------------------------------------
@pytest.fixture
def net(zookeeper, tmp_path):
    with partitioned_cluster(zookeeper, tmp_path, "/strom-nemesis", CONFIGS) as network:
        yield network


# Issue 21. Before its fixes this failed: seed 1604240207 lost 17 acknowledged records (acknowledged
# at offsets 4837.. by broker 0, the leader cut from ZooKeeper and the brokers, after it had become a
# follower, truncated to 4819 and refilled those offsets from the new leader), then
# OUT_OF_ORDER_SEQUENCE_NUMBER (fatal); seed 1276705989 the same after SIGSTOP/SIGCONT of a leader;
# other runs: a follower truncating to the same offset in a loop, never back in the ISR; with those
# fixed but not the coordinator appends' one, the group offset the transactions commit stayed at the
# first transaction's (seeds 1276705989, 1199153235).
@pytest.mark.timeout(600)
def test_partitions_pauses_and_kills_keep_every_acknowledged_record(net):
    seed = int(os.environ.get("STROM_NEMESIS_SEED") or random.SystemRandom().randrange(1 << 32))
    rounds = int(os.environ.get("STROM_NEMESIS_ROUNDS", "7"))
    print(f"\nnemesis seed {seed} (replay: STROM_NEMESIS_SEED={seed}), {rounds} rounds", flush=True)
    bootstrap = servers(net)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"}) for t in (TOPIC, TX_TOPIC)]
    ).values():
        future.result(30)
    wait(lambda: converged(net), 60, "full ISRs before the faults")
    nemesis = Nemesis(net, seed)
    writers = [IdempotentWriter(bootstrap, i) for i in range(2)]
    txn = TransactionalWriter(bootstrap)
    reader = CommittedReader(bootstrap)
    watchers = [WatermarkWatcher(b, node) for node, b in enumerate(net.brokers)]
    threads = [*writers, txn, reader, *watchers]
    stuck: list[str] = []
    for t in threads:
        t.start()
    try:
        wait(
            lambda: all(len(w.acked) > 200 for w in writers) and txn.history.committed,
            60,
            "records and a transaction before the first fault",
        )
        for kind in nemesis.schedule(rounds):
            nemesis.apply(kind)
            try:
                wait(lambda: converged(net), 60, f"full ISRs after {kind}", interval_s=0.5)
            except AssertionError as exc:  # the history is still checked: what was acknowledged must be there
                stuck.append(f"{exc}:\n{views(net)}")
                nemesis.note(f"not converged: {exc}")
                break
            nemesis.note("converged")
            time.sleep(1)
        settled = len(writers[0].acked)
        if not stuck and not writers[0].fatal:
            wait(lambda: len(writers[0].acked) > settled + 100, 60, "records acknowledged after the last fault")
    except BaseException:
        for t in threads:
            t.stopping.set()
        for t in threads:
            t.join(10)
        raise
    for t in (*writers, txn):
        t.stopping.set()
    # a cluster that did not converge may not take every record: bounded, and part of the history
    unfinished = [p for w in writers for p in w.finish(60 if stuck else 150)] + txn.finish(60 if stuck else 200)
    for t in (reader, *watchers):
        t.finish()
    log = read_all(bootstrap, TOPIC, "read_uncommitted")
    committed_view = read_all(bootstrap, TX_TOPIC, "read_committed")
    group_offset = txn.committed_offset()
    h = txn.history
    summary = (
        f"nemesis seed {seed}: {rounds} rounds in {time.monotonic() - nemesis.started:.0f}s; "
        f"{sum(len(w.acked) for w in writers)} acknowledged of {sum(w.sent for w in writers)} sent "
        f"({sum(len(w.failed) for w in writers)} failed: "
        f"{sorted(set(e for w in writers for e in w.failed.values()))}; "
        f"produce() refused: {[w.refused for w in writers]}); "
        f"{sum(len(r) for r in log.values())} in the log; transactions: {len(h.committed)} committed, "
        f"{len(h.aborted)} aborted, {len(h.uncertain)} uncertain, {h.producers} producers, "
        f"{statistics.median(h.durations or [0]):.2f}s median, {max(h.durations or [0]):.1f}s max, group offset "
        f"{group_offset}; "
        f"{len(reader.seen)} read live; {sum(len(v) for w in watchers for v in w.observed.values())} watermarks"
    )
    print(summary, flush=True)
    print("\n".join(nemesis.log), flush=True)
    print("transactional producer's errors: " + "; ".join(h.errors), flush=True)
    if txn.client_hang:
        print(f"the transactional client hung: {txn.client_hang}", flush=True)
    if txn.hangs:
        print(f"transactional producers replaced after a client hang: {txn.hangs}", flush=True)
    counted: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, records in log.items():
        for offset, value in records:
            counted[value].append((p, offset))
    resent = client_epoch_bump_duplicates(writers, {v: at for v, at in counted.items() if len(at) > 1})
    if resent:
        print(
            f"librdkafka wrote {len(resent)} values twice after bumping its epoch (its issue 4953): "
            f"{sorted(resent.items())[:5]}; epoch bumps: {[b for w in writers for b in w.bumps][:5]}",
            flush=True,
        )
    txn_problems = check_transactions(h, committed_view, reader.seen, group_offset)
    problems = (
        stuck
        + unfinished
        + check_idempotent(writers, log, nemesis.started)
        + txn_problems
        + check_watermarks(watchers, nemesis.started)
    )
    if any(p.startswith("writer ") or "more than once" in p for p in problems):
        for w in writers:  # the clients' own account of their epoch bumps and sequence errors
            said = [line for line in w.eos_log if any(k in line for k in ("bump", "poch", "seq", "PID", "drain"))]
            problems += [f"writer {w.writer_id} eos: {line}" for line in said[-40:]]
    if txn_problems:  # what the brokers hold of those transactions, for the failure message
        visible = {v for records in committed_view.values() for _, v in records}
        missing = [v for _, values in h.committed for v in values if v not in visible]
        problems += transactional_log(h, read_all(bootstrap, TX_TOPIC, "read_uncommitted"), missing[:6])
        problems.append(stable_offsets(net))
        problems += ["transactional producer's errors: " + "; ".join(h.errors[-30:])]
        for node, b in enumerate(net.brokers):  # the coordinators' and marker writers' own words
            said = [line for line in b.stderr_path.read_text(errors="replace").splitlines() if "strom.txn" in line]
            problems += [f"broker {node}: {line}" for line in said[-40:]]
    assert not problems, f"{summary}\nfaults:\n" + "\n".join(nemesis.log) + "\nproblems:\n" + "\n".join(problems)
