"""What acknowledged means: records survive kill -9, idempotent retries never duplicate, and no
input a client can send takes the broker down or loses data."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.codec import encode_request
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.schema import ApiKey
from strom.tools.common import KafkaSocket


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions)]).values():
        future.result(timeout=30)


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60):
    """Every record of the topic from offset 0 up to each partition's high watermark.

    The log may hold more than `expected` (records written but never acknowledged), so reading
    stops at the high watermarks, not at a count.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "durability-check",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
        }
    )
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[bytes]] = defaultdict(list)
    position = {p: 0 for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    try:
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for message in consumer.consume(10000, 1.0):
                if message.error():
                    continue
                out[message.partition()].append(message.value())
                position[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    assert sum(len(v) for v in out.values()) >= expected, "fewer records than were acknowledged"
    return out


class _Acked:
    """Values whose delivery the producer confirmed, per partition, in confirmation order."""

    def __init__(self):
        self.lock = threading.Lock()
        self.values: dict[int, list[bytes]] = defaultdict(list)
        self.failed = 0

    def callback(self, err, message):
        with self.lock:
            if err is None:
                self.values[message.partition()].append(message.value())
            else:
                self.failed += 1

    def total(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.values.values())


def _produce_until(
    producer: Producer, topic: str, acked: _Acked, stop: threading.Event, prefix: bytes, partitions: int
) -> int:
    sent = 0
    while not stop.is_set():
        value = prefix + b"-%08d" % sent
        try:
            producer.produce(topic, value, key=value, partition=sent % partitions, on_delivery=acked.callback)
            sent += 1
        except BufferError:
            producer.poll(0.05)
            continue
        if sent % 500 == 0:
            producer.poll(0)
    return sent


def test_idempotent_producer_across_a_broker_crash_has_no_duplicates_or_gaps(broker):
    topic = "idempotent"
    _create_topic(broker.bootstrap, topic, 3)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 100,
        }
    )
    acked = _Acked()
    stop = threading.Event()
    result = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("sent", _produce_until(producer, topic, acked, stop, b"v", 3))
    )
    worker.start()
    try:
        while acked.total() < 20000:
            time.sleep(0.05)
        broker.restart(crash=True)
        before = acked.total()
        deadline = time.monotonic() + 60
        while acked.total() < before + 20000 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(timeout=60)
    assert producer.flush(120) == 0, "records still undelivered two minutes after the restart"
    assert acked.failed == 0
    sent = result["sent"]
    got = _consume_all(broker.bootstrap, topic, 3, sent)
    for partition in range(3):
        expected = [b"v-%08d" % i for i in range(partition, sent, 3)]
        assert got[partition] == expected, f"partition {partition}: duplicates, gaps or reordering"


def test_acks_all_records_survive_kill_9(broker):
    topic = "crash"
    _create_topic(broker.bootstrap, topic, 6)
    acked = _Acked()
    stop = threading.Event()
    producers = [
        Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "enable.idempotence": False,
                "retries": 0,
                "message.timeout.ms": 10000,
            }
        )
        for _ in range(3)
    ]
    threads = [
        threading.Thread(target=_produce_until, args=(p, topic, acked, stop, b"p%d" % i, 6))
        for i, p in enumerate(producers)
    ]
    for t in threads:
        t.start()
    try:
        while acked.total() < 30000:
            time.sleep(0.02)
        broker.kill()
        acknowledged = {p: list(v) for p, v in acked.values.items()}
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    for p in producers:
        p.flush(15)
    broker.start()
    total = sum(len(v) for v in acknowledged.values())
    got = _consume_all(broker.bootstrap, topic, 6, total)
    for partition, values in acknowledged.items():
        present = set(got[partition])
        missing = [v for v in values if v not in present]
        assert not missing, f"partition {partition}: {len(missing)} acknowledged records lost, e.g. {missing[:3]}"


# --------------------------------------------------------------------------- bad input


def _exchange(port: int, frame: bytes, timeout: float = 3.0) -> bytes | None:
    """Send one frame; the broker's reply frame, or None if it closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return None
        chunks = []
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks) or None


def _api_versions_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3.0) as sock:
            return KafkaSocket(sock, "probe").request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    except (OSError, ValueError):
        return False


_VALID = [
    encode_request(ApiKey.METADATA, 9, 1, "f", {"topics": [{"name": "fuzz"}], "allow_auto_topic_creation": False}),
    encode_request(
        ApiKey.PRODUCE,
        9,
        2,
        "f",
        {
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": "fuzz", "partition_data": [{"index": 0, "records": build_batch([Record(0, 0, b"k", b"v")])}]}
            ],
        },
    ),
    encode_request(
        ApiKey.FETCH,
        12,
        3,
        "f",
        {
            "max_wait_ms": 0,
            "min_bytes": 1,
            "topics": [
                {"topic": "fuzz", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}
            ],
        },
    ),
    encode_request(
        ApiKey.LIST_OFFSETS,
        7,
        4,
        "f",
        {"replica_id": -1, "topics": [{"name": "fuzz", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
    ),
    encode_request(
        ApiKey.CREATE_TOPICS, 7, 5, "f", {"topics": [{"name": "fz", "num_partitions": 1, "replication_factor": 1}]}
    ),
]


def _mutated(data: st.DataObject) -> bytes:
    frame = bytearray(data.draw(st.sampled_from(_VALID)))
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(4, len(frame) - 1))
        frame[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(frame)))
    body = bytes(frame[4:cut])
    return struct.pack(">i", len(body)) + body


_frames = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda body: struct.pack(">i", len(body)) + body, st.binary(max_size=300)),
    st.builds(
        lambda size, tail: struct.pack(">i", size) + tail,
        st.sampled_from([-1, -(2**31), 2**31 - 1, 200 * 1024 * 1024]),
        st.binary(max_size=20),
    ),
    st.builds(
        lambda key, version, body: (lambda b: struct.pack(">i", len(b)) + b)(
            struct.pack(">hhih", key, version, 9, 1) + b"x" + body
        ),
        st.integers(-5, 80),
        st.integers(-2, 20),
        st.binary(max_size=200),
    ),
)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    from strom.tools.broker_process import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("fuzz"), {"socket.request.max.bytes": str(1 << 20)})
    b.start()
    yield b
    b.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_malformed_frames_get_an_error_or_a_closed_connection_and_never_kill_the_broker(fuzz_broker, data):
    use_mutation = data.draw(st.booleans())
    frame = _mutated(data) if use_mutation else data.draw(_frames)
    _exchange(fuzz_broker.port, frame, timeout=2.0)
    assert fuzz_broker.running, "the broker died:\n" + fuzz_broker.log_tail()


def test_after_the_fuzzing_acknowledged_data_is_intact_and_the_broker_serves(fuzz_broker):
    bootstrap = fuzz_broker.bootstrap
    try:
        _create_topic(bootstrap, "after-fuzz", 1)
    except KafkaException:
        pass
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("after-fuzz", b"%d" % i)
    assert producer.flush(30) == 0
    assert _api_versions_ok(fuzz_broker.port)
    # Oversized frames close that connection only, and are logged with the reason.
    assert _exchange(fuzz_broker.port, struct.pack(">i", 50 << 20) + b"\x00" * 64) is None
    assert _api_versions_ok(fuzz_broker.port)
    got = _consume_all(bootstrap, "after-fuzz", 1, 100)
    assert got[0][-100:] == [b"%d" % i for i in range(100)]
    assert "socket.request.max.bytes" in fuzz_broker.log_tail()
