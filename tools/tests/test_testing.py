"""strom.testing: the embedded broker (thread and process), its controls, the cluster variant,
`strom serve --dev` and `strom control`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from strom.testing import StromBroker, broker
from strom.testing.embedded import broker_props

QUIET = {"log_level": 0}


def _produce(bootstrap: str, topic: str, values, key=None, **conf) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET, **conf})
    for v in values:
        producer.produce(topic, v, key=key)
    assert producer.flush(15) == 0


def _consume(bootstrap: str, topic: str, n: int, group: str = "g", timeout: float = 15.0) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumer.subscribe([topic])
    out, deadline = [], time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg)
        if out:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return out


def test_embedded_broker_serves_restarts_on_the_same_port_and_cleans_up():
    with broker() as b:
        assert b.mode == "thread" and b.bootstrap_servers.startswith("127.0.0.1:")
        data_dir = b.data_dir
        port = b.port
        _produce(b.bootstrap_servers, "e", [b"a", b"b", b"c"])
        b.restart()
        assert b.port == port
        assert [m.value() for m in _consume(b.bootstrap_servers, "e", 3)] == [b"a", b"b", b"c"]
        assert data_dir.exists()
    assert not b.running and not data_dir.exists()


def test_a_given_data_dir_is_kept(tmp_path):
    with broker(data_dir=tmp_path / "keep") as b:
        _produce(b.bootstrap_servers, "kept", [b"x"])
    assert (tmp_path / "keep" / "data" / "kept-0").is_dir()
    with broker(data_dir=tmp_path / "keep") as b:  # and served again
        assert [m.value() for m in _consume(b.bootstrap_servers, "kept", 1)] == [b"x"]


def test_configs_as_keywords_and_as_a_dict_over_the_dev_defaults():
    props = broker_props(
        {"log.retention.ms": 5000}, {"num_partitions": 3, "auto_create_topics_enable": False}, dev=True
    )
    assert props["num.partitions"] == "3" and props["log.retention.ms"] == "5000"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"  # a dev default left alone
    with pytest.raises(ValueError, match="did you mean num.partitions"):
        broker_props(None, {"partitions": 3}, dev=True)
    with broker({"log.retention.ms": 5000}, num_partitions=3) as b:
        b.create_topic("three")
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, **QUIET})
        assert len(admin.list_topics("three", timeout=10).topics["three"].partitions) == 3
        described = admin.describe_configs([ConfigResource("BROKER", "0")])
        configs = next(iter(described.values())).result(timeout=10)
        assert configs["log.retention.ms"].value == "5000"
        assert configs["group.initial.rebalance.delay.ms"].value == "0"


async def test_usable_from_trio_code():
    with broker() as b:
        b.create_topic("from-trio", partitions=2)  # calls into the broker's loop from a trio task
        assert "from-trio" in b.faults.status()["topics"]
        b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER")
        assert [r["api"] for r in b.faults.rules()] == ["Produce"]


def test_usable_from_asyncio_code():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def round_trip(bootstrap: str) -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait("aio", b"hello")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio", bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            return [(await asyncio.wait_for(consumer.getone(), 15)).value]
        finally:
            await consumer.stop()

    with broker() as b:
        assert asyncio.run(round_trip(b.bootstrap_servers)) == [b"hello"]


def test_process_mode_faults_pause_and_resume():
    with broker(mode="process") as b:
        assert b.control_address is not None
        b.create_topic("p")
        b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=1)
        _produce(b.bootstrap_servers, "p", [b"1"], retries=5)
        assert b.faults.rules() == []  # the one fault was used, the retry succeeded
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, **QUIET})
        admin.list_topics(timeout=10)
        b.pause()
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=1)
        b.resume()
        assert "p" in admin.list_topics(timeout=10).topics
        pid = b._process.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_thread_mode_pause_holds_requests_and_a_paused_broker_still_stops():
    b = StromBroker()
    with b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, **QUIET})
        admin.list_topics(timeout=10)
        b.pause()  # requests held, the broker's clock stopped (broker/tests/test_clock.py)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=1)
        start = time.monotonic()
    assert time.monotonic() - start < b.stop_timeout and b._stuck is None  # stopped while paused


def test_maintenance_now_retention_compaction_offset_expiry():
    with broker() as b:
        b.create_topic("ret", retention_ms=1)
        _produce(b.bootstrap_servers, "ret", [b"%d" % i for i in range(5)])
        time.sleep(0.01)
        assert b.run_retention(topic="ret")["partitions_trimmed"] == 1
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "w", **QUIET})
        assert consumer.get_watermark_offsets(TopicPartition("ret", 0), timeout=10) == (5, 5)
        consumer.close()

        b.create_topic("comp", cleanup_policy="compact")
        for i in range(5):
            _produce(b.bootstrap_servers, "comp", [b"v%d" % i], key=b"k")
        assert b.compact(topic="comp")["records_removed"] == 4
        assert [m.value() for m in _consume(b.bootstrap_servers, "comp", 1, group="c")] == [b"v4"]

        _consume(b.bootstrap_servers, "comp", 1, group="expiring")  # commits, leaves the group
        assert b.expire_offsets()["offsets_removed"] == 0  # a week is not over yet
        assert b.expire_offsets(advance_ms=8 * 24 * 3600 * 1000)["offsets_removed"] >= 1
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "expiring", **QUIET})
        assert consumer.committed([TopicPartition("comp", 0)], timeout=10)[0].offset < 0
        consumer.close()


def test_serve_dev_writes_the_control_endpoint_and_strom_control_drives_it(tmp_path):
    from strom.broker.cli import main

    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom.broker",
            "serve",
            "--dev",
            "--log-level",
            "WARNING",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
            "--override",
            "group.initial.rebalance.delay.ms=7",
            "--ready-file",
            str(ready),
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "strom serve --dev did not start"
            time.sleep(0.05)
        doc = json.loads(ready.read_text())
        assert doc["control"].startswith("127.0.0.1:")
        runner = CliRunner()

        def control(*args):
            result = runner.invoke(main, ["control", "--ready-file", str(ready), *args])
            assert result.exit_code == 0, result.output
            return json.loads(result.output)

        rule = control(
            "fault", "--api", "Metadata", "--error", "LEADER_NOT_AVAILABLE", "--count", "0", "--topic", "nope"
        )
        assert rule["api"] == "Metadata" and rule["remaining"] is None
        assert control("cap", "2.8")["release"] == "2.8"
        assert control("status")["version_cap"] == "2.8"
        admin = AdminClient({"bootstrap.servers": doc["bootstrap_servers"], **QUIET})
        configs = next(iter(admin.describe_configs([ConfigResource("BROKER", "0")]).values())).result(timeout=10)
        assert configs["group.initial.rebalance.delay.ms"].value == "7"  # --override wins over --dev
        assert configs["offsets.topic.num.partitions"].value == "1"  # a --dev default
        control("clear")
        assert control("faults") == []
        bad = runner.invoke(main, ["control", "--ready-file", str(ready), "cap", "0.7"])
        assert bad.exit_code != 0 and "unknown Kafka release" in bad.output
    finally:
        proc.terminate()
        proc.wait(15)


def test_control_listener_must_be_loopback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.broker",
            "serve",
            "--override",
            "control.listener=0.0.0.0:0",
            "--override",
            f"log.dirs={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "must be a loopback address" in result.stderr


def test_three_broker_cluster_with_zookeeper():
    from strom.testing import cluster, zookeeper_available
    from strom.testing.zookeeper import require_all

    reason = zookeeper_available()
    if reason is not None:
        if require_all():
            pytest.fail(f"ZooKeeper is required (STROM_COMPAT_REQUIRE_ALL=1): {reason}")
        pytest.skip(reason)
    with cluster(3) as c:
        assert len(c.bootstrap_servers.split(",")) == 3
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers, **QUIET})
        assert sorted(admin.list_topics(timeout=10).brokers) == [0, 1, 2]
        c.brokers[0].create_topic("replicated")
        _produce(c.bootstrap_servers, "replicated", [b"r"], acks="all")
        partition = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0]
        assert sorted(partition.replicas) == [0, 1, 2]
        data_dir = c.data_dir
    assert not data_dir.exists()


def test_the_plugin_loads_nothing_of_the_broker_until_a_fixture_is_used():
    code = (
        "import sys, strom.testing.pytest_plugin, strom.testing; "
        "print(sorted(m for m in ('trio', 'strom.broker.server.root', 'confluent_kafka', 'strom.testing.embedded') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr


def test_bench_testbroker_workload_and_report():
    from strom.tools.bench.testbroker import format_report, format_reset, workload

    with broker() as b:
        phases = workload(b.bootstrap_servers)
    assert set(phases) == {"create_s", "produce_s", "consume_commit_s"} and all(v > 0 for v in phases.values())
    run = {"total_s": 0.4, "start_s": 0.1, "stop_s": 0.05, **phases}
    text = format_report(
        {
            "median": {
                "embedded_warm": run,
                "serve_process": dict(run, total_s=0.9),
                "embedded_idle_rss_bytes": 18 * 2**20,
            }
        }
    )
    assert "embedded_warm" in text and "< 0.5 s: yes" in text and "18.0 MiB" in text
    reset = format_reset({"reset_s": 0.012, "fresh_broker_s": 0.1})
    assert "reset between tests on a shared embedded broker: 12.0 ms" in reset and "100.0 ms" in reset


def test_stop_is_bounded_even_when_the_broker_hangs_in_shutdown(monkeypatch, caplog):
    import threading

    from strom.broker.server.root import BrokerServer

    release = threading.Event()
    real_close = BrokerServer.close
    monkeypatch.setattr(BrokerServer, "close", lambda self: (release.wait(30), real_close(self)))
    b = StromBroker(stop_timeout=0.5).start()
    thread = b._thread
    try:
        with caplog.at_level(logging.WARNING, logger="strom.testing"):
            b.close()
        assert thread.is_alive()  # stuck in shutdown, and close() returned all the same
        assert "did not stop within" in caplog.text and b.data_dir.exists()  # not removed under it
    finally:
        release.set()
        thread.join(10)
    assert not thread.is_alive()
    shutil.rmtree(b.data_dir)


def test_control_endpoint_of_an_embedded_broker_when_configured():
    from strom.testing import ControlClient

    with broker(control_listener="127.0.0.1:0") as b:
        assert b.control_address is not None
        ControlClient(b.control_address)("fault", {"api": "Fetch", "delay_ms": 10, "count": None})
        assert [r["api"] for r in b.faults.rules()] == ["Fetch"]
    with broker() as b:
        assert b.control_address is None


def test_the_control_endpoint_answers_bad_requests_with_400_and_keeps_serving():
    import socket

    def raw(address: str, data: bytes) -> bytes:
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    with broker(control_listener="127.0.0.1:0") as b:
        address = b.control_address

        def post(path: str, body: bytes) -> bytes:
            return b"POST %s HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)

        cases = {
            b"DELETE /v1/status HTTP/1.1\r\n\r\n": b"expected GET or POST",
            post("/v1/fault", b"{nope"): b"not JSON",
            post("/v1/fault", b"[]"): b"JSON object",
            post("/v1/fault", b'{"api": "Nope", "error": 6}'): b"unknown API",
            post("/v1/fault", b'{"api": "Fetch"}'): b"needs an error, a delay or a drop",
            b"POST /v1/explode HTTP/1.1\r\n\r\n": b"unknown operation",
            b"POST /v1/fault HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n": b"too large",
            b"GET /other HTTP/1.1\r\n\r\n": b"unknown path",
            post("/v1/fault", b'{"bogus": 1}'): b"unexpected keyword",
        }
        for request, message in cases.items():
            answer = raw(address, request)
            assert answer.split(b"\r\n", 1)[0] in (b"HTTP/1.1 400 Error", b"HTTP/1.1 404 Error"), (request, answer)
            assert message in answer, (request, answer)
        assert b"closed before the request ended" in raw(address, b"POST /v1/fau")  # cut short
        assert b'"result"' in raw(address, b"GET /v1/status HTTP/1.1\r\n\r\n")
        _produce(b.bootstrap_servers, "still-serving", [b"ok"])
