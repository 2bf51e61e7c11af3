"""Connection limits against a live broker, set at run time with confluent-kafka's
incremental_alter_configs: a per-IP override closes an address's extra connection at once; at
max.connections a confluent-kafka producer waits and then delivers once other connections
close; /metrics shows the counts. Connections counted against the per-IP limit come from
127.0.0.2 (any 127/8 address reaches the loopback listener), so the admin client's own
connections from 127.0.0.1 are not limited."""

from __future__ import annotations

import socket
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.support.console import console_url, http, start_console_broker
from strom.tools.common import KafkaSocket


def alter(admin: AdminClient, *configs: tuple[str, str | None]) -> None:
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
        for k, v in configs
    ]
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0", incremental_configs=entries)])
    for future in futures.values():
        future.result(timeout=30)


def connect(port: int, source: str = "127.0.0.1") -> KafkaSocket:
    """A connection from ``source`` that has sent an ApiVersions v0 request."""
    wire = KafkaSocket(socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)), None)
    wire.send(18, 0, {})
    return wire


def answered(wire: KafkaSocket) -> bool:
    """True once the ApiVersions answer arrives, False when the broker closed the connection."""
    try:
        wire.receive()
    except (ConnectionResetError, ValueError):
        return False
    return True


def metrics(base: str) -> dict[str, dict[tuple, float]]:
    status, body, _ = http(base + "/metrics")
    assert status == 200
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def until(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_per_ip_and_broker_wide_limits_set_at_run_time(tmp_path):
    broker = start_console_broker(tmp_path / "broker")
    held: list[KafkaSocket] = []
    try:
        base = console_url(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        alter(admin, ("max.connections.per.ip.overrides", "127.0.0.2:2"))
        held += [connect(broker.port, "127.0.0.2") for _ in range(2)]
        assert all(answered(s) for s in held)
        extra = connect(broker.port, "127.0.0.2")
        assert not answered(extra), "a third connection from 127.0.0.2 is closed unserved"
        extra.close()
        assert answered(connect(broker.port)), "127.0.0.1 is not limited by 127.0.0.2's override"
        listener = (("listener", "PLAINTEXT"),)
        refused = metrics(base)["kafka_server_socketservermetrics_connection_rejected_total"]
        assert refused[(*listener, ("reason", "max.connections.per.ip"))] == 1

        # broker-wide: the admin leaves, two connections hold max.connections=2, a producer waits
        alter(admin, ("max.connections.per.ip.overrides", None), ("max.connections", "2"))
        del admin
        for s in held:
            s.close()
        held = []
        until(lambda: metrics(base)["kafka_server_socketservermetrics_connection_count"][listener] == 0)
        held = [connect(broker.port) for _ in range(2)]
        assert all(answered(s) for s in held)
        delivered: list = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 60000})

        def produce(producer: Producer) -> None:
            producer.produce("limits", b"waited", on_delivery=lambda err, msg: delivered.append(err))
            producer.flush(60)

        # the producer goes in as an argument, not a closure: `del producer` below drops the last
        # reference (the thread's target and arguments are released when it ends)
        worker = threading.Thread(target=produce, args=(producer,))
        worker.start()
        until(lambda: metrics(base)["kafka_network_acceptor_acceptorblockedpercent"][listener] > 0)
        assert metrics(base)["kafka_server_socketservermetrics_connection_count"][listener] == 2
        assert not delivered, "the producer cannot connect while two connections are open"
        for s in held:
            s.close()
        held = []
        worker.join(60)
        assert delivered == [None], "delivered once the held connections closed"
        del producer
        assert metrics(base)["kafka_server_socketservermetrics_connection_accept_rate"][listener] > 0
    finally:
        for s in held:
            s.close()
        broker.stop()
