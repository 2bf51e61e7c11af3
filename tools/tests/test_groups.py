"""`strom groups` against a live broker; skipped while the broker has no group coordinator."""

from __future__ import annotations

import json

import pytest

from strom.tools.common import FIND_COORDINATOR_KEY, GROUPS_UNSUPPORTED, supported_apis
from strom.tools.tests.helpers import Strom


@pytest.fixture
def groups_strom(strom: Strom) -> Strom:
    apis = supported_apis(strom.broker.bootstrap)
    if apis is None or FIND_COORDINATOR_KEY not in apis:
        pytest.skip(GROUPS_UNSUPPORTED)
    return strom


def _commit(strom: Strom, group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": strom.broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _lag_rows(strom: Strom, group: str) -> list[dict]:
    doc = json.loads(strom.ok("groups", "describe", "--group", group, "--json").stdout)
    return [
        {k: r[k] for k in ("topic", "partition", "current_offset", "log_end_offset", "lag")} for r in doc["partitions"]
    ]


def test_describe_lag_matches_committed_offsets(groups_strom: Strom, topic: str) -> None:
    strom = groups_strom
    group = f"g-{topic}"
    strom.ok("produce", "--topic", topic, input="a\nb\nc\nd\ne\n")
    _commit(strom, group, topic, 2)
    assert _lag_rows(strom, group) == [
        {"topic": topic, "partition": 0, "current_offset": 2, "log_end_offset": 5, "lag": 3}
    ]
    assert group in strom.ok("groups", "list").stdout.splitlines()
    table = strom.ok("groups", "describe", "--group", group).stdout
    assert "LOG-END-OFFSET" in table and topic in table


def test_reset_offsets_dry_run_then_execute(groups_strom: Strom, topic: str) -> None:
    strom = groups_strom
    group = f"g-{topic}"
    strom.ok("produce", "--topic", topic, input="a\nb\nc\nd\n")
    _commit(strom, group, topic, 3)

    plan = json.loads(
        strom.ok("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--json").stdout
    )
    assert plan == {
        "executed": False,
        "partitions": [{"group": group, "topic": topic, "partition": 0, "new_offset": 0}],
    }
    assert _lag_rows(strom, group)[0]["current_offset"] == 3  # dry run changed nothing

    strom.ok("groups", "reset-offsets", "--group", group, "--all-topics", "--to-offset", "1", "--execute")
    assert _lag_rows(strom, group)[0]["lag"] == 3
    strom.ok("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:0", "--shift-by", "2", "--execute")
    assert _lag_rows(strom, group)[0]["current_offset"] == 3
    strom.ok("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-offset", "99", "--execute")
    assert _lag_rows(strom, group)[0]["current_offset"] == 4  # clamped to the log end


def test_consume_with_group_commits_what_it_read(groups_strom: Strom, topic: str) -> None:
    strom = groups_strom
    group = f"g-{topic}"
    strom.ok("produce", "--topic", topic, input="1\n2\n3\n4\n5\n")
    read = strom.ok(
        "consume",
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "3",
        "--consumer-property",
        "enable.auto.offset.store=true",
    )
    assert read.stdout == "1\n2\n3\n"
    assert _lag_rows(strom, group)[0]["current_offset"] == 3


def test_delete_group(groups_strom: Strom, topic: str) -> None:
    strom = groups_strom
    group = f"g-{topic}"
    strom.ok("produce", "--topic", topic, input="x\n")
    _commit(strom, group, topic, 1)
    strom.ok("groups", "delete", "--group", group)
    assert group not in strom.ok("groups", "list").stdout.splitlines()


def test_reset_needs_exactly_one_scenario(strom: Strom) -> None:
    result = strom("groups", "reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest")
    assert result.exit_code == 2
