"""`strom produce` / `strom consume` against a live broker, and their line/format parsing."""

from __future__ import annotations

import json

import click
import pytest

from strom.tools.console import LineReader, compile_format
from strom.tools.tests.helpers import Strom


def _consume_json(strom: Strom, *args: str) -> list[dict]:
    result = strom.ok("consume", *args, "--json", "--timeout-ms", "5000")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_produce_then_consume_returns_lines_with_keys_and_headers(strom: Strom, topic: str) -> None:
    produced = strom.ok(
        "produce", "--topic", topic, "--key-separator", ":", "--header", "source=test", input="k1:hello\nk2:world\n"
    )
    assert "Produced 2 records" in produced.stdout

    records = _consume_json(strom, "--topic", topic, "--from-beginning", "--max-messages", "2")
    assert [(r["key"], r["value"], r["offset"]) for r in records] == [("k1", "hello", 0), ("k2", "world", 1)]
    assert all(r["headers"] == [["source", "test"]] and r["topic"] == topic for r in records)


def test_parse_headers_property_and_null_marker(strom: Strom, topic: str) -> None:
    strom.ok(
        "produce",
        "--topic",
        topic,
        "--property",
        "parse.headers=true",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=|",
        "--property",
        "null.marker=NULL",
        input="a:1,b:2\tNULL|v1\n",
    )
    (record,) = _consume_json(strom, "--topic", topic, "--from-beginning", "--max-messages", "1")
    assert record["key"] is None
    assert record["value"] == "v1"
    assert record["headers"] == [["a", "1"], ["b", "2"]]


def test_format_and_print_flags(strom: Strom, topic: str) -> None:
    strom.ok("produce", "--topic", topic, "--key-separator", "=", input="k=v\n")
    fmt = strom.ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "1", "--format", "%k:%v@%o")
    assert fmt.stdout == "k:v@0\n"
    flags = strom.ok(
        "consume",
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "1",
        "--print-key",
        "--print-offset",
        "--print-headers",
    )
    assert flags.stdout == "Offset:0\tNO_HEADERS\tk\tv\n"
    assert "Processed a total of 1 messages" in flags.stderr


def test_partition_and_offset_select_where_reading_starts(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic, "--partitions", "2")
    strom.ok("produce", "--topic", topic, "--partition", "1", input="a\nb\nc\nd\n")
    records = _consume_json(strom, "--topic", topic, "--partition", "1", "--offset", "2", "--max-messages", "2")
    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [(1, 2, "c"), (1, 3, "d")]


def test_from_timestamp_skips_older_records(strom: Strom, topic: str) -> None:
    strom.ok("produce", "--topic", topic, input="old\n")
    old = _consume_json(strom, "--topic", topic, "--from-beginning", "--max-messages", "1")[0]
    strom.ok("produce", "--topic", topic, input="new\n")
    new = _consume_json(strom, "--topic", topic, "--offset", "1", "--partition", "0", "--max-messages", "1")[0]
    if new["timestamp"] == old["timestamp"]:
        pytest.skip("both records got the same millisecond timestamp")
    records = _consume_json(strom, "--topic", topic, "--from-timestamp", str(new["timestamp"]), "--max-messages", "1")
    assert [r["value"] for r in records] == ["new"]


def test_consume_stops_after_idle_timeout_with_what_it_read(strom: Strom, topic: str) -> None:
    strom.ok("produce", "--topic", topic, input="only\n")
    result = strom.ok("consume", "--topic", topic, "--from-beginning", "--timeout-ms", "1500")
    assert result.stdout == "only\n"


def test_missing_key_separator_is_reported_with_line_number() -> None:
    reader = LineReader(parse_key=True, key_separator=":")
    with pytest.raises(click.ClickException, match="line 7"):
        reader.parse("no separator here", 7)
    assert LineReader(parse_key=True, key_separator=":", ignore_error=True).parse("v", 1) == (None, b"v", [])


def test_line_reader_splits_headers_key_and_value() -> None:
    reader = LineReader.from_properties({"parse.headers": "true", "parse.key": "true", "key.separator": "\\t"})
    assert reader.parse("h1:x,h2\tkey\tval\tue", 1) == (b"key", b"val\tue", [("h1", b"x"), ("h2", None)])


def test_unknown_reader_property_is_a_usage_error() -> None:
    with pytest.raises(click.BadParameter, match="parse.kee"):
        LineReader.from_properties({"parse.kee": "true"})


def test_format_tokens_and_unknown_token() -> None:
    class Msg:
        def topic(self):
            return "t"

        def partition(self):
            return 3

        def offset(self):
            return 9

        def key(self):
            return None

        def value(self):
            return b"v"

        def headers(self):
            return [("a", b"1")]

        def timestamp(self):
            return (1, 42)

    assert compile_format("%t/%p/%o %k=%v %h %T %K %S %%\\t")(Msg()) == "t/3/9 null=v a:1 42 -1 1 %\t"
    with pytest.raises(click.BadParameter):
        compile_format("%q")


def test_exit_at_end_reads_every_partition_to_its_end(strom: Strom, topic: str) -> None:
    strom.ok("topics", "create", "--topic", topic, "--partitions", "2")
    strom.ok("produce", "--topic", topic, "--partition", "1", input="a\nb\n")
    result = strom.ok("consume", "--topic", topic, "--from-beginning", "--exit-at-end", "--timeout-ms", "20000")
    assert result.stdout == "a\nb\n"


def test_produce_reads_a_file(strom: Strom, topic: str, tmp_path) -> None:
    source = tmp_path / "lines.txt"
    source.write_text("one\ntwo\n")
    assert "Produced 2 records" in strom.ok("produce", "--topic", topic, "--file", str(source)).stdout
    records = _consume_json(strom, "--topic", topic, "--from-beginning", "--max-messages", "2")
    assert [r["value"] for r in records] == ["one", "two"]
