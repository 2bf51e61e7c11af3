"""Strom brokers in the simulation: each a real ``BrokerServer`` (replica manager, fetcher,
controller, group and transaction coordinators) on the simulation's one trio loop, with the
simulated network, the in-memory ZooKeeper and the simulated disk underneath.

A crash takes the disk image of that instant (what was fsynced, or the page cache too), breaks the
broker's connections, abandons its ZooKeeper session (it expires on the server's clock, as a
killed process's does), cancels the broker's tasks and then puts the image back, so nothing the unwinding tasks
write survives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from strom.broker.config import BrokerConfig
from strom.broker.server.root import BrokerServer

from .disk import SimDisk
from .network import SimNetwork
from .trace import Trace

PORT = 9092


async def run_in_place(fn: Callable[[], Any]) -> Any:
    """Blocking storage work (flush, compaction) on the loop itself: one thread, one order."""
    await trio.lowlevel.checkpoint()
    return fn()


class SimBroker:
    def __init__(self, sim: Any, node_id: int, props: dict[str, str]) -> None:
        self.sim = sim
        self.node_id = node_id
        self.name = f"broker{node_id}"
        self.props = props
        self.dir = Path(props["log.dirs"])
        self.server: BrokerServer | None = None
        self.zk_session: Any = None
        self.scope: trio.CancelScope | None = None
        self.done: trio.Event | None = None
        self.alive = False
        self.starts = 0

    @property
    def address(self) -> tuple[str, int]:
        return (self.name, PORT)

    async def _zk_session(self, connect: str, session_timeout_s: float, connect_timeout_s: float) -> Any:
        self.zk_session = await self.sim.zk.session_factory(connect, session_timeout_s, connect_timeout_s)
        return self.zk_session

    def start(self) -> None:
        """Start the broker in the simulation's nursery (it registers and serves on its own)."""
        self.starts += 1
        self.server = BrokerServer(
            BrokerConfig(self.props),
            network=self.sim.net.node(self.name),
            run_blocking=run_in_place,
            zk_sessions=self._zk_session,
        )
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.alive = True
        self.sim.trace.add(self.name, f"start #{self.starts}")
        self.sim.nursery.start_soon(self._run, self.server, self.scope, self.done)

    async def _run(self, server: BrokerServer, scope: trio.CancelScope, done: trio.Event) -> None:
        try:
            with scope:
                await server.run()
        except Exception as exc:  # a broker that dies is part of the run: traced, restarted by the nemesis
            if self.alive:  # (a crash's own unwinding is not news)
                self.sim.trace.add(self.name, f"stopped by {type(exc).__name__}: {exc}")
            self.alive = False
        finally:
            done.set()

    def zk_session_id(self) -> int | None:
        session = self.zk_session
        return getattr(session, "session_id", None) if session is not None else None

    async def crash(self, keep_page_cache: bool) -> None:
        if self.scope is None or self.done is None:
            return
        disk: SimDisk = self.sim.disk
        image = disk.crash_image(self.dir, keep_page_cache)
        self.sim.trace.add(self.name, f"crash ({'page cache kept' if keep_page_cache else 'page cache lost'})")
        self.sim.net.crash(self.name)
        if self.zk_session is not None:
            self.zk_session.abandon()  # never closed: it expires after its timeout, as a killed process's
        self.alive = False
        self.scope.cancel()
        await self.done.wait()
        disk.restore(self.dir, image)
        self.server = None
        self.scope = self.done = None
        self.zk_session = None

    async def stop(self) -> None:
        """A clean shutdown (the end of a run)."""
        if self.scope is not None and self.done is not None:
            self.scope.cancel()
            await self.done.wait()
        self.alive = False


def broker_props(node_id: int, root: Path, overrides: dict[str, str]) -> dict[str, str]:
    props = {
        "node.id": str(node_id),
        "listeners": f"PLAINTEXT://broker{node_id}:{PORT}",
        "log.dirs": str(root / f"broker{node_id}"),
        "zookeeper.connect": "memzk:2181/strom",
        "zookeeper.session.timeout.ms": "6000",  # run.SESSION_TIMEOUT_S
        "zookeeper.connection.timeout.ms": "6000",
        "replica.lag.time.max.ms": "5000",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "1",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
        "group.initial.rebalance.delay.ms": "0",
        "log.flush.scheduler.interval.ms": "1000",
        "log.flush.offset.checkpoint.interval.ms": "2000",
        # small segments, so that runs roll and retain them; a follower appends one fetch answer
        # at once and a log refuses an append larger than a segment (as Kafka's), so a follower
        # fetches less than a segment per partition
        "log.segment.bytes": "16384",
        "replica.fetch.max.bytes": "4096",
        "log.retention.check.interval.ms": "1000",
        "auto.create.topics.enable": "false",
        "cluster.id": "sim-cluster",
    }
    props.update(overrides)
    return props


__all__ = ["SimBroker", "broker_props", "SimNetwork", "Trace"]
