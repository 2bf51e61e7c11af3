"""`strom produce` and `strom consume`: the console producer and consumer, as Kafka's
kafka-console-producer / kafka-console-consumer, on confluent-kafka's Producer and Consumer.

Input lines for `produce` are parsed as Kafka's LineMessageReader does:
``[headers<headers.delimiter>][key<key.separator>]value`` where headers are
``k<headers.key.separator>v<headers.separator>...``; a field equal to ``null.marker`` is null.
"""

from __future__ import annotations

import codecs
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import click

from strom.tools.common import (
    ClusterError,
    client_config,
    cluster_errors,
    connection_options,
    describe_kafka_error,
    emit_json,
    ensure_reachable,
    import_confluent,
    parse_kv,
    read_properties,
    require_group_support,
    resolve_connection,
    stderr,
    text_or_base64,
)

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["all", "-1", "0", "1"]
PROGRESS_EVERY_S = 2.0
POLL_S = 0.2
METADATA_TIMEOUT_S = 10.0

# --------------------------------------------------------------------------- line parsing


def _unescape(text: str) -> str:
    """``\\t`` and friends in separators given on the command line."""
    return codecs.decode(text, "unicode_escape")


@dataclass
class LineReader:
    """Turns one input line into (key, value, headers) following Kafka's reader properties."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None
    ignore_error: bool = False
    static_headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    PROPERTIES = {
        "parse.key": ("parse_key", lambda v: v.lower() == "true"),
        "key.separator": ("key_separator", _unescape),
        "parse.headers": ("parse_headers", lambda v: v.lower() == "true"),
        "headers.delimiter": ("headers_delimiter", _unescape),
        "headers.separator": ("headers_separator", _unescape),
        "headers.key.separator": ("headers_key_separator", _unescape),
        "null.marker": ("null_marker", str),
        "ignore.error": ("ignore_error", lambda v: v.lower() == "true"),
    }

    @classmethod
    def from_properties(cls, props: dict[str, str], **kwargs: Any) -> LineReader:
        reader = cls(**kwargs)
        for name, value in props.items():
            if name not in cls.PROPERTIES:
                known = ", ".join(cls.PROPERTIES)
                raise click.BadParameter(f"unknown reader property {name!r} (known: {known})", param_hint="--property")
            attr, convert = cls.PROPERTIES[name]
            setattr(reader, attr, convert(value))
        return reader

    def _nullable(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode("utf-8")

    def _split(self, line: str, sep: str, what: str, number: int) -> tuple[str | None, str]:
        head, found, rest = line.partition(sep)
        if found:
            return head, rest
        if self.ignore_error:
            return None, line
        raise click.ClickException(
            f"line {number}: no {what} {sep!r} found (use --property ignore.error=true to send such lines without one)"
        )

    def _headers(self, text: str | None) -> list[tuple[str, bytes | None]]:
        if not text:
            return []
        out = []
        for item in text.split(self.headers_separator):
            name, found, value = item.partition(self.headers_key_separator)
            out.append((name, self._nullable(value) if found else None))
        return out

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers: list[tuple[str, bytes | None]] = list(self.static_headers)
        if self.parse_headers:
            header_text, line = self._split(line, self.headers_delimiter, "headers delimiter", number)
            headers += self._headers(header_text)
        key = None
        if self.parse_key:
            key_text, line = self._split(line, self.key_separator, "key separator", number)
            key = None if key_text is None else self._nullable(key_text)
        return key, self._nullable(line), headers


def _lines(stream: IO[str]) -> Iterator[str]:
    for line in stream:
        yield line.rstrip("\r\n")


# --------------------------------------------------------------------------- progress


class Progress:
    """A status line on stderr for long runs: only after PROGRESS_EVERY_S and only on a terminal."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.started = time.monotonic()
        self.last = self.started
        self.shown = False

    def update(self, count: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        rate = count / max(now - self.started, 1e-9)
        sys.stderr.write(f"\r{count} {self.label} ({rate:,.0f}/s)")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


# --------------------------------------------------------------------------- produce


@dataclass
class DeliveryTally:
    delivered: int = 0
    failed: int = 0
    first_error: str | None = None

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = describe_kafka_error(err, f"cannot deliver to {msg.topic()}")


def _producer_config(acks: str, compression: str, timeout_ms: int, extra: dict[str, str]) -> dict[str, Any]:
    return {"acks": acks, "compression.type": compression, "linger.ms": 5, "message.timeout.ms": timeout_ms, **extra}


def _send(producer: Any, topic: str, partition: int | None, record: tuple[Any, Any, Any], tally: DeliveryTally) -> None:
    key, value, headers = record
    kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": tally}
    if headers:
        kwargs["headers"] = headers
    if partition is not None:
        kwargs["partition"] = partition
    while True:
        try:
            producer.produce(topic, **kwargs)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(POLL_S)


@click.command("produce")
@connection_options
@click.option("--topic", required=True, help="Topic to produce to.")
@click.option(
    "--file", "input_file", type=click.File("r", encoding="utf-8"), help="Read lines from this file [default: stdin]."
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="Reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
    "headers.separator, headers.key.separator, null.marker, ignore.error (repeatable).",
)
@click.option("--key-separator", help="Lines are KEY<SEP>VALUE (same as parse.key=true key.separator=SEP).")
@click.option(
    "--header",
    "static_headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="Add this header to every record (repeatable).",
)
@click.option("--compression", type=click.Choice(COMPRESSIONS), default="none", show_default=True)
@click.option("--acks", type=click.Choice(ACKS), default="all", show_default=True)
@click.option("--partition", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option(
    "--producer-property",
    "producer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A librdkafka producer setting (repeatable).",
)
@click.option(
    "--producer.config",
    "producer_config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A .properties file of producer settings.",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=30_000,
    show_default=True,
    help="Give up on a record not acknowledged in this time.",
)
@click.option("--quiet", is_flag=True, help="No progress or summary on stderr/stdout.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@cluster_errors
def produce(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str,
    input_file: IO[str] | None,
    properties: tuple[str, ...],
    key_separator: str | None,
    static_headers: tuple[str, ...],
    compression: str,
    acks: str,
    partition: int | None,
    producer_properties: tuple[str, ...],
    producer_config_file: Path | None,
    timeout_ms: int,
    quiet: bool,
    as_json: bool,
) -> None:
    """Send each input line as a record (as kafka-console-producer); prints how many were sent."""
    props = parse_kv(properties, "--property")
    if key_separator is not None:
        props.update({"parse.key": "true", "key.separator": key_separator})
    headers = [(k, v.encode("utf-8")) for k, v in parse_kv(static_headers, "--header").items()]
    reader = LineReader.from_properties(props, static_headers=headers)
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    extra = {
        **extra,
        **(read_properties(producer_config_file) if producer_config_file else {}),
        **parse_kv(producer_properties, "--producer-property"),
    }
    ck = import_confluent()
    ensure_reachable(bootstrap)
    producer = ck.Producer(client_config(bootstrap, _producer_config(acks, compression, timeout_ms, extra)))
    tally = DeliveryTally()
    sent = _produce_lines(producer, topic, partition, reader, input_file or sys.stdin, tally, not quiet)
    _report_produce(topic, sent, tally, quiet, as_json)


def _produce_lines(
    producer: Any,
    topic: str,
    partition: int | None,
    reader: LineReader,
    stream: IO[str],
    tally: DeliveryTally,
    show_progress: bool,
) -> int:
    progress = Progress("records sent", show_progress)
    sent = 0
    try:
        for number, line in enumerate(_lines(stream), start=1):
            _send(producer, topic, partition, reader.parse(line, number), tally)
            sent += 1
            progress.update(sent)
    except KeyboardInterrupt:
        stderr("interrupted: flushing what was sent")
    finally:
        progress.close()
        producer.flush()
    return sent


def _report_produce(topic: str, sent: int, tally: DeliveryTally, quiet: bool, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "topic": topic,
                "sent": sent,
                "delivered": tally.delivered,
                "failed": tally.failed,
                "error": tally.first_error,
            }
        )
    elif not quiet:
        click.echo(f"Produced {tally.delivered} records to {topic}.")
    if tally.failed or tally.delivered != sent:
        missing = sent - tally.delivered
        raise ClusterError(f"{missing} of {sent} records were not delivered: {tally.first_error or 'no answer'}")


# --------------------------------------------------------------------------- consume: output


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _headers_text(headers: list[tuple[str, bytes | None]] | None) -> str:
    return ",".join(f"{k}:{_text(v)}" for k, v in (headers or [])) or "NO_HEADERS"


TOKENS: dict[str, Callable[[Any], str]] = {
    "t": lambda m: m.topic(),
    "p": lambda m: str(m.partition()),
    "o": lambda m: str(m.offset()),
    "k": lambda m: _text(m.key()),
    "v": lambda m: _text(m.value()),
    "h": lambda m: _headers_text(m.headers()),
    "T": lambda m: str(m.timestamp()[1]),
    "K": lambda m: str(-1 if m.key() is None else len(m.key())),
    "S": lambda m: str(-1 if m.value() is None else len(m.value())),
    "%": lambda m: "%",
}


def compile_format(fmt: str) -> Callable[[Any], str]:
    """kcat-style ``%t %p %o %k %v %h %T %K %S %%`` plus ``\\n``/``\\t`` escapes."""
    fmt = _unescape(fmt)
    pieces: list[Callable[[Any], str]] = []
    i = 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt) and fmt[i + 1] in TOKENS:
            pieces.append(TOKENS[fmt[i + 1]])
            i += 2
            continue
        if fmt[i] == "%":
            raise click.BadParameter(
                f"unknown token {fmt[i : i + 2]!r} (known: %" + " %".join(TOKENS) + ")", param_hint="--format"
            )
        literal = fmt[i]
        pieces.append(lambda m, s=literal: s)
        i += 1
    return lambda m: "".join(p(m) for p in pieces)


TIMESTAMP_TYPES = {0: "NoTimestampType", 1: "CreateTime", 2: "LogAppendTime"}


def kafka_style_formatter(
    print_timestamp: bool,
    print_partition: bool,
    print_offset: bool,
    print_headers: bool,
    print_key: bool,
    separator: str,
) -> Callable[[Any], str]:
    """As Kafka's DefaultMessageFormatter: the chosen fields, then the value, ``separator`` between."""
    fields: list[tuple[bool, Callable[[Any], str]]] = [
        (print_timestamp, lambda m: f"{TIMESTAMP_TYPES.get(m.timestamp()[0], 'CreateTime')}:{m.timestamp()[1]}"),
        (print_partition, lambda m: f"Partition:{m.partition()}"),
        (print_offset, lambda m: f"Offset:{m.offset()}"),
        (print_headers, lambda m: _headers_text(m.headers())),
        (print_key, lambda m: _text(m.key())),
        (True, lambda m: _text(m.value())),
    ]
    chosen = [f for on, f in fields if on]
    return lambda m: separator.join(f(m) for f in chosen)


def record_json(msg: Any) -> dict[str, Any]:
    """One record as JSON: text fields, or {"base64": ...} for bytes that are not UTF-8."""

    def field_(data: bytes | None) -> Any:
        encoded = text_or_base64(data)
        return encoded.get("text") if "text" in encoded else encoded

    ts_type, ts = msg.timestamp()
    return {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": ts,
        "timestamp_type": TIMESTAMP_TYPES.get(ts_type, "CreateTime"),
        "key": field_(msg.key()),
        "value": field_(msg.value()),
        "headers": [[k, field_(v)] for k, v in (msg.headers() or [])],
    }


# --------------------------------------------------------------------------- consume: positioning


def _start_offset(ck: Any, offset: str | None, from_beginning: bool) -> int:
    named = {"earliest": ck.OFFSET_BEGINNING, "latest": ck.OFFSET_END}
    if offset is None:
        return ck.OFFSET_BEGINNING if from_beginning else ck.OFFSET_END
    if offset in named:
        return named[offset]
    try:
        value = int(offset)
    except ValueError:
        raise click.BadParameter(f"{offset!r}: expected a number, earliest or latest", param_hint="--offset") from None
    if value < 0:
        raise click.BadParameter("must be >= 0", param_hint="--offset")
    return value


def _partitions_of(consumer: Any, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    meta = metadata.topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        reason = meta.error.str() if meta is not None and meta.error is not None else "no such topic"
        raise ClusterError(f"cannot consume {topic}: {reason} (list the topics with `strom topics list`)")
    return sorted(meta.partitions)


def _by_timestamp(consumer: Any, ck: Any, partitions: list[Any], timestamp: int) -> list[Any]:
    query = [ck.TopicPartition(tp.topic, tp.partition, timestamp) for tp in partitions]
    found = consumer.offsets_for_times(query, timeout=METADATA_TIMEOUT_S)
    return [ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else ck.OFFSET_END) for tp in found]


@dataclass
class ConsumeLimits:
    max_messages: int | None
    timeout_ms: int | None
    exit_at_end: bool


class ConsumeLoop:
    """Polls, prints and decides when to stop (max messages, idle timeout, end of partitions)."""

    def __init__(self, consumer: Any, render: Callable[[Any], str], limits: ConsumeLimits) -> None:
        self.consumer = consumer
        self.render = render
        self.limits = limits
        self.count = 0
        self.at_end: set[tuple[str, int]] = set()
        self.assigned = 0

    def _done(self, idle_since: float) -> bool:
        limits = self.limits
        if limits.max_messages is not None and self.count >= limits.max_messages:
            return True
        if limits.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= limits.timeout_ms:
            return True
        return limits.exit_at_end and self.assigned > 0 and len(self.at_end) >= self.assigned

    def _handle_error(self, msg: Any, ck: Any) -> None:
        err = msg.error()
        if err.code() == ck.KafkaError._PARTITION_EOF:
            self.at_end.add((msg.topic(), msg.partition()))
            return
        if err.fatal() or err.code() in (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError.TOPIC_AUTHORIZATION_FAILED):
            raise ClusterError(describe_kafka_error(err, "consume failed"))
        stderr(f"warning: {describe_kafka_error(err)}")

    def run(self, ck: Any) -> int:
        idle_since = time.monotonic()
        while not self._done(idle_since):
            self.assigned = max(self.assigned, len(self.consumer.assignment()))
            msg = self.consumer.poll(POLL_S)
            if msg is None:
                continue
            if msg.error():
                self._handle_error(msg, ck)
                continue
            self.at_end.discard((msg.topic(), msg.partition()))
            click.echo(self.render(msg))
            self.count += 1
            idle_since = time.monotonic()
        return self.count


def _consumer_config(group: str | None, from_beginning: bool, isolation: str, extra: dict[str, str]) -> dict[str, Any]:
    return {
        "group.id": group or "strom-console-consumer",
        "enable.auto.commit": group is not None,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": True,
        "isolation.level": isolation,
        **extra,
    }


@click.command("consume")
@connection_options
@click.option("--topic", required=True, help="Topic to read.")
@click.option("--group", help="Consume as this consumer group (subscribe, commit offsets).")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (when nothing is committed).")
@click.option("--offset", help="Start offset: a number, earliest or latest (needs --partition unless applied to all).")
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option("--from-timestamp", type=int, metavar="MS", help="Start at the first record at or after this epoch ms.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many records.")
@click.option("--timeout-ms", type=click.IntRange(min=1), help="Exit when no record arrives for this long.")
@click.option("--exit-at-end", "-e", is_flag=True, help="Exit once every assigned partition is read to its end.")
@click.option("--format", "fmt", help="Output per record, kcat-like: %t %p %o %k %v %h %T %K %S, e.g. '%k:%v'.")
@click.option("--print-key", is_flag=True)
@click.option("--print-headers", is_flag=True)
@click.option("--print-offset", is_flag=True)
@click.option("--print-partition", is_flag=True)
@click.option("--print-timestamp", is_flag=True)
@click.option("--key-separator", default="\\t", show_default=True, help="Between the printed fields.")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
@click.option(
    "--consumer-property",
    "consumer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A librdkafka consumer setting (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record.")
@cluster_errors
def consume(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str,
    group: str | None,
    from_beginning: bool,
    offset: str | None,
    partition: int | None,
    from_timestamp: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    exit_at_end: bool,
    fmt: str | None,
    print_key: bool,
    print_headers: bool,
    print_offset: bool,
    print_partition: bool,
    print_timestamp: bool,
    key_separator: str,
    isolation_level: str,
    consumer_properties: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print records of a topic (as kafka-console-consumer)."""
    if sum((offset is not None, from_timestamp is not None, from_beginning)) > 1:
        raise click.UsageError("give at most one of --offset, --from-timestamp and --from-beginning")
    if fmt is not None and as_json:
        raise click.UsageError("--format and --json exclude each other")
    render = (
        (lambda m: json.dumps(record_json(m)))
        if as_json
        else compile_format(fmt)
        if fmt is not None
        else kafka_style_formatter(
            print_timestamp, print_partition, print_offset, print_headers, print_key, _unescape(key_separator)
        )
    )
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    extra = {**extra, **parse_kv(consumer_properties, "--consumer-property")}
    ck = import_confluent()
    ensure_reachable(bootstrap)
    subscribe = group is not None and partition is None and offset is None
    if subscribe:
        require_group_support(bootstrap, extra)
    consumer = ck.Consumer(client_config(bootstrap, _consumer_config(group, from_beginning, isolation_level, extra)))
    loop = ConsumeLoop(consumer, render, ConsumeLimits(max_messages, timeout_ms, exit_at_end))
    try:
        _position(consumer, ck, topic, partition, offset, from_beginning, from_timestamp, subscribe)
        count = loop.run(ck)
    except KeyboardInterrupt:
        count = loop.count
    finally:
        consumer.close()
    stderr(f"Processed a total of {count} messages")


def _position(
    consumer: Any,
    ck: Any,
    topic: str,
    partition: int | None,
    offset: str | None,
    from_beginning: bool,
    from_timestamp: int | None,
    subscribe: bool,
) -> None:
    if subscribe:
        on_assign = None
        if from_timestamp is not None:

            def on_assign(c: Any, partitions: list[Any]) -> None:
                c.assign(_by_timestamp(c, ck, partitions, from_timestamp))

        consumer.subscribe([topic], **({"on_assign": on_assign} if on_assign else {}))
        return
    partitions = [partition] if partition is not None else _partitions_of(consumer, topic)
    start = _start_offset(ck, offset, from_beginning)
    assignment = [ck.TopicPartition(topic, p, start) for p in partitions]
    if from_timestamp is not None:
        assignment = _by_timestamp(consumer, ck, assignment, from_timestamp)
    consumer.assign(assignment)
