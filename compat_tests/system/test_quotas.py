"""A 1 MB/s producer_byte_rate quota on a client id holds within 10%, measured with confluent-kafka
producing as fast as it can; another client id on the same broker is not held back."""

from __future__ import annotations

import socket
import time

from confluent_kafka import Producer

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from strom.tools.common import KafkaSocket

MIB = 1 << 20


def alter_quota(port: int, client_id: str, key: str, value: float) -> int:
    body = {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                "ops": [{"key": key, "value": value, "remove": False}],
            }
        ],
        "validate_only": False,
    }
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        response = KafkaSocket(sock, "test").request(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)
    return response.entries[0].error_code


def produce_rate(bootstrap: str, client_id: str, start_s: float, end_s: float) -> float:
    """Acknowledged payload bytes per second between start_s and end_s of producing flat out."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1})
    acked = [0]

    def delivered(err, msg):
        if err is None:
            acked[0] += len(msg.value())

    value = b"x" * 1000
    marks = {}
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < end_s:
        try:
            producer.produce("quota", value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        for mark in (start_s, end_s):
            if elapsed >= mark and mark not in marks:
                marks[mark] = acked[0]
    marks[end_s] = acked[0]
    producer.purge()
    producer.flush(10)
    return (marks[end_s] - marks[start_s]) / (end_s - start_s)


def test_a_one_megabyte_per_second_client_quota_holds_within_ten_percent(make_broker):
    # two one-second samples: the rate is measured over 1-2 s, so a 15 s measurement averages out
    broker = make_broker({"quota.window.num": "2"})
    assert alter_quota(broker.port, "limited", "producer_byte_rate", float(MIB)) == ErrorCode.NONE
    rate = produce_rate(broker.bootstrap, "limited", 3, 18)
    assert 0.9 * MIB <= rate <= 1.1 * MIB, f"{rate / MIB:.3f} MB/s under a 1 MB/s quota"
    free = produce_rate(broker.bootstrap, "unlimited", 1, 4)
    assert free > 2 * MIB, f"a client without a quota is held back too ({free / MIB:.2f} MB/s)"
