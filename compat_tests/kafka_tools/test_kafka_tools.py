"""Kafka 4.0's own command-line tools against Strom, all in one JVM (``ToolRunner.java``).

kafka-topics (create, list, describe, alter, delete), the console producer and consumer,
kafka-consumer-groups (list, describe, reset-offsets, delete), kafka-configs, kafka-get-offsets,
the verifiable producer and consumer, kafka-e2e-latency, the producer and consumer perf tests,
and kafka-dump-log reading Strom's own segment, offset index and time index files (the on-disk
format is Kafka's) and decoding the records of its internal topics `__consumer_offsets` and
`__transaction_state` with Kafka's own decoders. Each tool runs with the arguments its bin/*.sh
script would pass to the same main class; each becomes one test here.

Skipped without java/javac or Kafka's jars unless STROM_COMPAT_REQUIRE_ALL=1.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from compat_tests.differential.harness import Target
from compat_tests.support.jvm import JVM_FLAGS, KAFKA_HOME, java_unavailable, skip_unless_available
from strom.protocol.schema import ApiKey
from strom.tools.broker_process import BrokerProcess

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "ToolRunner.java"

TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
DUMP = "kafka.tools.DumpLogSegments"
LINES = "".join(f"key{i}:value-{i}\\n" for i in range(10))


class Run(NamedTuple):
    code: str
    out: str
    err: str


def plan(bootstrap: str, log_dir: Path) -> list[tuple[str, str, str, list[str]]]:
    """(name, main class, stdin, arguments), run in this order."""
    b = ["--bootstrap-server", bootstrap]
    seg = log_dir / "t-console-0" / "00000000000000000000"
    perf = log_dir / "t-perf-0" / "00000000000000000000"  # 2 MB: its indexes have entries
    offsets = log_dir / "__consumer_offsets-0" / "00000000000000000000"  # one partition of each (the broker's
    txn_state = log_dir / "__transaction_state-0" / "00000000000000000000"  # config below)
    return [
        (
            "topics-create",
            TOPICS,
            "",
            [
                *b,
                "--create",
                "--topic",
                "t-cli",
                "--partitions",
                "3",
                "--replication-factor",
                "1",
                "--config",
                "retention.ms=86400000",
            ],
        ),
        ("topics-create-console", TOPICS, "", [*b, "--create", "--topic", "t-console", "--partitions", "1"]),
        ("topics-create-e2e", TOPICS, "", [*b, "--create", "--topic", "t-e2e", "--partitions", "1"]),
        ("topics-list", TOPICS, "", [*b, "--list"]),
        ("topics-describe", TOPICS, "", [*b, "--describe", "--topic", "t-cli"]),
        ("topics-alter", TOPICS, "", [*b, "--alter", "--topic", "t-cli", "--partitions", "4"]),
        ("topics-describe-after-alter", TOPICS, "", [*b, "--describe", "--topic", "t-cli"]),
        (
            "console-producer",
            "org.apache.kafka.tools.ConsoleProducer",
            LINES,
            [
                *b,
                "--topic",
                "t-console",
                "--property",
                "parse.key=true",
                "--property",
                "key.separator=:",
                "--producer-property",
                "linger.ms=0",
            ],
        ),
        (
            "console-consumer",
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "",
            [
                *b,
                "--topic",
                "t-console",
                "--from-beginning",
                "--max-messages",
                "10",
                "--group",
                "cli-group",
                "--property",
                "print.key=true",
                "--property",
                "key.separator=:",
                "--timeout-ms",
                "30000",
            ],
        ),
        ("groups-list", GROUPS, "", [*b, "--list"]),
        ("groups-describe", GROUPS, "", [*b, "--describe", "--group", "cli-group"]),
        (
            "groups-reset-offsets",
            GROUPS,
            "",
            [*b, "--reset-offsets", "--group", "cli-group", "--topic", "t-console", "--to-offset", "4", "--execute"],
        ),
        ("groups-describe-after-reset", GROUPS, "", [*b, "--describe", "--group", "cli-group"]),
        ("groups-delete", GROUPS, "", [*b, "--delete", "--group", "cli-group"]),
        ("groups-list-after-delete", GROUPS, "", [*b, "--list"]),
        (
            "configs-alter",
            CONFIGS,
            "",
            [
                *b,
                "--entity-type",
                "topics",
                "--entity-name",
                "t-cli",
                "--alter",
                "--add-config",
                "retention.ms=1000,cleanup.policy=compact",
            ],
        ),
        ("configs-describe", CONFIGS, "", [*b, "--entity-type", "topics", "--entity-name", "t-cli", "--describe"]),
        (
            "configs-delete",
            CONFIGS,
            "",
            [*b, "--entity-type", "topics", "--entity-name", "t-cli", "--alter", "--delete-config", "retention.ms"],
        ),
        (
            "configs-describe-after-delete",
            CONFIGS,
            "",
            [*b, "--entity-type", "topics", "--entity-name", "t-cli", "--describe"],
        ),
        ("get-offsets-latest", "org.apache.kafka.tools.GetOffsetShell", "", [*b, "--topic", "t-console"]),
        (
            "get-offsets-earliest",
            "org.apache.kafka.tools.GetOffsetShell",
            "",
            [*b, "--topic", "t-console", "--time", "-2"],
        ),
        (
            "verifiable-producer",
            "org.apache.kafka.tools.VerifiableProducer",
            "",
            [*b, "--topic", "t-verify", "--max-messages", "200", "--acks", "-1"],
        ),
        (
            "verifiable-consumer",
            "org.apache.kafka.tools.VerifiableConsumer",
            "",
            [*b, "--topic", "t-verify", "--group-id", "verify-group", "--max-messages", "200"],
        ),
        ("e2e-latency", "org.apache.kafka.tools.EndToEndLatency", "", [bootstrap, "t-e2e", "200", "all", "100"]),
        (
            "producer-perf",
            "org.apache.kafka.tools.ProducerPerformance",
            "",
            [
                "--topic",
                "t-perf",
                "--num-records",
                "20000",
                "--record-size",
                "100",
                "--throughput",
                "-1",
                "--producer-props",
                f"bootstrap.servers={bootstrap}",
                "acks=1",
                "linger.ms=5",
            ],
        ),
        (
            "consumer-perf",
            "org.apache.kafka.tools.ConsumerPerformance",
            "",
            [*b, "--topic", "t-perf", "--messages", "20000", "--timeout", "30000"],
        ),
        (
            "producer-perf-txn",
            "org.apache.kafka.tools.ProducerPerformance",
            "",
            [
                "--topic",
                "t-txn",
                "--num-records",
                "300",
                "--record-size",
                "20",
                "--throughput",
                "-1",
                "--transactional-id",
                "perf-txn",
                "--transaction-duration-ms",
                "50",
                "--producer-props",
                f"bootstrap.servers={bootstrap}",
            ],
        ),
        ("dump-log", DUMP, "", ["--files", f"{seg}.log", "--print-data-log"]),
        ("dump-offsets", DUMP, "", ["--offsets-decoder", "--files", f"{offsets}.log"]),
        ("dump-txn-state", DUMP, "", ["--transaction-log-decoder", "--files", f"{txn_state}.log"]),
        ("dump-index", DUMP, "", ["--files", f"{perf}.index"]),
        ("dump-timeindex", DUMP, "", ["--files", f"{perf}.timeindex"]),
        ("topics-delete", TOPICS, "", [*b, "--delete", "--topic", "t-cli"]),
    ]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    skip_unless_available(java_unavailable(javac=True))
    base = tmp_path_factory.mktemp("kafka-tools")
    classes, out = base / "classes", base / "out"
    out.mkdir()
    subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", f"{KAFKA_HOME}/libs/*", str(RUNNER)],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    broker = BrokerProcess(
        base / "broker",
        {
            "num.partitions": "1",
            "default.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
        },
    ).start()
    try:
        _consumer_group_with_regexes(broker.port)
    except BaseException:
        broker.stop()
        raise
    steps = plan(broker.bootstrap, broker.log_dir)
    plan_file = base / "plan.tsv"
    plan_file.write_text("".join("\t".join([name, cls, stdin, *args]) + "\n" for name, cls, stdin, args in steps))
    try:
        t0 = time.monotonic()
        run = subprocess.run(
            [
                "java",
                *JVM_FLAGS,
                "--add-opens",
                "java.base/java.lang=ALL-UNNAMED",
                f"-Dlog4j2.configurationFile={KAFKA_HOME / 'config' / 'tools-log4j2.yaml'}",
                "-cp",
                f"{classes}:{KAFKA_HOME}/libs/*",
                "ToolRunner",
                str(plan_file),
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        seconds = time.monotonic() - t0
    finally:
        broker.stop()
    results = {}
    for name, *_ in steps:

        def read(ext: str) -> str:
            p = out / f"{name}.{ext}"  # noqa: B023  read() is called in this iteration only
            return p.read_text(errors="replace") if p.exists() else ""

        results[name] = Run(read("code") or f"not run (runner stderr: {run.stderr[-2000:]})", read("out"), read("err"))
    results["_runner"] = Run(str(run.returncode), f"{seconds:.1f} s\n{run.stdout}", run.stderr[-3000:])
    yield results


def _consumer_group_with_regexes(port: int) -> None:
    """A KIP-848 group (raw ConsumerGroupHeartbeats) whose members subscribe with regular expressions,
    before the tools run: its records, ConsumerGroupRegularExpression among them, are in
    __consumer_offsets when kafka-dump-log reads it. Every member leaves, so nothing expires meanwhile."""
    client = Target("strom", "127.0.0.1", port)

    def beat(member: str, epoch: int, regex: str | None = None):
        answer = client.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            {
                "group_id": "rx-group",
                "member_id": member,
                "member_epoch": epoch,
                "instance_id": None,
                "rack_id": None,
                "rebalance_timeout_ms": 30_000 if epoch == 0 else -1,
                "subscribed_topic_names": [] if epoch == 0 else None,
                "subscribed_topic_regex": regex,
                "server_assignor": None,
                "topic_partitions": [] if epoch == 0 else None,
            },
        )
        assert not isinstance(answer, str) and answer.error_code == 0, answer
        return answer

    try:
        created = client.call(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {
                        "name": "t-regex-1",
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 10_000,
                "validate_only": False,
            },
        )
        assert created.topics[0].error_code == 0, created
        joined = beat("rx-1", 0, "t-regex-.*")
        assigned = beat("rx-1", joined.member_epoch)  # resolved after the first answer: now assigned
        assert [list(t.partitions) for t in assigned.assignment.topic_partitions] == [[0]], assigned
        beat("rx-2", 0, "t-gone-.*")
        beat("rx-2", -1)
        beat("rx-1", -1)
    finally:
        client.close()


def ok(run: Run) -> str:
    assert run.code == "0", f"exit {run.code}\nstdout:\n{run.out[-3000:]}\nstderr:\n{run.err[-3000:]}"
    return run.out


def test_kafka_topics_create_list_describe_alter_delete(tools: dict[str, Run]) -> None:
    assert "Created topic t-cli." in ok(tools["topics-create"])
    assert {"t-cli", "t-console", "t-e2e"} <= set(ok(tools["topics-list"]).split())
    desc = ok(tools["topics-describe"])
    assert re.search(r"Topic: t-cli\s+TopicId: \S+\s+PartitionCount: 3\s+ReplicationFactor: 1", desc), desc
    assert "retention.ms=86400000" in desc
    assert len(re.findall(r"Partition: \d+\s+Leader: \d+\s+Replicas: \d+\s+Isr: \d+", desc)) == 3, desc
    ok(tools["topics-alter"])
    assert "PartitionCount: 4" in ok(tools["topics-describe-after-alter"])
    ok(tools["topics-delete"])


def test_console_producer_then_console_consumer_with_a_group(tools: dict[str, Run]) -> None:
    ok(tools["console-producer"])
    lines = ok(tools["console-consumer"]).split()
    assert lines == [f"key{i}:value-{i}" for i in range(10)]
    assert "Processed a total of 10 messages" in tools["console-consumer"].err


def test_kafka_consumer_groups_list_describe_reset_delete(tools: dict[str, Run]) -> None:
    assert "cli-group" in ok(tools["groups-list"]).split()
    row = _group_row(ok(tools["groups-describe"]))
    assert row[:6] == ["cli-group", "t-console", "0", "10", "10", "0"], row
    reset = ok(tools["groups-reset-offsets"])
    assert re.search(r"cli-group\s+t-console\s+0\s+4", reset), reset
    row = _group_row(ok(tools["groups-describe-after-reset"]))
    assert row[:6] == ["cli-group", "t-console", "0", "4", "10", "6"], row
    assert "Deletion of requested consumer groups ('cli-group') was successful." in ok(tools["groups-delete"])
    assert "cli-group" not in ok(tools["groups-list-after-delete"]).split()


def _group_row(text: str) -> list[str]:
    rows = [line.split() for line in text.splitlines() if line.startswith("cli-group")]
    assert rows, text
    return rows[0]


def test_kafka_configs_alter_describe_delete(tools: dict[str, Run]) -> None:
    assert "Completed updating config for topic t-cli." in ok(tools["configs-alter"])
    desc = ok(tools["configs-describe"])
    assert "retention.ms=1000" in desc and "cleanup.policy=compact" in desc, desc
    ok(tools["configs-delete"])
    after = ok(tools["configs-describe-after-delete"])
    assert "retention.ms" not in after and "cleanup.policy=compact" in after, after


def test_kafka_get_offsets(tools: dict[str, Run]) -> None:
    assert ok(tools["get-offsets-latest"]).split() == ["t-console:0:10"]
    assert ok(tools["get-offsets-earliest"]).split() == ["t-console:0:0"]


def test_verifiable_producer_and_consumer(tools: dict[str, Run]) -> None:
    produced = ok(tools["verifiable-producer"])
    assert produced.count('"name":"producer_send_success"') == 200, produced[-2000:]
    assert '"name":"tool_data"' in produced and '"acked":200' in produced, produced[-2000:]
    consumed = tools["verifiable-consumer"].out
    counts = [int(n) for n in re.findall(r'"name":"records_consumed","count":(\d+)', consumed)]
    assert sum(counts) == 200, consumed[-2000:]
    assert '"name":"offsets_committed"' in consumed and '"success":true' in consumed, consumed[-2000:]


def test_end_to_end_latency(tools: dict[str, Run]) -> None:
    out = ok(tools["e2e-latency"])
    assert re.search(r"Avg latency: [\d.]+ ms", out), out
    assert re.search(r"Percentiles: 50th = \d+, 99th = \d+, 99.9th = \d+", out), out


def test_producer_and_consumer_perf_tests(tools: dict[str, Run]) -> None:
    assert re.search(r"^20000 records sent", ok(tools["producer-perf"]), re.M), tools["producer-perf"].out
    lines = [line for line in ok(tools["consumer-perf"]).splitlines() if line.strip()]
    header, row = lines[-2].split(", "), lines[-1].split(", ")
    assert dict(zip(header, row, strict=False))["data.consumed.in.nMsg"] == "20000", lines


def test_kafka_dump_log_reads_stroms_segment_and_indexes(tools: dict[str, Run]) -> None:
    log = ok(tools["dump-log"])
    assert re.search(r"baseOffset: 0 lastOffset: \d+ count: \d+", log), log[:3000]
    payloads = re.findall(r"key: (key\d+) payload: (value-\d+)", log)
    assert payloads == [(f"key{i}", f"value-{i}") for i in range(10)], log[:3000]
    assert "isvalid: true" in log and "crc:" in log
    # DumpLogSegments checks every index entry against the log: a mismatch is printed
    index = ok(tools["dump-index"])
    entries = re.findall(r"^offset: (\d+) position: (\d+)$", index, re.M)
    assert len(entries) > 100 and "Mismatch" not in index and "Exception" not in index, index[:3000]
    assert [int(o) for o, _ in entries] == sorted(int(o) for o, _ in entries)
    timeindex = ok(tools["dump-timeindex"])
    stamps = re.findall(r"^timestamp: (\d+) offset: (\d+)$", timeindex, re.M)
    assert stamps and "Mismatch" not in timeindex and "Exception" not in timeindex, timeindex[:3000]


def _records(dump: str) -> list[tuple[str, str]]:
    """(key, payload) of every record kafka-dump-log printed, with every batch valid."""
    batches = re.findall(r"^baseOffset: \d+ lastOffset: \d+ count: \d+ .*isvalid: (\w+)$", dump, re.M)
    assert batches and set(batches) == {"true"}, dump[:3000]
    assert "Exception" not in dump, dump[:3000]
    return re.findall(r"^\| offset: \d+ .* key: (.*) payload: (.*)$", dump, re.M)


def test_kafka_dump_log_decodes_stroms_consumer_offsets_records(tools: dict[str, Run]) -> None:
    records = _records(ok(tools["dump-offsets"]))
    verify_commits = [
        json.loads(payload)
        for key, payload in records
        if json.loads(key) == {"type": "1", "data": {"group": "verify-group", "topic": "t-verify", "partition": 0}}
    ]
    assert verify_commits and verify_commits[-1]["version"] == "3", records[-5:]
    assert verify_commits[-1]["data"]["offset"] == 200, verify_commits[-1]
    groups = [(json.loads(key)["data"]["group"], payload) for key, payload in records if json.loads(key)["type"] == "2"]
    members = [json.loads(p) for g, p in groups if g == "verify-group" and p != "<DELETE>"]
    assert members and members[-1]["version"] == "3", groups
    assert members[-1]["data"]["protocolType"] == "consumer" and members[-1]["data"]["generation"] >= 1, members[-1]
    # DeleteGroups: tombstones for cli-group's offset and the group itself, after its last records
    cli = [
        (json.loads(key)["type"], payload)
        for key, payload in records
        if json.loads(key)["data"].get("group") == "cli-group"
    ]
    assert ("1", "<DELETE>") in cli and cli[-1] == ("2", "<DELETE>"), cli


def test_kafka_dump_log_decodes_stroms_consumer_group_records(tools: dict[str, Run]) -> None:
    # KIP-848 records, ConsumerGroupRegularExpression (type 16) among them, as Kafka 4.0's decoder reads
    # them: a regex resolved to its topics, one resolved to none, each tombstoned when its last member left
    records = [(json.loads(key), payload) for key, payload in _records(ok(tools["dump-offsets"]))]
    mine = [(key["type"], key["data"], payload) for key, payload in records if key["data"].get("groupId") == "rx-group"]
    assert {t for t, _, _ in mine} == {"3", "4", "5", "6", "7", "8", "16"}, mine
    regexes = [(data["regularExpression"], payload) for t, data, payload in mine if t == "16"]
    assert [r for r, _ in regexes] == ["t-regex-.*", "t-gone-.*", "t-gone-.*", "t-regex-.*"], regexes
    resolved = json.loads(regexes[0][1])
    assert resolved["version"] == "0" and resolved["data"]["topics"] == ["t-regex-1"], resolved
    assert resolved["data"]["version"] >= 1 and resolved["data"]["timestamp"] > 1_700_000_000_000, resolved
    assert json.loads(regexes[1][1])["data"]["topics"] == [] and regexes[2][1] == regexes[3][1] == "<DELETE>"
    current = [json.loads(payload)["data"] for t, data, payload in mine if t == "8" and payload != "<DELETE>"]
    stable = [c for c in current if c["assignedPartitions"]]
    assert stable and stable[-1]["state"] == 0 and stable[-1]["assignedPartitions"][0]["partitions"] == [0], current


def test_kafka_dump_log_decodes_stroms_transaction_state_records(tools: dict[str, Run]) -> None:
    assert re.search(r"^300 records sent", ok(tools["producer-perf-txn"]), re.M), tools["producer-perf-txn"].out
    records = _records(ok(tools["dump-txn-state"]))
    assert {key for key, _ in records} == {"transaction_metadata::transactionalId=perf-txn"}, records[:5]
    states = [dict(re.findall(r"(\w+)[:=](\[[^]]*\]|[^,]+)", payload)) for _, payload in records]
    assert states[0]["state"] == "Empty" and states[-1]["state"] == "CompleteCommit", states
    seen = [s["state"] for s in states]
    assert {"Ongoing", "PrepareCommit"} <= set(seen) and "PrepareAbort" not in seen, seen
    assert all(s["partitions"] == "[t-txn-0]" for s in states if s["state"] in ("Ongoing", "PrepareCommit")), states
    assert len({s["producerId"] for s in states}) == 1, states
