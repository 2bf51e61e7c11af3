"""Three Strom brokers whose every network path but the clients' runs through a controllable
proxy (compat_tests/support/netproxy.py): one link per directed broker pair and one per broker to ZooKeeper.

Each broker listens twice: PLAINTEXT, which clients use directly, and INTERNAL, the
inter-broker listener, which it advertises at the address of its own inbound proxy. Brokers
find each other's INTERNAL address in ZooKeeper's registrations, so every replica fetch and
every transaction-marker or verification request from broker i to broker j goes through j's
proxy; that proxy tells i's connections from k's by the client id of their first request
(``strom-replica-<i>``, ``strom-txn-<i>``) and puts them on link ``i->j``. Each broker's
``zookeeper.connect`` names its own proxy in front of the one ZooKeeper.

    with partitioned_cluster(zookeeper, tmp_path, "/strom-nemesis", configs) as net:
        net.isolate_from_brokers(leader)   # cut every link to and from ``leader``
        net.zk_link(leader).stall()        # its ZooKeeper session will expire
        net.heal()
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compat_tests.support.cluster import BASE_CONFIGS
from compat_tests.support.netproxy import Link, Proxy, kafka_client_id
from strom.tools.broker_process import HOST, BrokerProcess

CLIENT_ID = re.compile(r"strom-(?:replica|txn)-(\d+)$")


class ProxiedBroker(BrokerProcess):
    """A broker with a PLAINTEXT listener for clients (first: the ready file's port) and an
    INTERNAL one for brokers advertised at ``internal_advertised``; both ports kept across restarts."""

    def __init__(self, workdir: Path, overrides: dict[str, str], internal_advertised: str) -> None:
        super().__init__(
            workdir,
            {
                **overrides,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "advertised.listeners": f"INTERNAL://{internal_advertised}",
            },
        )
        self.internal_port = 0
        self.paused = False

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index(f"listeners=PLAINTEXT://{HOST}:{self._port}")
        cmd[at] += f",INTERNAL://{HOST}:{self.internal_port}"
        return cmd

    def start(self, timeout: float = 15.0) -> ProxiedBroker:
        super().start(timeout)
        assert self.info is not None
        internal = next(text for text in self.info.listeners if text.startswith("INTERNAL://"))
        self.internal_port = int(internal.rsplit(":", 1)[1])
        self.paused = False
        return self

    def pause(self) -> None:
        """SIGSTOP: the process freezes, its sockets stay open."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def kill(self) -> int | None:
        if self.paused and self.running:
            self.resume()
        return super().kill()

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.paused and self.running:
            self.resume()
        return super().stop(timeout)


class PartitionedNetwork:
    """The brokers and the links between them; see the module's docstring."""

    def __init__(self, size: int, zookeeper_address: tuple[str, int]) -> None:
        self.size = size
        self.links: dict[tuple[int, int], Link] = {
            (i, j): Link(f"{i}->{j}") for i in range(size) for j in range(size) if i != j
        }
        self.zk_links = [Link(f"{i}->zk") for i in range(size)]
        self.strays = Link("unknown->broker")  # connections without a broker's client id (none expected)
        self.inbound = [Proxy(f"to-{j}", classify=self._classifier(j)) for j in range(size)]
        self.zk_proxies = [Proxy(f"zk-{i}", zookeeper_address, link=self.zk_links[i]) for i in range(size)]
        self.brokers: list[ProxiedBroker] = []

    def _classifier(self, target: int):
        def classify(sock):
            client_id, consumed = kafka_client_id(sock)
            match = CLIENT_ID.match(client_id or "")
            source = int(match.group(1)) if match else -1
            return self.links.get((source, target), self.strays), consumed

        return classify

    # -- brokers ----------------------------------------------------------------------
    def start(self, node: int) -> ProxiedBroker:
        broker = self.brokers[node].start()
        self.inbound[node].upstream = (HOST, broker.internal_port)
        return broker

    def restart(self, node: int) -> ProxiedBroker:
        self.brokers[node].kill()
        return self.start(node)

    # -- faults -----------------------------------------------------------------------
    def link(self, source: int, target: int) -> Link:
        return self.links[(source, target)]

    def zk_link(self, node: int) -> Link:
        return self.zk_links[node]

    def between(self, group_a: list[int], group_b: list[int]) -> list[Link]:
        """Every directed link between the two groups, both ways."""
        return [self.links[(a, b)] for a in group_a for b in group_b if a != b] + [
            self.links[(b, a)] for a in group_a for b in group_b if a != b
        ]

    def isolate_from_brokers(self, node: int, stall: bool = False) -> list[Link]:
        links = self.between([node], [n for n in range(self.size) if n != node])
        for link in links:
            link.stall() if stall else link.cut()
        return links

    def all_links(self) -> list[Link]:
        return [*self.links.values(), *self.zk_links]

    def heal(self) -> None:
        for link in self.all_links():
            link.heal()

    def close(self) -> None:
        self.heal()
        for proxy in (*self.inbound, *self.zk_proxies):
            proxy.close()


@contextmanager
def partitioned_cluster(
    zookeeper, base: Path, chroot: str, configs: dict[str, str] | None = None, size: int = 3
) -> Iterator[PartitionedNetwork]:
    host, port = zookeeper.connect_string.split(":")
    net = PartitionedNetwork(size, (host, int(port)))
    try:
        for node in range(size):
            net.brokers.append(
                ProxiedBroker(
                    base / f"b{node}",
                    {
                        **BASE_CONFIGS,
                        **(configs or {}),
                        "node.id": str(node),
                        "zookeeper.connect": net.zk_proxies[node].address + chroot,
                    },
                    net.inbound[node].address,
                )
            )
            net.start(node)
        yield net
    finally:
        for broker in net.brokers:
            broker.stop()
        net.close()
