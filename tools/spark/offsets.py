"""Offset planning for the Spark data source, as pure code (no client, no Spark).

The options are those of Spark's own ``kafka`` source:

* ``startingOffsets`` / ``endingOffsets``: ``"earliest"``, ``"latest"`` or JSON
  ``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest;
* ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: JSON ``{"topic": {"0": <ms>}}``;
* ``startingTimestamp`` / ``endingTimestamp``: one timestamp (ms) for every partition;
* precedence, as Spark: global timestamp, then per-partition timestamps, then offsets;
* ``startingOffsetsByTimestampStrategy``: ``"error"`` (default: a partition without a record at or
  after the timestamp fails the query) or ``"latest"`` (it starts at the latest offset);
* ``maxOffsetsPerTrigger``: a micro-batch reads at most that many offsets, shared among the
  partitions in proportion to their backlog (a partition with any backlog gets at least one);
* ``minPartitions``: ranges are split so a batch has at least that many Spark partitions.

Offsets checkpointed by Spark use the same JSON shape: ``{"topic": {"partition": next_offset}}``.
A resolved offset is always the next offset to read (inclusive start, exclusive end).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1
MAX_OFFSET = 2**63 - 1


class OffsetOptionError(ValueError):
    """An offset option is malformed, or names partitions/offsets that cannot be used."""


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (deleted by retention, or a partition vanished)."""


# --------------------------------------------------------------------------- JSON


def parse_offsets_json(text: str, what: str = "offsets") -> OffsetMap:
    """``{"t": {"0": 5}}`` -> ``{("t", 0): 5}``; anything else raises :class:`OffsetOptionError`."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise OffsetOptionError(f"{what}: not JSON: {text!r}") from None
    if not isinstance(doc, dict):
        raise OffsetOptionError(f'{what}: expected {{"topic": {{"partition": offset}}}}, got {text!r}')
    out: OffsetMap = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise OffsetOptionError(f"{what}: topic {topic!r} must map partitions to numbers")
        for partition, value in parts.items():
            out[(topic, _partition_number(partition, what))] = _offset_number(value, what)
    return out


def _partition_number(text: object, what: str) -> int:
    try:
        number = int(str(text))
    except ValueError:
        raise OffsetOptionError(f"{what}: partition {text!r} is not a number") from None
    if number < 0:
        raise OffsetOptionError(f"{what}: partition {number} is negative")
    return number


def _offset_number(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetOptionError(f"{what}: {value!r} is not an integer")
    return value


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form: ``{"t": {"0": 5}}``, topics and partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    """Inverse of :func:`offsets_to_json` (for the dicts Spark hands back from a checkpoint)."""
    return parse_offsets_json(json.dumps(doc), "checkpointed offsets")


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    ``kind`` is ``earliest``, ``latest``, ``offsets`` (``values`` holds offsets, -2/-1 allowed),
    ``timestamps`` (``values`` holds per-partition timestamps) or ``timestamp`` (one timestamp
    for every partition, in ``timestamp``).
    """

    kind: str
    values: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0


