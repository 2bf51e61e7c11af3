"""A Strom cluster for tests: a real ZooKeeper (Debian's package) and N brokers on 127.0.0.1.

    from strom.testing import cluster, zookeeper_available
    if zookeeper_available() is None:
        with cluster(3) as c:
            ... c.bootstrap_servers ...   # every broker's address
            c.brokers[0].stop()            # lose a broker; .start() brings it back

Brokers run as processes by default (``mode="thread"`` runs them in this process, one thread and
trio loop each). Replicated by default: new topics and ``__consumer_offsets`` get
``min(3, size)`` replicas. Everything (ZooKeeper's data, each broker's logs) lives under one
temporary directory removed by ``close()``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .embedded import StromBroker, broker_props, config_key

READY_TIMEOUT_S = 30.0


def zookeeper_available() -> str | None:
    """None when a real ZooKeeper can run here, else the reason it cannot."""
    from .zookeeper import unavailable

    return unavailable()


class StromCluster:
    def __init__(
        self,
        size: int = 3,
        configs: Mapping[str, Any] | None = None,
        *,
        mode: str = "process",
        data_dir: str | None = None,
        keep_data: bool | None = None,
        node_configs: Callable[[int], Mapping[str, Any]] | None = None,
        **config_kwargs: Any,
    ):
        if size < 1:
            raise ValueError("a cluster needs at least one broker")
        self.size = size
        self.mode = mode
        rf = str(min(3, size))
        given = set(configs or {}) | {config_key(k) for k in config_kwargs}
        defaults = {
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "5000",
        }
        self.props = broker_props(configs, config_kwargs, dev=True)
        self.props.update({k: v for k, v in defaults.items() if k not in given})
        self.node_configs = node_configs  # a broker's own configs by node id (e.g. its broker.rack)
        self._own_dir = data_dir is None
        self.keep_data = (not self._own_dir) if keep_data is None else keep_data
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="strom-cluster-"))
        self.zookeeper = None
        self.brokers: list[StromBroker] = []

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers if b.running)

    def start(self) -> StromCluster:
        from .zookeeper import ZooKeeperServer

        try:
            if self.zookeeper is None:
                self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper").start()
            if not self.brokers:
                connect = self.zookeeper.connect_string + "/strom"
                self.brokers = [
                    StromBroker(
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
                b.start()
            self._wait_for_each_other()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_for_each_other(self) -> None:
        """Return once every broker sees every other one registered (bounded)."""
        want = list(range(self.size))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            seen = [b._control("status", {})["live_brokers"] for b in self.brokers]
            if all(s == want for s in seen):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not formed within {READY_TIMEOUT_S:.0f}s: brokers see {seen}")
            time.sleep(0.05)

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None

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
