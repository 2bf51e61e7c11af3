"""Offsets and rates over time, kept in memory for the console's graphs.

Every `console.history.interval.ms` (5 s) the sampler records, from memory only: each topic's log
end (sum over the partitions hosted here), and per consumer group and partition the high watermark
and committed offset; and it turns the broker's byte/record counters into per-second rates.
Samples older than `console.history.retention.ms` (an hour) are dropped. Values are stored in
`array('q')` per series (8 bytes a sample), so 1,000 topics for an hour at 5 s is about 6 MB.
"""

from __future__ import annotations

import time
from array import array
from collections import deque

import trio

from .source import BrokerSource


class Series:
    __slots__ = ("first", "columns")

    def __init__(self, first: int, width: int):
        self.first = first  # sample number of columns[*][0]
        self.columns = [array("q") for _ in range(width)]

    def append(self, values) -> None:
        for column, value in zip(self.columns, values, strict=False):
            column.append(value)

    def trim(self, oldest: int) -> None:
        drop = oldest - self.first
        if drop > 0:
            for column in self.columns:
                del column[:drop]
            self.first = oldest


class History:
    def __init__(self, source: BrokerSource, interval_s: float, retention_s: float):
        self.source = source
        self.interval_s = interval_s
        self.capacity = max(2, int(retention_s / interval_s) + 1)
        self.times: deque[float] = deque(maxlen=self.capacity)
        self.samples = 0  # number of the next sample
        self.topic_series: dict[str, Series] = {}
        self.group_series: dict[tuple[str, str, int], Series] = {}
        self._last_counters: tuple[float, dict] | None = None
        self._rates: dict[str, float] = {}
        self._topic_rates: dict[str, dict[str, float]] = {}

    async def run(self) -> None:
        from .views import gc_paused

        while True:
            with gc_paused():
                self.sample()
            await trio.sleep(self.interval_s)

    # ------------------------------------------------------------------ sampling
    def _counters(self) -> dict:
        stats = self.source.stats
        topics = {name: (t.bytes_in, t.bytes_out, t.messages_in, t.messages_out) for name, t in stats.topics.items()}
        return {"bytes_in": stats.bytes_in, "bytes_out": stats.bytes_out, "topics": topics}

    def sample(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        counters = self._counters()
        if self._last_counters is not None:
            then, before = self._last_counters
            elapsed = max(now - then, 1e-3)
            topic_rates, totals = {}, [0, 0, 0, 0]
            for name, values in counters["topics"].items():
                old = before["topics"].get(name, (0, 0, 0, 0))
                deltas = [max(0, v - o) for v, o in zip(values, old, strict=False)]
                for i, d in enumerate(deltas):
                    totals[i] += d
                topic_rates[name] = {
                    "bytes_in": deltas[0] / elapsed,
                    "bytes_out": deltas[1] / elapsed,
                    "messages_in": deltas[2] / elapsed,
                    "messages_out": deltas[3] / elapsed,
                }
            self._topic_rates = topic_rates
            self._rates = {
                "bytes_in": totals[0] / elapsed,
                "bytes_out": totals[1] / elapsed,
                "messages_in": totals[2] / elapsed,
                "messages_out": totals[3] / elapsed,
                "network_bytes_in": max(0, counters["bytes_in"] - before["bytes_in"]) / elapsed,
                "network_bytes_out": max(0, counters["bytes_out"] - before["bytes_out"]) / elapsed,
            }
        self._last_counters = (now, counters)

        number = self.samples
        self.samples += 1
        self.times.append(now)
        oldest = self.samples - len(self.times)

        ends: dict[str, int] = {}
        for partition in self.source.local_partitions():
            ends[partition.topic] = ends.get(partition.topic, 0) + partition.log.log_end_offset
        self._record(self.topic_series, ends.items(), number, oldest, 1)

        rows = []
        for group in self.source.groups():
            for (topic, index), committed in group.offsets.items():
                partition = self.source.local_partition(topic, index)
                if partition is not None and partition.is_leader:
                    rows.append(((group.group_id, topic, index), (partition.high_watermark, committed.offset)))
        self._record(self.group_series, rows, number, oldest, 2)

    def _record(self, table: dict, rows, number: int, oldest: int, width: int) -> None:
        seen = set()
        for key, values in rows:
            seen.add(key)
            series = table.get(key)
            if series is None or series.first + len(series.columns[0]) != number:
                series = table[key] = Series(number, width)  # new, or it had a gap: start again
            series.append(values if width > 1 else (values,))
            if oldest - series.first > 64:  # trimmed in steps, not on every sample
                series.trim(oldest)
        for key in [k for k in table if k not in seen]:
            del table[key]

    # ------------------------------------------------------------------ reading
    def rates(self) -> dict[str, float]:
        return dict(self._rates)

    def topic_rates(self, name: str) -> dict[str, float]:
        return self._topic_rates.get(name, {})

    def _times(self, series: Series) -> list[float]:
        offset = series.first - (self.samples - len(self.times))
        times = list(self.times)
        return times[max(0, offset) : max(0, offset) + len(series.columns[0])]

    def topic(self, name: str) -> dict:
        series = self.topic_series.get(name)
        if series is None:
            return {"topic": name, "times": [], "log_end_offset": []}
        times = self._times(series)
        return {"topic": name, "times": times, "log_end_offset": list(series.columns[0])[-len(times) :]}

    def group(self, group_id: str) -> dict:
        partitions = []
        for (gid, topic, index), series in sorted(self.group_series.items()):
            if gid != group_id:
                continue
            times = self._times(series)
            n = len(times)
            ends, committed = list(series.columns[0])[-n:], list(series.columns[1])[-n:]
            partitions.append(
                {
                    "topic": topic,
                    "partition": index,
                    "times": times,
                    "log_end_offset": ends,
                    "committed_offset": committed,
                    "lag": [max(0, e - c) for e, c in zip(ends, committed, strict=False)],
                }
            )
        return {"group_id": group_id, "partitions": partitions}
