"""One seed, one run: the cluster, the clients, the nemesis and the checks.

``run_seed(seed)`` builds N real brokers over the in-memory ZooKeeper, the simulated network and
the simulated disk, all on one trio loop whose clock is trio's MockClock (autojump: simulated
time jumps to the next timer whenever every task waits). Everything random comes from the seed:
the network's delays, the nemesis's faults, the clients' choices, trio's scheduling order
(trio's own deterministic-scheduling switch, seeded), Python's global ``random`` (fetch-session
ids, replica placement) and ``uuid.uuid4`` (topic ids). The same seed therefore replays the same
run, and :class:`SimResult` carries the trace and its digest to show it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import random
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing

from strom.broker.cluster.client import BrokerUnavailable
from strom.protocol.records.batch import iter_batches
from strom.storage import clock as storage_clock
from strom.storage import files
from strom.testing.memzk import MemoryZooKeeper

from .clients import (
    CREATE_TOPICS,
    FETCH,
    OFFSET_FETCH,
    REQUEST_TIMEOUT_S,
    Consumer,
    History,
    IdempotentProducer,
    KafkaClient,
    LeaderAckProducer,
    TransactionalProducer,
    earliest_offset,
    fetch_request,
    read_batches,
    transactional_records,
)
from .cluster import SimBroker, broker_props
from .disk import SimDisk
from .loop import sim_mock_clock
from .network import SimNetwork
from .trace import Trace

TOPIC = "sim"
SESSION_TIMEOUT_S = 6.0  # zookeeper.session.timeout.ms of the simulated brokers
EPOCH_MS = 1_700_000_000_000  # the simulated wall clock's start


FAULT_WEIGHTS = {
    "drop": 3,  # a connection breaks
    "partition": 2,  # two brokers cannot reach each other for a while
    "isolate": 2,  # a broker cannot reach the other brokers nor ZooKeeper (clients still reach it)
    "zk-cut": 2,  # a broker's ZooKeeper connection is cut for a while (its session may expire)
    "pause": 2,  # a broker reaches nobody and ZooKeeper hears nothing from it, as if stopped
    "crash": 2,  # a broker dies, with or without its page cache, and restarts later
    "zk-expire": 1,  # a broker's ZooKeeper session expires
    "disk": 1,  # one write or fsync fails (ENOSPC, EIO)
}


@dataclass
class SimConfig:
    brokers: int = 3
    partitions: int = 2
    duration: float = 20.0  # simulated seconds of workload and faults
    settle: float = 90.0  # simulated seconds the healed cluster gets to converge
    idempotent_producers: int = 2
    transactional_producers: int = 1
    faults: bool = True
    fault_rate: float = 1.0  # faults per simulated second, on average
    fault_weights: dict[str, int] = field(default_factory=lambda: dict(FAULT_WEIGHTS))  # which faults, how often
    # a crashed broker restarts before its old ZooKeeper session expired (a kill -9 and a quick
    # restart, or a fast reboot); off, it restarts only after the session timeout. On, it finds
    # the bounced-broker defect reported with issue 23 (a broker that lost its page cache resumes
    # leadership that its old session still held)
    fast_restarts: bool = False
    topic_configs: dict[str, str] = field(default_factory=dict)
    # acks=1 producers (LeaderAckProducer): their records are not counted as acknowledged; they
    # let leaders run ahead of the high watermark while a follower lags
    leader_ack_producers: int = 0
    # > 0: the transactional producer's delivery timeout (request.timeout.ms = delivery.timeout.ms,
    # seconds): a Produce not answered in time aborts the transaction (EndTxn abort in the same
    # epoch, an abortable error) and bumps the epoch (InitProducerId), as the Java producer does.
    # 0: it retries until the run ends, then re-initializes
    txn_delivery_timeout: float = 0.0
    # a fault the cluster triggers: when a leader adds a follower to the ISR of a partition of the
    # simulated topic (seen in ZooKeeper), with this probability it is cut off at once from the
    # brokers and ZooKeeper until its session expires, so the controller elects from the new ISR
    isolate_on_isr_expansion: float = 0.0
    broker_configs: dict[str, str] = field(default_factory=dict)


@dataclass
class SimResult:
    seed: int
    violations: list[str]
    trace: Trace
    digest: str
    sim_time: float
    acked: int
    txns: dict[str, int]
    faults: int
    config: SimConfig | None = None  # what ran: the replay command repeats it

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        lines = [f"seed {self.seed}: {'ok' if self.ok else 'FAILED'}"]
        for v in self.violations:
            lines.append(f"  violation: {v}")
        if not self.ok:
            lines.append("  leadership, acknowledgements and truncations:")
            lines.extend("    " + ln for ln in self.trace.lines if _readable(ln))
            from .options import replay_command  # (options reads SimConfig from this module)

            lines.append(f"  replay: {replay_command(self.seed, self.config)}")
        return "\n".join(lines)


def _readable(line: str) -> bool:
    return any(
        k in line for k in (" leads ", " follows ", "truncated", "<- broker", "crash", "start #", "nemesis", "stopped")
    )


class SimClock:
    """The broker's clock (``strom.storage.clock``) read from trio's simulated time."""

    def wall_ms(self) -> int:
        return EPOCH_MS + int(trio.current_time() * 1000)

    def monotonic(self) -> float:
        return trio.current_time()


@contextlib.contextmanager
def _determinism(seed: int) -> Iterator[None]:
    import trio._core._run as trio_run

    saved_random = random.getstate()
    saved_uuid4 = uuid.uuid4
    saved_switch = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_r = trio_run._r.getstate()
    ids = random.Random(seed ^ 0x5EED)
    random.seed(seed)
    trio_run._r.seed(seed)
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)  # type: ignore[assignment]
    try:
        yield
    finally:
        uuid.uuid4 = saved_uuid4  # type: ignore[assignment]
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_switch  # type: ignore[misc]
        trio_run._r.setstate(saved_r)
        random.setstate(saved_random)


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")  # object reprs: memory addresses differ from run to run


class _TraceLogs(logging.Handler):
    """The brokers' own log lines (INFO and up) into the trace, the run's directory elided."""

    def __init__(self, trace: Trace, root: str) -> None:
        super().__init__(logging.INFO)
        self.trace, self.root = trace, root

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = _ADDRESS.sub(" at 0x?", record.getMessage().replace(self.root, "<dir>"))
        except Exception:
            text = record.msg if isinstance(record.msg, str) else repr(record.msg)
        self.trace.add("log", f"{record.levelname} {record.name}: {text}")


@contextlib.contextmanager
def _captured_logs(trace: Trace, root: str) -> Iterator[None]:
    logger = logging.getLogger("strom")
    handler = _TraceLogs(trace, root)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _scratch_root() -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="strom-sim-", dir=base))


class Simulation:
    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed, self.config = seed, config
        self.rng = random.Random(seed)
        self.root = _scratch_root()
        self.trace = Trace(str(self.root))  # the directory is written as <dir>: traces replay byte for byte
        self.history = History()
        self.disk = SimDisk()
        self.net = SimNetwork(random.Random(self.rng.getrandbits(64)), on_event=lambda t: self.trace.add("net", t))
        self.zk = MemoryZooKeeper()
        self.nursery: trio.Nursery = None  # type: ignore[assignment]
        self.brokers = [
            SimBroker(self, i, broker_props(i, self.root, config.broker_configs)) for i in range(1, config.brokers + 1)
        ]
        self.faults = 0
        self._restarts: list[tuple[float, SimBroker]] = []
        self._start_above_hw: set[tuple[str, tuple[str, int], int]] = set()
        # the final read_uncommitted read: offset -> (producer id, value, or None for a marker)
        self._txn_logs: dict[int, dict[int, tuple[int, str | None]]] = {}

    # ------------------------------------------------------------------ the run
    async def main(self) -> None:
        cfg = self.config
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await nursery.start(self.zk.run)
            for b in self.brokers:
                b.start()
            admin = self.client("admin")
            await self._create_topic(admin)
            stop_at = trio.current_time() + cfg.duration
            nursery.start_soon(self._sample)
            async with trio.open_nursery() as readers:
                self.consumers = [
                    Consumer(self.client("reader-ru"), TOPIC, cfg.partitions, self.history, False, self.retains),
                    Consumer(self.client("reader-rc"), TOPIC, cfg.partitions, self.history, True, self.retains),
                ]
                for consumer in self.consumers:
                    readers.start_soon(consumer.run, stop_at + 60)
                async with trio.open_nursery() as work:
                    for i in range(cfg.idempotent_producers):
                        producer = IdempotentProducer(
                            self.client(f"idem{i}"), TOPIC, cfg.partitions, self.history, self._rng()
                        )
                        work.start_soon(producer.run, stop_at)
                    for i in range(cfg.transactional_producers):
                        tp = TransactionalProducer(
                            self.client(f"txn{i}", cfg.txn_delivery_timeout),
                            TOPIC,
                            cfg.partitions,
                            self.history,
                            self._rng(),
                            f"group-txn{i}",
                            cfg.txn_delivery_timeout,
                        )
                        work.start_soon(tp.run, stop_at)
                    self._start_more_producers(work, stop_at)
                    if cfg.faults:
                        work.start_soon(self._nemesis, stop_at)
                readers.cancel_scope.cancel()  # the writers are done (answered or given up)
            self._heal_all()
            await self._settle(admin)
            await self._final_checks(admin)
            for b in self.brokers:
                await b.stop()
            nursery.cancel_scope.cancel()

    def _start_more_producers(self, work: trio.Nursery, stop_at: float) -> None:
        for i in range(self.config.leader_ack_producers):
            producer = LeaderAckProducer(self.client(f"acks1-{i}"), TOPIC, self.config.partitions, self._rng())
            work.start_soon(producer.run, stop_at)
        if self.config.faults and self.config.isolate_on_isr_expansion > 0:
            work.start_soon(self._isolate_expanding_leaders, stop_at)

    async def _isolate_expanding_leaders(self, stop_at: float) -> None:
        """The ``isolate_on_isr_expansion`` fault: the partitions' state in ZooKeeper, read every
        simulated millisecond; a leader that has just added a follower to the ISR (same leader and
        epoch, a larger ISR) is isolated with that probability, before the follower's next fetch
        answer reaches it (bytes in flight wait out the isolation)."""
        rng = self._rng()
        last: dict[int, tuple[int, int, frozenset[int]]] = {}
        while trio.current_time() < stop_at:
            for index in range(self.config.partitions):
                raw = self.zk.data_of(f"/strom/brokers/topics/{TOPIC}/partitions/{index}/state")
                if raw is None:
                    continue
                state = json.loads(raw)
                now = (state["leader"], state["leader_epoch"], frozenset(state["isr"]))
                before = last.get(index)
                last[index] = now
                if before is None or before[:2] != now[:2] or not now[2] > before[2]:
                    continue
                leader = next((b for b in self.brokers if b.node_id == now[0]), None)
                if leader is not None and leader.alive and rng.random() < self.config.isolate_on_isr_expansion:
                    self.faults += 1
                    length = rng.uniform(SESSION_TIMEOUT_S + 0.5, 12.0)
                    grown = sorted(now[2] - before[2])
                    self.trace.add("nemesis", f"{leader.name} added {grown} to the ISR of {TOPIC}-{index}")
                    self._isolate(leader, "isolate", length)
            await trio.sleep(0.001)

    def _rng(self) -> random.Random:
        return random.Random(self.rng.getrandbits(64))

    def client(self, name: str, request_timeout: float = 0.0) -> KafkaClient:
        brokers = [b.address for b in self.brokers]
        return KafkaClient(name, self.net.node(name), brokers, self.trace, request_timeout or REQUEST_TIMEOUT_S)

    async def _create_topic(self, admin: KafkaClient) -> None:
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": self.config.partitions,
                    "replication_factor": len(self.brokers),
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in sorted(self.config.topic_configs.items())],
                }
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        }
        while True:
            try:
                answer = await admin.any_request(CREATE_TOPICS, 5, body)
                if answer.topics[0].error_code in (0, 36):  # created, or TOPIC_ALREADY_EXISTS on a retry
                    break
            except BrokerUnavailable:
                pass
            await trio.sleep(0.2)
        while len([tp for tp in admin.leaders if tp[0] == TOPIC]) < self.config.partitions:
            await admin.refresh([TOPIC])
            await trio.sleep(0.1)

    # ------------------------------------------------------------------ faults
    async def _nemesis(self, stop_at: float) -> None:
        rng = self._rng()
        while True:
            await trio.sleep(rng.expovariate(self.config.fault_rate))
            if trio.current_time() >= stop_at:
                return
            self.faults += 1
            await self._one_fault(rng, stop_at)

    async def _one_fault(self, rng: random.Random, stop_at: float) -> None:
        brokers = self.brokers
        b = rng.choice(brokers)
        kinds = sorted(self.config.fault_weights)
        kind = rng.choices(kinds, weights=[self.config.fault_weights[k] for k in kinds])[0]
        now = trio.current_time()
        length = rng.uniform(0.5, 12.0)
        say = lambda text: self.trace.add("nemesis", text)  # noqa: E731
        if kind == "drop":
            conns = list(self.net.connections.values())
            if conns:
                self.net.drop(rng.choice(conns))
        elif kind == "partition":
            other = rng.choice([x for x in brokers if x is not b])
            say(f"partition {b.name} from {other.name} for {length:.2f}s")
            self.net.partition(b.name, other.name, now + length)
        elif kind == "isolate" or kind == "pause":
            self._isolate(b, kind, length)
        elif kind == "zk-cut":
            sid = b.zk_session_id()
            if sid is not None and b.alive:
                say(f"cut {b.name} from ZooKeeper for {length:.2f}s")
                self.zk.disconnect_for(sid, length)
        elif kind == "zk-expire":
            sid = b.zk_session_id()
            if sid is not None and b.alive:
                say(f"expire {b.name}'s ZooKeeper session")
                self.zk.expire(sid)
        elif kind == "crash":
            if b.alive and sum(x.alive for x in brokers) > 1:
                # a power loss (the page cache lost) only while every replica is in sync: losing the
                # unflushed tail of more than one in-sync replica at once is outside what acks=all
                # promises (the README's durability section), and the checker would call it a loss
                keep = rng.random() < 0.5 or self._converged() != ""
                delay = length / 3 if self.config.fast_restarts else SESSION_TIMEOUT_S + length / 3
                say(f"crash {b.name}, restart in {delay:.2f}s")
                await b.crash(keep_page_cache=keep)
                self.nursery.start_soon(self._restart_later, b, delay)
        elif kind == "stall":  # a lossy link between two brokers: one way of one connection
            brokers_ = {x.name for x in brokers}
            conns = [c for c in self.net.connections.values() if c.client in brokers_ and c.server in brokers_]
            if conns:
                self.net.stall(rng.choice(conns), rng.randrange(2), now + rng.uniform(0.5, 4.0))
        elif kind == "disk":
            op, err = rng.choice([("write", errno.ENOSPC), ("fsync", errno.EIO), ("write", errno.EIO)])
            say(f"disk: {op} fails with {errno.errorcode[err]} once in {b.name}")
            self.disk.fail(op, err, path=str(b.dir) + os.sep, times=1, after=rng.randrange(5))

    def _isolate(self, b: SimBroker, kind: str, length: float) -> None:
        """``isolate``: ``b`` reaches neither the other brokers nor ZooKeeper for ``length``
        seconds; ``pause``: nor the clients, and ZooKeeper hears nothing from it (SIGSTOP)."""
        now = trio.current_time()
        peers = [x.name for x in self.brokers if x is not b]
        if kind == "pause":
            peers += [c for c in self._client_names()]
        self.trace.add(
            "nemesis",
            f"{kind} {b.name} for {length:.2f}s (brokers{' and clients' if kind == 'pause' else ''} and ZooKeeper)",
        )
        for peer in peers:
            self.net.partition(b.name, peer, now + length)
        sid = b.zk_session_id()
        if sid is not None and b.alive:
            self.zk.disconnect_for(sid, length, notify=kind != "pause")

    def _client_names(self) -> list[str]:
        return (
            ["admin", "reader-ru", "reader-rc"]
            + [f"idem{i}" for i in range(self.config.idempotent_producers)]
            + [f"txn{i}" for i in range(self.config.transactional_producers)]
            + [f"acks1-{i}" for i in range(self.config.leader_ack_producers)]
        )

    async def _restart_later(self, b: SimBroker, delay: float) -> None:
        await trio.sleep(delay)
        if not b.alive and b.scope is None:
            b.start()

    def _heal_all(self) -> None:
        self.trace.add("nemesis", "heal everything")
        self.net.heal()
        self.disk.clear()
        for b in self.brokers:
            sid = b.zk_session_id()
            if sid is not None:
                self.zk.heal(sid)

    # ------------------------------------------------------------------ observing
    def _partitions(self, b: SimBroker) -> dict[tuple[str, int], Any]:
        if not b.alive or b.server is None:
            return {}
        return dict(sorted(b.server.replicas.partitions.items()))

    async def _sample(self) -> None:
        """Who leads which epoch, high watermarks and truncations, as they change."""
        last: dict[tuple[str, tuple[str, int]], tuple] = {}
        while True:
            for b in self.brokers:
                for key, p in self._partitions(b).items():
                    leo = p.log.log_end_offset
                    state = (p.leader_id, p.leader_epoch, tuple(p.isr))
                    before = last.get((b.name, key))
                    name = f"{key[0]}-{key[1]}"
                    if before is None or before[0] != state:
                        self.trace.add(
                            b.name,
                            f"{'leads' if p.is_leader else 'follows'} {name} epoch {p.leader_epoch} "
                            f"leader {p.leader_id} isr {list(p.isr)} leo {leo} hw {p.high_watermark}",
                        )
                    self._check_log_start(b, key, p)
                    if before is not None and leo < before[1]:
                        self.trace.add(b.name, f"truncated {name} from {before[1]} to {leo}")
                    last[(b.name, key)] = (state, leo)
            await trio.sleep(0.1)

    @property
    def retains(self) -> bool:
        """The simulated topic has retention (``retention.ms`` / ``retention.bytes`` in
        ``SimConfig.topic_configs``): records below the log start offset may be gone for good."""
        return any(k in self.config.topic_configs for k in ("retention.ms", "retention.bytes"))

    def _check_log_start(self, b: SimBroker, key: tuple[str, int], p: Any) -> None:
        """Kafka's invariant logStartOffset <= highWatermark on every leader (read directly, at each
        sample): retention (and DeleteRecords) delete only below the high watermark."""
        start, hw = p.log.log_start_offset, p.high_watermark
        if p.is_leader and start > hw and (b.name, key, p.leader_epoch) not in self._start_above_hw:
            self._start_above_hw.add((b.name, key, p.leader_epoch))
            self.history.violations.append(
                f"{b.name} leads {key[0]}-{key[1]} in epoch {p.leader_epoch} with its log start offset "
                f"{start} above its high watermark {hw} at {trio.current_time():.4f}"
            )

    # ------------------------------------------------------------------ after the run
    async def _settle(self, admin: KafkaClient) -> None:
        deadline = trio.current_time() + self.config.settle
        for b in self.brokers:
            if not b.alive and b.scope is None:
                b.start()
        problem = ""
        while trio.current_time() < deadline:
            for b in self.brokers:
                if b.alive and b.server is not None and b.server.logs is not None and b.server.logs.offline_dirs:
                    # a disk error took its log dir offline: the operator repairs it and restarts
                    self.trace.add(b.name, "log dir offline: restarted")
                    await b.stop()
                if not b.alive and b.done is not None and b.done.is_set():  # stopped by itself, or above
                    b.scope = None
                    b.start()
            problem = self._converged()
            if not problem:
                self.trace.add("sim", "converged")
                return
            await trio.sleep(0.5)
        self.history.violations.append(f"the healed cluster did not converge in {self.config.settle:.0f}s: {problem}")

    def _converged(self) -> str:
        if not all(b.alive and b.server is not None and b.server.cluster is not None for b in self.brokers):
            return "not every broker is up"
        keys = sorted({k for b in self.brokers for k in self._partitions(b)})
        for key in keys:
            replicas = [b for b in self.brokers if key in self._partitions(b)]
            leaders = [b for b in replicas if self._partitions(b)[key].is_leader]
            if len(leaders) != 1:
                return f"{key}: {len(leaders)} leaders"
            lp = self._partitions(leaders[0])[key]
            if sorted(lp.isr) != sorted(lp.replicas):
                return f"{key}: isr {lp.isr} of replicas {lp.replicas} (leader {lp.local_id} epoch {lp.leader_epoch})"
            for b in replicas:
                p = self._partitions(b)[key]
                if p.log.log_end_offset != lp.log.log_end_offset:
                    return (
                        f"{key}: broker {b.node_id} log end {p.log.log_end_offset} vs leader's {lp.log.log_end_offset}"
                    )
            if lp.high_watermark != lp.log.log_end_offset:
                return f"{key}: high watermark {lp.high_watermark} below log end {lp.log.log_end_offset}"
            if key[0] == TOPIC and lp.log.last_stable_offset != lp.high_watermark:
                lso = lp.log.last_stable_offset
                return f"{key}: last stable offset {lso} stuck below high watermark {lp.high_watermark}"
        return ""

    async def _read_all(self, admin: KafkaClient, index: int, read_committed: bool) -> tuple[dict[int, str], int, int]:
        """Everything a consumer gets from the leader, from the log start to the high watermark;
        also the high watermark and the log start offset of the last answer."""
        out: dict[int, str] = {}
        position, hw, start = 0, -1, 0
        txn_log = self._txn_logs.setdefault(index, {}) if not read_committed else {}
        tp = (TOPIC, index)
        for _ in range(10_000):
            await admin.refresh([TOPIC])
            address = admin.leader_address(tp)
            leader = admin.leaders.get(tp)
            if address is None or leader is None:
                await trio.sleep(0.1)
                continue
            body = fetch_request(TOPIC, index, leader[1], position, read_committed, 0, 0)
            try:
                answer = await admin.request(address, FETCH, 12, body)
            except BrokerUnavailable:
                continue
            p = answer.responses[0].partitions[0]
            if p.error_code == 1 and self.retains:  # OFFSET_OUT_OF_RANGE: behind the log start
                earliest = await earliest_offset(admin, address, TOPIC, index, leader[1])
                position = max(position, earliest if earliest is not None else position)
                continue
            if p.error_code != 0:
                await trio.sleep(0.1)
                continue
            hw, start = p.high_watermark, p.log_start_offset
            data = bytes(p.records or b"")
            aborted = [(a.producer_id, a.first_offset) for a in (p.aborted_transactions or [])]
            for offset, value in read_batches(data, aborted, read_committed):
                out[offset] = value
            for offset, pid, txn_value in transactional_records(data):
                txn_log[offset] = (pid, txn_value)
            ends = [h.last_offset + 1 for _, h in iter_batches(memoryview(data), partial_tail=True)]
            limit = p.last_stable_offset if read_committed else hw
            if ends:
                position = max(ends)
            if not ends or position >= limit:
                return out, hw, start
        return out, hw, start

    def _replica_records(self, b: SimBroker, key: tuple[str, int], below: int, start: int = 0) -> dict[int, str]:
        p = self._partitions(b)[key]
        out: dict[int, str] = {}
        offset = max(p.log.log_start_offset, start)
        while offset < below:
            info = p.log.read(offset, 1 << 20, max_offset=below)
            if info.records is None:
                break
            data = info.records.read()
            ends = [h.last_offset + 1 for _, h in iter_batches(memoryview(data), partial_tail=True)]
            if not ends:
                break
            for o, v in read_batches(data, [], False):
                if o >= start:
                    out[o] = v
            offset = max(ends)
        return out

    async def _final_checks(self, admin: KafkaClient) -> None:
        h = self.history
        violations = h.violations
        if violations and violations[-1].startswith("the healed cluster did not converge"):
            converged = False
        else:
            converged = True
        final: dict[int, dict[int, str]] = {}
        committed: dict[int, dict[int, str]] = {}
        # the log start offset of each partition at the end: retention may have deleted what is
        # below it (with retention only; without, nothing may be gone and it must be 0)
        starts: dict[int, int] = {}
        for index in range(self.config.partitions):
            final[index], hw, start = await self._read_all(admin, index, False)
            committed[index], _, start_rc = await self._read_all(admin, index, True)
            starts[index] = max(start, start_rc)
            if starts[index] and not self.retains:
                violations.append(f"the log start offset of {TOPIC}-{index} is {starts[index]} without retention")
            tp = (TOPIC, index)
            # every record readers saw below the high watermark is still there, unchanged
            for (seen_tp, offset), (value, reader, when) in sorted(h.seen.items()):
                if seen_tp == tp and starts[index] <= offset < hw and final[index].get(offset) != value:
                    violations.append(
                        f"{TOPIC}-{index}@{offset} was read as {value!r} by {reader} at {when:.4f}, "
                        f"now holds {final[index].get(offset)!r}"
                    )
            # no value twice (idempotence)
            where: dict[str, int] = {}
            for offset, value in sorted(final[index].items()):
                if value in where:
                    violations.append(f"{value!r} is in {TOPIC}-{index} twice: offsets {where[value]} and {offset}")
                where[value] = offset
            # in-sync replicas agree below the high watermark
            if converged:
                replicas = [b for b in self.brokers if tp in self._partitions(b)]
                common = max([starts[index]] + [self._partitions(b)[tp].log.log_start_offset for b in replicas])
                views = {b.node_id: self._replica_records(b, tp, hw, common) for b in replicas}
                first = next(iter(views.values()), {})
                for view in views.values():
                    if view != first:
                        diff = sorted(o for o in set(view) | set(first) if view.get(o) != first.get(o))[:5]
                        violations.append(f"replicas of {TOPIC}-{index} differ below the high watermark {hw} at {diff}")
                        break
        for producer, tp, offset, value in h.acked:
            got = final[tp[1]].get(offset)
            if got != value and offset >= starts[tp[1]]:
                violations.append(f"acknowledged {value!r} at {tp[0]}-{tp[1]}@{offset} ({producer}) is lost: {got!r}")
        visible = {v for part in committed.values() for v in part.values()}
        retained = self._retained_values(final, starts)
        for txn in h.txns:
            sent = [v for v in txn.sent if retained(txn, v)]
            shown = [v for v in sent if v in visible]
            if txn.outcome == "committed" and len(shown) != len(sent):
                missing = [v for v in sent if v not in visible]
                violations.append(
                    f"committed transaction {txn.producer}#{txn.number} misses {missing} for read_committed"
                )
            elif txn.outcome == "aborted" and shown:
                violations.append(f"aborted transaction {txn.producer}#{txn.number} shows {shown} to read_committed")
            elif txn.outcome in ("unknown", "open") and shown and len(shown) != len(sent):
                violations.append(
                    f"transaction {txn.producer}#{txn.number} is half visible to read_committed: {shown} of {sent}"
                )
        self._check_transactions_delimited()
        aborted_values = {v for txn in h.txns if txn.outcome == "aborted" for v in txn.sent}
        for reader, _, _, value in h.committed_reads:
            if value in aborted_values:
                violations.append(f"{reader} (read_committed) was given {value!r} of an aborted transaction")
        await self._check_group_offsets(admin)

    def _check_transactions_delimited(self) -> None:
        """In each partition, the records a transactional producer id wrote between two of its
        markers belong to one transaction: a record of a transaction that arrives after the
        transaction ended (a Produce delayed past EndTxn, KIP-890) would otherwise open a
        transaction of its own or join the producer's next one (and share its fate)."""
        txn_of = {v: f"{txn.producer}#{txn.number}" for txn in self.history.txns for v in txn.sent}
        for index, records in sorted(self._txn_logs.items()):
            open_txn: dict[int, str] = {}  # producer id -> the transaction its records since its last marker belong to
            for offset, (pid, value) in sorted(records.items()):
                if value is None:
                    open_txn.pop(pid, None)
                    continue
                txn = txn_of.get(value, "?")
                first = open_txn.setdefault(pid, txn)
                if first != txn:
                    self.history.violations.append(
                        f"{TOPIC}-{index}@{offset}: {value!r} of transaction {txn} follows records of {first} "
                        f"with no marker between them (a record appended after its transaction ended)"
                    )
                    open_txn[pid] = txn

    def _retained_values(self, final: dict[int, dict[int, str]], starts: dict[int, int]) -> Any:
        """Which values of a transaction the final reads must account for: all of them without
        retention; with it, those not known to lie below their partition's final log start (an
        acknowledged one at its offset; one never acknowledged only if it is still in the log)."""
        if not self.retains:
            return lambda txn, value: True
        present = {v for part in final.values() for v in part.values()}

        def retained(txn: Any, value: str) -> bool:
            for tp, offset, v in txn.records:
                if v == value:
                    return offset >= starts[tp[1]]
            return value in present

        return retained

    async def _move_group_coordinator(self) -> None:
        """Stop the broker leading ``__consumer_offsets`` (cleanly) so that another loads the
        groups from the log: what a coordinator only kept in memory is gone after that."""
        for b in self.brokers:
            p = self._partitions(b).get(("__consumer_offsets", 0))
            if p is not None and p.is_leader:
                self.trace.add(b.name, "stopped to move the group coordinator")
                await b.stop()
                return

    async def _check_group_offsets(self, admin: KafkaClient) -> None:
        moved = False
        by_group: dict[str, list] = {}
        for txn in self.history.txns:
            if txn.group:
                by_group.setdefault(txn.group, []).append(txn)
        for group, txns in sorted(by_group.items()):
            expect: dict[tuple[str, int], set[int]] = {}
            for txn in txns:
                for tp, off in txn.offsets.items() if txn.outcome in ("committed", "unknown", "open") else ():
                    if txn.outcome == "committed":
                        expect[tp] = {off}
                    else:
                        expect.setdefault(tp, {-1}).add(off)
                if txn.outcome in ("unknown", "open") and not txn.offsets:
                    continue
            if not expect:
                continue
            if not moved:  # once: every group lives in the one `__consumer_offsets` partition, and
                # stopping a second broker would leave the cluster below min.insync.replicas, where
                # (as in Kafka) no transaction marker can be written and pending offsets stay unstable
                await self._move_group_coordinator()
                moved = True
            answer = None
            for _ in range(50):
                address = await admin.coordinator(0, group)
                if address is None:
                    await trio.sleep(0.2)
                    continue
                body = {
                    "group_id": group,
                    "topics": [{"name": TOPIC, "partition_indexes": list(range(self.config.partitions))}],
                    "require_stable": True,
                }
                try:
                    answer = await admin.request(address, OFFSET_FETCH, 7, body)
                except BrokerUnavailable:
                    continue
                if answer.error_code == 0 and all(p.error_code == 0 for t in answer.topics for p in t.partitions):
                    break
                answer = None
                await trio.sleep(0.2)
            if answer is None:
                self.history.violations.append(f"group {group}'s offsets could not be read")
                continue
            got = {(t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions}
            for tp, allowed in sorted(expect.items()):
                if got.get(tp, -1) not in allowed:
                    self.history.violations.append(
                        f"group {group} has offset {got.get(tp)} for {tp[0]}-{tp[1]}; "
                        f"committed transactions say {sorted(allowed)}"
                    )


def run_seed(seed: int, config: SimConfig | None = None) -> SimResult:
    config = config or SimConfig()
    sim = Simulation(seed, config)
    try:
        with (
            _determinism(seed),
            files.use_ops(sim.disk),
            storage_clock.use_clock(SimClock()),
            _captured_logs(sim.trace, str(sim.root)),
        ):
            trio.run(sim.main, clock=sim_mock_clock())
            sim_time = 0.0
    except Exception as exc:
        sim.history.violations.append(f"the simulation itself failed: {type(exc).__name__}: {exc}")
        import traceback

        sim.trace.add("sim", traceback.format_exc().replace(str(sim.root), "<dir>"))
        sim_time = -1.0
    finally:
        files.cache.forget_under(str(sim.root))
        shutil.rmtree(sim.root, ignore_errors=True)
    last = sim.trace.lines[-1].split()[0] if sim.trace.lines else "0"
    sim_time = float(last) if sim_time == 0.0 else sim_time
    outcomes: dict[str, int] = {}
    for txn in sim.history.txns:
        outcomes[txn.outcome] = outcomes.get(txn.outcome, 0) + 1
    return SimResult(
        seed,
        list(sim.history.violations),
        sim.trace,
        sim.trace.digest(),
        sim_time,
        len(sim.history.acked),
        outcomes,
        sim.faults,
        config,
    )
