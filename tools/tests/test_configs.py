"""`strom configs` against a live broker, and Kafka's k=v,k=[a,b] list syntax."""

from __future__ import annotations

import json

import click
import pytest

from strom.tools.common import parse_config_items, split_config_list
from strom.tools.tests.helpers import Strom


def _overrides(strom: Strom, topic: str) -> dict[str, str]:
    rows = json.loads(strom.ok("configs", "describe", "--topic", topic, "--json").output)
    return {k: v["value"] for k, v in rows.items() if v["source"] == "DYNAMIC_TOPIC_CONFIG"}


def test_alter_shows_in_describe_and_delete_removes(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic)
    strom.ok("configs", "alter", "--topic", topic, "--add-config", "retention.ms=60000,cleanup.policy=compact")
    assert _overrides(strom, topic) == {"retention.ms": "60000", "cleanup.policy": "compact"}
    text = strom.ok("configs", "describe", "--topic", topic).output
    assert "retention.ms=60000" in text

    strom.ok("configs", "alter", "--topic", topic, "--delete-config", "cleanup.policy")
    assert _overrides(strom, topic) == {"retention.ms": "60000"}


def test_describe_all_includes_defaults(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic)
    rows = json.loads(strom.ok("configs", "describe", "--topic", topic, "--all", "--json").output)
    assert "segment.bytes" in rows


def test_alter_unknown_topic_is_a_cluster_error(strom: Strom, topic: str) -> None:
    result = strom("configs", "alter", "--topic", topic + "-missing", "--add-config", "retention.ms=1")
    assert result.exit_code == 1


def test_topic_or_broker_is_required(strom: Strom) -> None:
    assert strom("configs", "describe").exit_code == 2
    assert strom("configs", "alter", "--topic", "x").exit_code == 2


def test_config_list_syntax() -> None:
    assert split_config_list("a=1,b=[x,y],c=2") == ["a=1", "b=[x,y]", "c=2"]
    assert parse_config_items(["a=1,b=[x,y]", "c=3"], "--add-config") == {"a": "1", "b": "x,y", "c": "3"}
    with pytest.raises(click.BadParameter):
        parse_config_items(["novalue"], "--add-config")
