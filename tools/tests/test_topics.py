"""`strom topics` against a live broker."""

from __future__ import annotations

import json

from strom.tools.tests.helpers import Strom


def test_created_topic_is_listed_and_described(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic, "--partitions", "3", "--config", "retention.ms=123456")

    assert topic in strom.ok("topics", "list").output.splitlines()
    assert json.loads(strom.ok("topics", "list", "--json").output).count(topic) == 1
    info = json.loads(strom.ok("topics", "describe", "--topic", topic, "--json").output)
    assert info["partition_count"] == 3
    assert [p["partition"] for p in info["partitions"]] == [0, 1, 2]
    assert all(p["leader"] >= 0 and p["isr"] == p["replicas"] for p in info["partitions"])
    assert info["configs"]["retention.ms"] == "123456"


def test_describe_shows_earliest_and_latest_offsets(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic, "--partitions", "2")
    strom.ok("produce", "--topic", topic, "--partition", "1", input="a\nb\nc\n")

    info = json.loads(strom.ok("topics", "describe", "--topic", topic, "--json").output)
    offsets = {p["partition"]: (p["earliest_offset"], p["latest_offset"]) for p in info["partitions"]}
    assert offsets == {0: (0, 0), 1: (0, 3)}
    text = strom.ok("topics", "describe", "--topic", topic).output
    assert f"Topic: {topic}\tPartition: 1\t" in text and "LatestOffset: 3" in text


def test_create_existing_topic_fails_unless_if_not_exists(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic)
    again = strom("topics", "create", "--topic", topic)
    assert again.exit_code == 1
    assert "--if-not-exists" in again.output
    assert "already exists" in strom.ok("topics", "create", "--topic", topic, "--if-not-exists").output


def test_alter_adds_partitions(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic, "--partitions", "1")
    strom.ok("topics", "alter", "--topic", topic, "--partitions", "4")
    info = json.loads(strom.ok("topics", "describe", "--topic", topic, "--json").output)
    assert info["partition_count"] == 4


def test_delete_removes_topic_and_if_exists_tolerates_missing(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic)
    strom.ok("topics", "delete", "--topic", topic)
    assert topic not in strom.ok("topics", "list").output.splitlines()
    assert strom("topics", "delete", "--topic", topic).exit_code == 1
    strom.ok("topics", "delete", "--topic", topic, "--if-exists")


def test_describe_unknown_topic_is_a_cluster_error(strom: Strom, topic: str) -> None:
    result = strom("topics", "describe", "--topic", topic + "-missing")
    assert result.exit_code == 1
    assert "does not exist" in result.output


def test_missing_required_option_is_a_usage_error(strom: Strom) -> None:
    result = strom("topics", "create")
    assert result.exit_code == 2
    assert "--topic" in result.output


def test_bootstrap_on_the_subcommand_works_too(strom: Strom, topic: str) -> None:
    result = strom("topics", "create", "--bootstrap-server", strom.broker.bootstrap, "--topic", topic, bootstrap=False)
    assert result.exit_code == 0, result.output


def test_unreachable_broker_says_what_to_do(strom: Strom) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        result = strom("topics", "--bootstrap-server", f"127.0.0.1:{port}", "list", bootstrap=False)
    assert result.exit_code == 1
    assert f"cannot reach 127.0.0.1:{port}" in result.output
    assert "strom serve" in result.output
