"""`strom bench`'s TLS figures: produce and consume of 100-byte records over an SSL listener
against the same broker's PLAINTEXT listener (Fetch data cannot leave by sendfile through TLS: it
is read and encrypted), and the same pair against the reference Kafka 4.0 configured with an SSL
listener when it can run here. Certificates are made for the run (``strom.testing.certs``).
Figures are ratios measured in one run; nothing is asserted."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from strom.tools.bench.sessions import reference_script
from strom.tools.broker_process import HOST, BrokerProcess

Log = Callable[[str], None]
PAYLOAD = b"x" * 100


class _TlsBroker(BrokerProcess):
    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://{HOST}:{self._port}")
        cmd[i] = f"listeners=PLAINTEXT://{HOST}:{self._port},SSL://{HOST}:0"
        return cmd

    def ssl_bootstrap(self) -> str:
        return next(t.split("://", 1)[1] for t in self.info.listeners if t.startswith("SSL://"))


def _pki(workdir: Path) -> dict[str, Path]:
    from strom.testing.certs import CertificateAuthority

    workdir.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    return {
        "ca": ca.write_pem(workdir / "ca.pem"),
        "pem": server.write_pem(workdir / "server.pem"),
        "p12": server.write_pkcs12(workdir / "server.p12", "bench-pw"),
    }


def _rates(conf: dict, topic: str, records: int) -> tuple[float, float]:
    """(produce records/s, consume records/s) of one confluent-kafka producer and consumer."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)  # kept until the future completes
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer({**conf, "linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000})
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, PAYLOAD, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    produce = records / (time.perf_counter() - start)
    consumer = Consumer({**conf, "group.id": topic, "enable.auto.commit": False, "fetch.queue.backoff.ms": 1})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, first, deadline = 0, None, time.monotonic() + 120
    while got < records and time.monotonic() < deadline:
        batch = consumer.consume(500, 1)
        if batch and first is None:
            first = time.perf_counter()
        got += sum(1 for m in batch if not m.error())
    consume = got / (time.perf_counter() - (first or time.perf_counter()))
    consumer.close()
    return produce, consume


def _pair(plain: str, tls: str, ca: Path, records: int, who: str, log: Log) -> dict[str, float]:
    out = {}
    for name, conf in (
        ("plaintext", {"bootstrap.servers": plain}),
        ("ssl", {"bootstrap.servers": tls, "security.protocol": "SSL", "ssl.ca.location": str(ca)}),
    ):
        produce, consume = _rates(conf, f"bench-tls-{name}-{time.monotonic_ns()}", records)
        out[f"{name}_produce"], out[f"{name}_consume"] = produce, consume
        log(f"tls: {who} {name}: produce {produce:,.0f} records/s, consume {consume:,.0f} records/s")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kafka_over_tls(kafka_home: Path, workdir: Path, p12: Path) -> tuple[subprocess.Popen, int, int]:
    """A KRaft Kafka 4.0 with PLAINTEXT and SSL listeners (PKCS12 key store); (process, plain, ssl)."""
    data = workdir / "data"
    plain, tls, controller = _free_port(), _free_port(), _free_port()
    props = workdir / "server.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers=127.0.0.1:{controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},CONTROLLER://127.0.0.1:{controller}",
                "inter.broker.listener.name=PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
                f"log.dirs={data}",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "ssl.keystore.type=PKCS12",
                f"ssl.keystore.location={p12}",
                "ssl.keystore.password=bench-pw",
                "",
            ]
        )
    )
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m", "LOG_DIR": str(workdir / "logs")}
    storage = subprocess.run(
        [
            str(kafka_home / "bin/kafka-storage.sh"),
            "format",
            "--standalone",
            "-t",
            "bench-tls-0000000000A",
            "-c",
            str(props),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if storage.returncode != 0:
        raise RuntimeError(storage.stderr[-500:])
    out = open(workdir / "kafka.out", "wb")
    proc = subprocess.Popen(
        [str(kafka_home / "bin/kafka-server-start.sh"), str(props)], stdout=out, stderr=subprocess.STDOUT, env=env
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", tls), timeout=1).close()
            return proc, plain, tls
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("the reference Kafka did not listen on its SSL port within 60 s")


def measure_tls(report, log: Log, *, records: int, workdir: Path, kafka: bool = True) -> None:
    pki = _pki(workdir / "tls-pki")
    broker = _TlsBroker(
        workdir / "tls-broker", {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["pem"])}
    ).start()
    try:
        ours = _pair(broker.bootstrap, broker.ssl_bootstrap(), pki["ca"], records, "Strom", log)
    finally:
        broker.stop()
    report.reference(
        "strom_plaintext_produce",
        ours["plaintext_produce"],
        "records/s",
        "Strom over its PLAINTEXT listener, one producer, 100 B records",
    )
    report.reference(
        "strom_plaintext_consume",
        ours["plaintext_consume"],
        "records/s",
        "Strom over its PLAINTEXT listener, one consumer, sendfile",
    )
    report.add("tls_produce_100b", ours["ssl_produce"], "records/s", "strom_plaintext_produce")
    report.add("tls_consume_100b", ours["ssl_consume"], "records/s", "strom_plaintext_consume")
    report.details["tls"] = {"strom": ours}
    script = reference_script() if kafka else None
    if script is None:
        log("tls: no reference Kafka here; Strom's figures only")
        return
    kafka_dir = workdir / "tls-kafka"
    shutil.rmtree(kafka_dir, ignore_errors=True)
    kafka_dir.mkdir(parents=True)
    try:
        proc, plain, tls = _kafka_over_tls(script.parent / "kafka-4.0.0", kafka_dir, pki["p12"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        log(f"tls: the reference Kafka did not start ({exc}); Strom's figures only")
        return
    try:
        theirs = _pair(f"127.0.0.1:{plain}", f"127.0.0.1:{tls}", pki["ca"], records, "Kafka", log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    report.details["tls"]["kafka"] = theirs
    report.reference("kafka_ssl_produce", theirs["ssl_produce"], "records/s", "the reference Kafka 4.0 over SSL")
    report.reference("kafka_ssl_consume", theirs["ssl_consume"], "records/s", "the reference Kafka 4.0 over SSL")
    report.add("tls_produce_100b_vs_kafka", ours["ssl_produce"], "records/s", "kafka_ssl_produce")
    report.add("tls_consume_100b_vs_kafka", ours["ssl_consume"], "records/s", "kafka_ssl_consume")
