"""Pure parts of the console: batch accounting, assignment decoding, history series, the chart,
and the console's config checks."""

from __future__ import annotations

import struct

import pytest

from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.console.chart import svg_chart
from strom.broker.console.history import History
from strom.broker.console.views import decode_assignment
from strom.broker.stats import BrokerStats, batch_counts
from strom.protocol.records.batch import Record, build_batch


def test_batch_counts_reads_record_counts_and_producer_id_from_v2_headers():
    one = build_batch([Record(i, 0, b"k", b"v") for i in range(3)], base_timestamp=0, producer_id=42)
    two = build_batch([Record(0, 0, None, b"x" * 50)], base_timestamp=0)
    data = bytes(one) + bytes(two)
    assert batch_counts(data) == (len(data), 4, 42)
    assert batch_counts(b"") == (0, 0, -1)
    assert batch_counts(b"\x00" * 10) == (10, 0, -1)  # garbage never raises


def _assignment(topics: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for name, parts in topics.items():
        out += struct.pack(">h", len(name)) + name.encode() + struct.pack(">i", len(parts))
        out += struct.pack(f">{len(parts)}i", *parts)
    return out + struct.pack(">i", -1)


def test_decode_assignment():
    assert decode_assignment(_assignment({"a": [0, 2], "bb": [1]})) == {"a": [0, 2], "bb": [1]}
    assert decode_assignment(b"") == {}
    assert decode_assignment(_assignment({"a": [0, 2]})[:-8]) == {}  # cut short: nothing half-read


class _Log:
    def __init__(self, end):
        self.log_end_offset = end


class _Partition:
    def __init__(self, topic, end):
        self.topic, self.log, self.is_leader, self.high_watermark = topic, _Log(end), True, end


class _Source:
    def __init__(self):
        self.stats = BrokerStats()
        self.parts = [_Partition("t", 0)]

    def local_partitions(self):
        return self.parts

    def groups(self):
        return []


def test_history_keeps_a_bounded_window_and_computes_rates():
    source = _Source()
    history = History(source, interval_s=1.0, retention_s=10.0)
    for second in range(200):
        source.parts[0].log.log_end_offset = second * 5
        source.stats.topic("t").messages_in = second * 5
        history.sample(now=1000.0 + second)
    data = history.topic("t")
    assert len(data["times"]) == len(data["log_end_offset"]) == history.capacity == 11
    assert data["times"][-1] == 1199.0 and data["log_end_offset"][-1] == 995
    assert data["log_end_offset"][0] == 5 * (199 - 10)
    assert len(history.topic_series["t"].columns[0]) <= history.capacity + 65
    assert history.rates()["messages_in"] == pytest.approx(5.0)
    assert history.topic_rates("t")["messages_in"] == pytest.approx(5.0)
    source.parts = []
    history.sample(now=1200.0)
    assert history.topic("t") == {"topic": "t", "times": [], "log_end_offset": []}


def test_chart_draws_a_point_per_sample():
    svg = svg_chart([1.0, 2.0, 3.0], [("end", [1, 5, 9], "#000"), ("lag", [0, 1, 2], "#f00")])
    assert svg.count('class="point"') == 6 and svg.count("<polyline") == 2
    assert "No samples" in svg_chart([], [("end", [], "#000")])


def test_console_config():
    config = BrokerConfig({"console.listeners": "http://127.0.0.1:0"})
    assert config.console_listeners == [("127.0.0.1", 0)]
    assert BrokerConfig({}).console_listeners == []
    with pytest.raises(ConfigError, match="not a loopback address"):
        BrokerConfig({"console.listeners": "http://0.0.0.0:8080"})
    assert BrokerConfig({"console.listeners": "http://0.0.0.0:8080", "console.auth.token": "x"}).console_listeners
    with pytest.raises(ConfigError, match="expected http://host:port"):
        BrokerConfig({"console.listeners": "https://127.0.0.1:1"})
    with pytest.raises(ConfigError, match="go together"):
        BrokerConfig({"console.auth.username": "a"})


def test_describe_configs_never_sends_the_console_secrets():
    from types import SimpleNamespace

    from strom.broker.apis.describe_configs import broker_entries

    broker = SimpleNamespace(
        config=BrokerConfig({"console.auth.token": "hush", "console.auth.username": "u", "console.auth.password": "pw"})
    )
    entries = {e["name"]: e for e in broker_entries(broker, None)}
    for key in ("console.auth.token", "console.auth.password"):
        assert entries[key]["value"] is None and entries[key]["is_sensitive"] is True
    assert entries["console.auth.username"]["value"] == "u"