def _option(options: Mapping[str, str], name: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    value = lowered.get(name.lower())
    return None if value is None else str(value).strip()


def _timestamp_number(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise OffsetOptionError(f"{name}: {text!r} is not a timestamp in milliseconds") from None
    if value < 0:
        raise OffsetOptionError(f"{name}: timestamp {value} is negative")
    return value


def parse_spec(options: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """The start (``which="starting"``) or end (``"ending"``) spec from Spark kafka options."""
    global_ts = _option(options, f"{which}Timestamp")
    if global_ts is not None:
        return OffsetSpec("timestamp", timestamp=_timestamp_number(global_ts, f"{which}Timestamp"))
    by_ts = _option(options, f"{which}OffsetsByTimestamp")
    if by_ts is not None:
        values = parse_offsets_json(by_ts, f"{which}OffsetsByTimestamp")
        for tp, ts in values.items():
            if ts < 0:
                raise OffsetOptionError(f"{which}OffsetsByTimestamp: {tp} has negative timestamp {ts}")
        return OffsetSpec("timestamps", values)
    text = _option(options, f"{which}Offsets") or default
    if text.lower() in ("earliest", "latest"):
        spec = OffsetSpec(text.lower())
    else:
        spec = OffsetSpec("offsets", parse_offsets_json(text, f"{which}Offsets"))
    _check_allowed(spec, which)
    return spec


def _check_allowed(spec: OffsetSpec, which: str) -> None:
    """Spark refuses an ending 'earliest' and starting 'latest' per-partition offsets (-1) in batch."""
    if which == "ending" and spec.kind == "earliest":
        raise OffsetOptionError("endingOffsets: 'earliest' is not allowed (use 'latest' or JSON offsets)")
    if which == "ending" and spec.kind == "offsets" and EARLIEST in spec.values.values():
        raise OffsetOptionError("endingOffsets: -2 (earliest) is not allowed as an ending offset")
    for value in spec.values.values():
        if spec.kind == "offsets" and value < EARLIEST:
            raise OffsetOptionError(f"{which}Offsets: offset {value} is not valid (use -2, -1 or >= 0)")


def check_batch_start(spec: OffsetSpec) -> None:
    """A batch query cannot start at 'latest' (it would always be empty): Spark refuses it too."""
    if spec.kind == "latest" or (spec.kind == "offsets" and LATEST in spec.values.values()):
        raise OffsetOptionError("startingOffsets: 'latest' is not allowed for a batch query")


def timestamps_to_look_up(spec: OffsetSpec, partitions: Iterable[TopicPartition]) -> OffsetMap:
    """The (partition -> timestamp) lookups the cluster must answer to resolve ``spec``."""
    if spec.kind == "timestamp":
        return {tp: spec.timestamp for tp in partitions}
    if spec.kind == "timestamps":
        return dict(spec.values)
    return {}


@dataclass(frozen=True)
class ClusterOffsets:
    """What the cluster said: earliest and latest offsets per partition, and timestamp lookups.

    ``by_timestamp[tp]`` is the first offset whose timestamp is >= the asked one, or None when
    the partition has no such record.
    """

    earliest: Mapping[TopicPartition, int]
    latest: Mapping[TopicPartition, int]
    by_timestamp: Mapping[TopicPartition, int | None] = field(default_factory=dict)


def resolve(
    spec: OffsetSpec, partitions: Iterable[TopicPartition], cluster: ClusterOffsets, which: str, strategy: str = "error"
) -> OffsetMap:
    """Concrete offsets for every partition of the query.

    JSON specs may not name partitions the query does not read; a partition they leave out starts
    at the earliest offset or ends at the latest (Spark's rule for partitions it discovers).
    ``strategy`` applies to timestamp starts; an end timestamp with no record ends at the latest.
    """
    parts = sorted(partitions)
    if spec.kind in ("earliest", "latest"):
        source = cluster.earliest if spec.kind == "earliest" else cluster.latest
        return {tp: source[tp] for tp in parts}
    _check_known(spec, parts, which)
    if spec.kind == "offsets":
        return {tp: _concrete(spec.values.get(tp, _missing_default(which)), tp, cluster) for tp in parts}
    return {
        tp: _by_timestamp(tp, cluster, which, strategy)
        if spec.kind == "timestamp" or tp in spec.values
        else _concrete(_missing_default(which), tp, cluster)
        for tp in parts
    }


def _missing_default(which: str) -> int:
    return EARLIEST if which == "starting" else LATEST


def _check_known(spec: OffsetSpec, parts: list[TopicPartition], which: str) -> None:
    unknown = sorted(set(spec.values) - set(parts))
    if unknown:
        raise OffsetOptionError(
            f"{which} offsets name partitions the query does not read: {unknown} (it reads {parts})"
        )


def _concrete(value: int, tp: TopicPartition, cluster: ClusterOffsets) -> int:
    return {EARLIEST: cluster.earliest[tp], LATEST: cluster.latest[tp]}.get(value, value)


def _by_timestamp(tp: TopicPartition, cluster: ClusterOffsets, which: str, strategy: str) -> int:
    found = cluster.by_timestamp.get(tp)
    if found is not None and found >= 0:
        return found
    if which == "ending" or strategy.lower() == "latest":
        return cluster.latest[tp]
    raise OffsetOptionError(
        f"{which} timestamp: partition {tp[0]}-{tp[1]} has no record at or after the timestamp "
        f"(set startingOffsetsByTimestampStrategy=latest to start at the latest offset)"
    )


# --------------------------------------------------------------------------- ranges


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def check_progress(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> OffsetMap:
    """The start offsets to use, after checking them against what the cluster still holds.

    A start below the log start (deleted by retention) or a partition that is gone is data loss:
    raise :class:`DataLossError` when ``fail_on_data_loss``, else read what is left.
    """
    adjusted: OffsetMap = {}
    for tp, offset in start.items():
        if tp not in end:
            _lost(fail_on_data_loss, f"partition {tp[0]}-{tp[1]} no longer exists")
            continue
        low = earliest.get(tp, offset)
        if offset < low:
            _lost(fail_on_data_loss, f"{tp[0]}-{tp[1]}: offsets {offset}..{low - 1} were deleted")
            offset = low
        adjusted[tp] = offset
    return adjusted


def _lost(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(message + " (set failOnDataLoss=false to skip lost data)")


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    new_partition_start: Mapping[TopicPartition, int] | None = None,
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges from ``start`` to ``end``; partitions only in ``end`` begin at
    ``new_partition_start`` (their earliest offset). An end before its start is an error."""
    fresh = new_partition_start or {}
    ranges = []
    for tp in sorted(end):
        begin = start[tp] if tp in start else fresh.get(tp, 0)
        if end[tp] < begin:
            raise DataLossError(f"{tp[0]}-{tp[1]}: end offset {end[tp]} is before start offset {begin}")
        if end[tp] > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, end[tp]))
    return split_ranges(ranges, min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split large ranges so there are at least ``min_partitions`` of them (as Spark's
    KafkaOffsetRangeCalculator: each range gets parts in proportion to its size, rounded)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, math.floor(r.size * min_partitions / total + 0.5)) if total else 1
        out.extend(_split(r, min(parts, r.size)))
    return out


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_offsets: int | None,
    new_partition_start: Mapping[TopicPartition, int] | None = None,
) -> OffsetMap:
    """End offsets for one micro-batch reading at most ``max_offsets`` offsets in total.

    Each partition gets ``max_offsets * backlog / total backlog``, rounded down, but at least one
    when it has any backlog (small partitions are never starved); never past ``latest``.
    """
    if max_offsets is None:
        return dict(latest)
    fresh = new_partition_start or {}
    begins = {tp: start.get(tp, fresh.get(tp, 0)) for tp in latest}
    backlog = {tp: max(0, latest[tp] - begins[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    out: OffsetMap = {}
    for tp, end in latest.items():
        share = max_offsets * backlog[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begins[tp] + step)
    return out
