"""A Strom cluster for tests: N brokers on 127.0.0.1 over a ZooKeeper.

    from strom.testing import cluster
    with cluster(3, mode="thread") as c:   # no Java, no ZooKeeper process: starts in well under 1 s
        ... c.bootstrap_servers ...         # every broker's address
        c.brokers[0].kill()                 # lose a broker (its ZooKeeper session left to expire)
        c.move_leader("orders", 0, 2)       # and the other cluster actions (cluster_actions.py)

``mode="thread"`` runs every broker in this process (one thread and trio loop each, real sockets)
over one in-memory ZooKeeper (``strom.testing.memzk``) on its own loop; ``mode="process"`` (the
default) runs brokers as processes over a real ZooKeeper (Debian's package; ``zookeeper_available()``
says whether it can run here). ``zookeeper="real"`` or ``"memory"`` overrides the pairing for a
thread-mode cluster. Replicated by default: new topics and ``__consumer_offsets`` get
``min(3, size)`` replicas. Everything (ZooKeeper's data, each broker's logs) lives under one
temporary directory removed by ``close()``.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .cluster_actions import ClusterActions
from .embedded import StromBroker, broker_props, config_key

READY_TIMEOUT_S = 30.0
CHROOT = "/strom"
MEMORY_SESSION_TIMEOUT_MS = "2000"  # the in-memory ZooKeeper has no tick: short sessions, fast failover


def zookeeper_available() -> str | None:
    """None when a real ZooKeeper can run here, else the reason it cannot."""
    from .zookeeper import unavailable

    return unavailable()


class ClusterBroker(StromBroker):
    """A broker of a :class:`StromCluster`: ``stop()``, ``start()``, ``restart()``, ``pause()``,
    ``resume()`` as every test broker, plus ``kill()``."""

    def __init__(self, node_id: int, cluster: StromCluster, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_id = node_id
        self.cluster = cluster
        self.zk_session: Any = None  # its in-memory ZooKeeper session (thread mode)

    def kill(self) -> None:
        """End the broker without a clean shutdown: its ZooKeeper session is left to expire
        (the other brokers notice after ``zookeeper.session.timeout.ms``); the data it wrote to its
        files stays (a process's page cache survives its kill). ``start()`` brings it back."""
        if self.mode == "process":
            if self._process is not None:
                self._process.kill()
            return
        session = self.zk_session
        if session is not None:
            session.abandon()
        self.stop()

    def pause(self) -> None:
        """Freeze the broker: requests held, its clock stopped, and ZooKeeper no longer hears from
        it (its session expires if paused for longer than its timeout, as a frozen JVM's would)."""
        super().pause()
        memory = self.cluster.memory_zookeeper
        if memory is not None and self.zk_session is not None:
            memory.call(memory.zk.pause_session, self.zk_session.session_id)

    def resume(self) -> None:
        memory = self.cluster.memory_zookeeper
        if memory is not None and self.zk_session is not None:
            memory.call(memory.zk.heal, self.zk_session.session_id)
        super().resume()


class StromCluster(ClusterActions):
    def __init__(
        self,
        size: int = 3,
        configs: Mapping[str, Any] | None = None,
        *,
        mode: str = "process",
        data_dir: str | None = None,
        keep_data: bool | None = None,
        node_configs: Callable[[int], Mapping[str, Any]] | None = None,
        zookeeper: str | None = None,
        **config_kwargs: Any,
    ):
        if size < 1:
            raise ValueError("a cluster needs at least one broker")
        if zookeeper not in (None, "memory", "real"):
            raise ValueError(f"zookeeper={zookeeper!r}: use 'memory' or 'real'")
        if zookeeper == "memory" and mode != "thread":
            raise ValueError("the in-memory ZooKeeper serves thread-mode brokers only (mode='thread')")
        self.size = size
        self.mode = mode
        self.zookeeper_kind = zookeeper or ("memory" if mode == "thread" else "real")
        rf = str(min(3, size))
        given = set(configs or {}) | {config_key(k) for k in config_kwargs}
        defaults = {
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            "zookeeper.session.timeout.ms": MEMORY_SESSION_TIMEOUT_MS if self.zookeeper_kind == "memory" else "6000",
            "replica.lag.time.max.ms": "5000",
        }
        self.props = broker_props(configs, config_kwargs, dev=True)
        self.props.update({k: v for k, v in defaults.items() if k not in given})
        self.node_configs = node_configs  # a broker's own configs by node id (e.g. its broker.rack)
        self._own_dir = data_dir is None
        self.keep_data = (not self._own_dir) if keep_data is None else keep_data
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="strom-cluster-"))
        self.zookeeper: Any = None  # the real ZooKeeper (ZooKeeperServer), if any
        self.memory_zookeeper: Any = None  # the in-memory one (memzk.ThreadedMemoryZooKeeper), if any
        self.brokers: list[ClusterBroker] = []
        self.startup_s = 0.0
        self._control: Any = None  # the cluster's HTTP control endpoint (cluster_control), once asked for

    @property
    def control_address(self) -> str:
        """host:port of the cluster's control endpoint (`strom control cluster|broker ...`, or POST
        /v1/cluster/<operation> and /v1/broker/<id>/<operation>); started on first use."""
        if self._control is None:
            from strom.testing.cluster_control import ClusterControl

            self._control = ClusterControl(self).start()
        return str(self._control.address)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers if b.running)

    def start(self) -> StromCluster:
        started = time.perf_counter()
        try:
            connect = self._start_zookeeper()
            if not self.brokers:
                self.brokers = [
                    ClusterBroker(
                        i,
                        self,
                        {
                            **self.props,
                            **broker_props(self.node_configs(i) if self.node_configs else {}, {}, dev=False),
                            "node.id": str(i),
                            "zookeeper.connect": connect,
                        },
                        mode=self.mode,
                        data_dir=self.data_dir / f"broker-{i}",
                        keep_data=True,
                        dev=False,
                    )
                    for i in range(self.size)
                ]
                for b in self.brokers:
                    if self.memory_zookeeper is not None:
                        b.server_options["zk_sessions"] = self._session_factory(b)
            self._start_brokers()
            self._wait_for_each_other()
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _start_zookeeper(self) -> str:
        """Start the ZooKeeper if needed; its connect string."""
        if self.zookeeper_kind == "memory":
            from .memzk import ThreadedMemoryZooKeeper

            if self.memory_zookeeper is None:
                self.memory_zookeeper = ThreadedMemoryZooKeeper()
            self.memory_zookeeper.start()  # again after stop(): the same znodes
            return "memory" + CHROOT
        from .zookeeper import ZooKeeperServer

        if self.zookeeper is None:
            self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper").start()
        return self.zookeeper.connect_string + CHROOT

    def _session_factory(self, broker: ClusterBroker) -> Callable[..., Any]:
        memory = self.memory_zookeeper.zk

        async def open_session(connect: str, timeout_s: float, connect_timeout_s: float) -> Any:
            session = await memory.session_factory(connect, timeout_s, connect_timeout_s)
            broker.zk_session = session
            return session

        return open_session

    def _start_brokers(self) -> None:
        """Start the brokers that are not running, side by side (thread mode) or in turn."""
        idle = [b for b in self.brokers if not b.running]
        if self.mode != "thread" or len(idle) < 2:
            for b in idle:
                b.start()
            return
        errors: list[BaseException] = []

        def start(b: ClusterBroker) -> None:
            try:
                b.start()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(b,), daemon=True) for b in idle]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _wait_for_each_other(self) -> None:
        """Return once every broker sees every other one registered (bounded)."""
        want = [b.node_id for b in self.brokers if b.running]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            seen = [b._control("status", {})["live_brokers"] for b in self.brokers if b.running]
            if all(s == want for s in seen):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not formed within {READY_TIMEOUT_S:.0f}s: brokers see {seen}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        self.heal_all()
        for b in self.brokers:
            b.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None
        if self.memory_zookeeper is not None:
            self.memory_zookeeper.stop()  # kept: start() serves the same znodes again

    def close(self) -> None:
        self.stop()
        if not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> StromCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def cluster(size: int = 3, configs: Mapping[str, Any] | None = None, **kwargs: Any) -> Iterator[StromCluster]:
    """A started cluster of ``size`` brokers and its ZooKeeper for the ``with`` block."""
    c = StromCluster(size, configs, **kwargs)
    with c:
        yield c
