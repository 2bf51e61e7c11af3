"""Helpers for the console tests: a broker with the console on, HTTP calls, and a workload with a
consumer group of known lag."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from strom.tools.broker_process import BrokerProcess

CONSOLE_OVERRIDES = {
    "console.listeners": "http://127.0.0.1:0",
    "console.history.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


def start_console_broker(workdir: Path, **overrides: str) -> BrokerProcess:
    return BrokerProcess(workdir, {"num.partitions": "1", **CONSOLE_OVERRIDES, **overrides}).start()


def console_url(broker: BrokerProcess) -> str:
    return json.loads(broker.ready_file.read_text())["console"]


def http(url: str, *, data: dict | None = None, headers: dict | None = None, timeout: float = 10.0):
    """(status, body bytes, headers) of a GET, or a POST of ``data`` as JSON."""
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(
        url, data=body, headers=dict(headers or {}), method="POST" if data is not None else "GET"
    )
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def get_json(base: str, path: str):
    status, body, _ = http(base + path)
    assert status == 200, (path, status, body[:500])
    return json.loads(body)


def csrf_token(base: str) -> str:
    _, page, _ = http(base + "/")
    marker = b'name="csrf-token" content="'
    start = page.index(marker) + len(marker)
    return page[start : page.index(b'"', start)].decode()


def post(base: str, path: str, token: str | None, **fields):
    headers = {"X-CSRF-Token": token} if token else {}
    status, body, _ = http(base + path, data={"confirm": "yes", **fields}, headers=headers)
    return status, json.loads(body)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


VALUE = b"v" * 100


def produce_single_batches(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    """Records of equal size, one batch each (flushed one by one), so every batch has one size."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "client.id": "console-test-producer",
            "enable.idempotence": True,
        }
    )
    try:
        for partition, count in per_partition.items():
            for i in range(count):
                producer.produce(topic, key=b"k%05d" % i, value=VALUE, partition=partition, headers={"n": b"%05d" % i})
                producer.flush(10)
    finally:
        producer.flush(10)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for a group with no members (as an admin tool would)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


@dataclass
class ActiveConsumer:
    """A group member polling in a thread (so the group stays Stable) until stopped."""

    bootstrap: str
    group: str
    topic: str
    instance_id: str | None = None
    session_timeout_ms: int = 10000
    group_protocol: str = "classic"
    assigned: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ActiveConsumer:
        config = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": self.session_timeout_ms,
            "client.id": f"console-test-{self.group}",
            "fetch.wait.max.ms": 100,
        }
        if self.instance_id:
            config["group.instance.id"] = self.instance_id
        if self.group_protocol == "consumer":  # KIP-848: the broker assigns, no session settings
            config["group.protocol"] = "consumer"
            del config["session.timeout.ms"]
        self._consumer = Consumer(config)
        self._consumer.subscribe([self.topic], on_assign=lambda c, parts: self.assigned.set())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self.assigned.wait(30):
            self.stop()
            raise AssertionError(f"consumer of group {self.group} got no assignment in 30 s")
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._consumer.poll(0.1)  # consumes nothing the test relies on: it never commits

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        # a static member does not leave on close: it stays in the group until its session ends
        self._consumer.close()
