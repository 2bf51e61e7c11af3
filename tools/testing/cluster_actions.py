"""Cluster actions for multi-broker tests: move a partition's leader or a coordinator, cut a broker
off, and wait (bounded, never a fixed sleep in the test) until the cluster is in a given state.

Mixed into :class:`strom.testing.zkcluster.StromCluster`, so a test calls them on the cluster::

    c.move_leader("orders", 0, 2)                  # reassignment order + ElectLeaders (preferred)
    c.move_group_coordinator("billing", 1)         # the leader of its __consumer_offsets partition
    c.isolate(0, seconds=3)                        # from the other brokers and from ZooKeeper
    c.wait_for_isr("orders", 0)                    # every replica back in sync

Everything goes through Kafka's own means: AlterPartitionReassignments and ElectLeaders sent to
the controller, the partition state as the controller wrote it in ZooKeeper. ``operation(name,
args)`` is the same as one dict-in/dict-out call, for the control endpoint and ``strom control``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from strom.broker.zk.zkdata import ControllerZNode, PartitionState, TopicPartitionStateZNode, TopicZNode

T = TypeVar("T")

WAIT_TIMEOUT_S = 30.0
POLL_S = 0.02
INTER_BROKER_CLIENTS = ("strom-replica-{}", "strom-txn-{}")
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


class ClusterTimeout(AssertionError):
    """A cluster wait ran out of time; the message says what was awaited and what was seen."""


class ClusterActions:
    """The actions; the class using it has ``brokers`` (each with ``node_id``, ``port``,
    ``running``, ``faults``), ``memory_zookeeper`` or ``zookeeper``."""

    brokers: Sequence[Any]
    memory_zookeeper: Any
    zookeeper: Any
    _isolations: dict[int, list[tuple[Any, int]]]

    # ---- reading the cluster's state (ZooKeeper, as the controller wrote it) ------------------
    def znode(self, path: str) -> bytes | None:
        """A znode's data under the cluster's chroot, None when absent."""
        full = "/strom" + path
        if self.memory_zookeeper is not None:
            memory = self.memory_zookeeper
            return memory.call(memory.zk.data_of, full)
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=self.zookeeper.connect_string)
        zk.start(timeout=10)
        try:
            return zk.get(full)[0]
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        data = self.znode(TopicPartitionStateZNode.path(topic, partition))
        return None if data is None else TopicPartitionStateZNode.decode(data)

    def leader_of(self, topic: str, partition: int) -> int | None:
        state = self.partition_state(topic, partition)
        return None if state is None or state.leader < 0 else state.leader

    def replicas_of(self, topic: str, partition: int) -> list[int]:
        data = self.znode(TopicZNode.path(topic))
        if data is None:
            return []
        return list(TopicZNode.decode(data).partitions.get(partition, ()))

    def controller_id(self) -> int | None:
        data = self.znode(ControllerZNode.path())
        return None if data is None else ControllerZNode.decode(data).broker_id

    def broker(self, broker_id: int) -> Any:
        for b in self.brokers:
            if b.node_id == broker_id:
                return b
        raise ValueError(f"no broker {broker_id} in this cluster")

    # ---- waits -----------------------------------------------------------------------------
    def wait_until(self, check: Callable[[], T], what: str, timeout: float = WAIT_TIMEOUT_S) -> T:
        """Poll ``check()`` until it returns something truthy (returned), or raise ClusterTimeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise ClusterTimeout(f"timed out after {timeout:.1f}s waiting for {what}")
            time.sleep(POLL_S)

    def wait_for_leader(
        self,
        topic: str,
        partition: int,
        broker_id: int | None = None,
        *,
        not_broker: int | None = None,
        timeout: float = WAIT_TIMEOUT_S,
    ) -> int:
        """Until the partition has a leader (``broker_id``, or any but ``not_broker``); the leader."""

        def check() -> int | None:
            leader = self.leader_of(topic, partition)
            if leader is None or leader == not_broker or (broker_id is not None and leader != broker_id):
                return None
            return leader + 1  # truthy for broker 0

        wanted = f"broker {broker_id}" if broker_id is not None else f"a leader other than {not_broker}"
        return self.wait_until(check, f"{topic}-{partition} led by {wanted}", timeout) - 1

    def wait_for_isr(
        self, topic: str, partition: int, isr: Sequence[int] | None = None, *, timeout: float = WAIT_TIMEOUT_S
    ) -> list[int]:
        """Until the in-sync replicas are ``isr`` (default: every replica); the ISR."""

        def check() -> list[int] | None:
            state = self.partition_state(topic, partition)
            want = set(isr) if isr is not None else set(self.replicas_of(topic, partition))
            if state is None or not want or set(state.isr) != want:
                return None
            return list(state.isr)

        return self.wait_until(check, f"the ISR of {topic}-{partition} to be {isr or 'every replica'}", timeout)

    # ---- leadership ------------------------------------------------------------------------
    def move_leader(self, topic: str, partition: int, broker_id: int, *, timeout: float = WAIT_TIMEOUT_S) -> None:
        """Make ``broker_id`` (a replica) the partition's leader as an operator does in Kafka: a
        reassignment to the same replicas with it first (its preferred replica), then a
        preferred-replica ElectLeaders; returns once it leads."""
        replicas = self.replicas_of(topic, partition)
        if broker_id not in replicas:
            raise ValueError(f"broker {broker_id} is not a replica of {topic}-{partition} (replicas {replicas})")
        target = [broker_id, *(r for r in replicas if r != broker_id)]
        if replicas != target:
            body = {
                "timeout_ms": int(timeout * 1000),
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "replicas": target}]}],
            }
            answer = self._admin("ALTER_PARTITION_REASSIGNMENTS", 0, body)
            result = answer.responses[0].partitions[0]
            if answer.error_code or result.error_code:
                raise RuntimeError(
                    f"reassigning {topic}-{partition} failed: {answer.error_message or result.error_message}"
                )
            self.wait_until(
                lambda: self.replicas_of(topic, partition) == target, f"{topic}-{partition} replicas {target}", timeout
            )
        self.wait_until(
            lambda: broker_id in getattr(self.partition_state(topic, partition), "isr", ()),
            f"broker {broker_id} in the ISR of {topic}-{partition}",
            timeout,
        )
        deadline = time.monotonic() + timeout
        while self.leader_of(topic, partition) != broker_id:
            body = {
                "election_type": 0,
                "topic_partitions": [{"topic": topic, "partitions": [partition]}],
                "timeout_ms": int(timeout * 1000),
            }
            self._admin("ELECT_LEADERS", 2, body)
            if time.monotonic() > deadline:
                raise ClusterTimeout(f"broker {broker_id} did not become the leader of {topic}-{partition}")
            time.sleep(POLL_S)
        self.wait_for_metadata(topic, partition, broker_id, timeout=timeout)

    def wait_for_metadata(self, topic: str, partition: int, leader: int, *, timeout: float = WAIT_TIMEOUT_S) -> None:
        """Until every running broker answers Metadata with ``leader`` for the partition (brokers
        learn leadership from ZooKeeper a moment apart, as Kafka's learn it from the controller)."""

        def everyone_sees() -> bool:
            return all(
                _in_trio(_leader_in_metadata, b.port, topic, partition) == leader for b in self.brokers if b.running
            )

        self.wait_until(everyone_sees, f"every broker to see broker {leader} lead {topic}-{partition}", timeout)

    def move_group_coordinator(self, group_id: str, broker_id: int, *, timeout: float = WAIT_TIMEOUT_S) -> int:
        """Move the group's coordinator to ``broker_id`` (the leader of its __consumer_offsets
        partition, Kafka's rule); returns that partition."""
        return self._move_coordinator(OFFSETS_TOPIC, group_id, broker_id, timeout, key_type=0)

    def move_transaction_coordinator(
        self, transactional_id: str, broker_id: int, *, timeout: float = WAIT_TIMEOUT_S
    ) -> int:
        """Move the transaction coordinator of ``transactional_id`` (its __transaction_state
        partition's leader) to ``broker_id``; returns that partition."""
        return self._move_coordinator(TRANSACTION_STATE_TOPIC, transactional_id, broker_id, timeout, key_type=1)

    def _move_coordinator(self, topic: str, key: str, broker_id: int, timeout: float, *, key_type: int) -> int:
        from strom.protocol.internal_records import partition_for

        if self.znode(TopicZNode.path(topic)) is None:  # made on the first FindCoordinator, as in Kafka
            port = next(b.port for b in self.brokers if b.running)
            _in_trio(_request, port, "FIND_COORDINATOR", 3, {"key": key, "key_type": key_type})
        data = self.wait_until(lambda: self.znode(TopicZNode.path(topic)), f"the topic {topic} to exist", timeout)
        partition = partition_for(key, len(TopicZNode.decode(data).partitions))
        self.move_leader(topic, partition, broker_id, timeout=timeout)
        return partition

    # ---- isolation -------------------------------------------------------------------------
    def isolate(self, broker_id: int, seconds: float) -> None:
        """Cut ``broker_id`` off from the other brokers (replication and coordinator traffic both
        ways) and from ZooKeeper for ``seconds``; its ZooKeeper session expires if that is longer
        than the session timeout. Returns at once; the cut heals by itself (or ``heal(broker_id)``)."""
        memory = self.memory_zookeeper
        if memory is None:
            raise RuntimeError("isolate() cuts sessions of the in-memory ZooKeeper: use cluster(mode='thread')")
        if not hasattr(self, "_isolations"):
            self._isolations = {}
        isolated = self.broker(broker_id)
        others = [b for b in self.brokers if b.node_id != broker_id and b.running]
        rules: list[tuple[Any, int]] = []
        for name in INTER_BROKER_CLIENTS:
            for other in others:
                rules.append((isolated, _rule(isolated, name.format(other.node_id))))
                rules.append((other, _rule(other, name.format(broker_id))))
        self._isolations.setdefault(broker_id, []).extend(rules)
        if isolated.zk_session is not None:
            memory.call(memory.zk.disconnect_for, isolated.zk_session.session_id, seconds)
        timer = threading.Timer(seconds, self.heal, args=(broker_id,))
        timer.daemon = True
        timer.start()

    def heal(self, broker_id: int) -> None:
        """End an isolation of ``broker_id`` now (its inter-broker traffic flows again)."""
        for broker, rule_id in getattr(self, "_isolations", {}).pop(broker_id, []):
            if broker.running:
                try:
                    broker.faults.remove(rule_id)
                except Exception:  # the broker stopped meanwhile
                    pass
        memory = self.memory_zookeeper
        session = getattr(self.broker(broker_id), "zk_session", None)
        if memory is not None and session is not None and memory.zk.running:
            memory.call(memory.zk.heal, session.session_id)

    def heal_all(self) -> None:
        for broker_id in list(getattr(self, "_isolations", {})):
            self.heal(broker_id)

    # ---- one entry point for the control endpoint ------------------------------------------
    def operation(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """The cluster actions as dict-in/dict-out operations (``strom control``):
        ``stop``/``kill``/``pause``/``resume``/``restart`` {broker}, ``move_leader`` {topic,
        partition, broker}, ``move_group_coordinator`` {group, broker},
        ``move_transaction_coordinator`` {transactional_id, broker}, ``isolate`` {broker, seconds},
        ``heal`` {broker}, ``wait_for_isr`` {topic, partition, isr?, timeout?}, ``wait_for_leader``
        {topic, partition, broker?, not_broker?, timeout?}, ``leader`` {topic, partition},
        ``status`` {}."""
        timeout = float(args.get("timeout", WAIT_TIMEOUT_S))
        if name in ("stop", "kill", "pause", "resume", "restart"):
            getattr(self.broker(int(args["broker"])), name)()
            return {"ok": True}
        if name == "move_leader":
            self.move_leader(args["topic"], int(args["partition"]), int(args["broker"]), timeout=timeout)
            return {"leader": int(args["broker"])}
        if name == "move_group_coordinator":
            partition = self.move_group_coordinator(args["group"], int(args["broker"]), timeout=timeout)
            return {"partition": partition, "coordinator": int(args["broker"])}
        if name == "move_transaction_coordinator":
            partition = self.move_transaction_coordinator(
                args["transactional_id"], int(args["broker"]), timeout=timeout
            )
            return {"partition": partition, "coordinator": int(args["broker"])}
        if name == "isolate":
            self.isolate(int(args["broker"]), float(args["seconds"]))
            return {"ok": True}
        if name == "heal":
            self.heal(int(args["broker"]))
            return {"ok": True}
        if name == "wait_for_isr":
            isr = self.wait_for_isr(args["topic"], int(args["partition"]), args.get("isr"), timeout=timeout)
            return {"isr": isr}
        if name == "wait_for_leader":
            leader = self.wait_for_leader(
                args["topic"],
                int(args["partition"]),
                args.get("broker"),
                not_broker=args.get("not_broker"),
                timeout=timeout,
            )
            return {"leader": leader}
        if name == "leader":
            return {"leader": self.leader_of(args["topic"], int(args["partition"]))}
        if name == "status":
            return {
                "brokers": [{"id": b.node_id, "port": b.port, "running": b.running} for b in self.brokers],
                "controller": self.controller_id(),
            }
        raise ValueError(f"unknown cluster operation {name!r}")

    # ---- internals -------------------------------------------------------------------------
    def _admin(self, api: str, version: int, body: dict[str, Any]) -> Any:
        """Send one admin request to the controller (as Kafka's admin client routes these)."""
        controller = self.wait_until(lambda: _plus_one(self.controller_id()), "a controller") - 1
        port = self.broker(controller).port
        return _in_trio(_request, port, api, version, body)


def _plus_one(value: int | None) -> int | None:
    return None if value is None else value + 1


def _rule(broker: Any, client_id: str) -> int:
    return int(broker.faults.inject(None, drop="before", count=None, client_id=client_id)["id"])


async def _leader_in_metadata(port: int, topic: str, partition: int) -> int | None:
    answer = await _request(
        port, "METADATA", 12, {"topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False}
    )
    for t in answer.topics:
        for p in t.partitions:
            if t.name == topic and p.partition_index == partition and not p.error_code:
                return int(p.leader_id)
    return None


async def _request(port: int, api: str, version: int, body: dict[str, Any]) -> Any:
    from strom.broker.cluster.client import BrokerClient
    from strom.protocol.schema import ApiKey

    client = BrokerClient("127.0.0.1", port, "strom-testing-cluster")
    try:
        return await client.request(ApiKey[api], version, body)
    finally:
        await client.close()


def _in_trio(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``await fn(*args)`` on a fresh trio loop in a helper thread (callable from plain,
    asyncio and trio code alike)."""
    import trio

    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(trio.run(fn, *args))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]
