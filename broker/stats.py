"""Light accounting of what the broker does, for the console and /metrics.

Kept deliberately cheap: the connection handler calls `BrokerStats.request` once per request and
`ConnectionStats` fields are plain attribute increments. Nothing here does I/O or allocates per
record; per-topic figures come from batch headers (a few `struct.unpack_from` per batch) and from
the fetch offsets clients ask for (a consumer that fetches from X and next from Y received Y - X
records). Readers (the console, /metrics) take snapshots when asked.
"""

from __future__ import annotations

import bisect
import itertools
import struct
import time

# Request latency histogram bounds in seconds (Prometheus-style cumulative buckets are built from
# these per-bucket counts when scraped).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

PRODUCE, FETCH, API_VERSIONS = 0, 1, 18
# Keys whose use means a client is part of a consumer group or commits offsets.
COORDINATION_KEYS = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47, 68, 69})
JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT = 11, 14, 12, 8
MAX_TRACKED = 16

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def batch_counts(records) -> tuple[int, int, int]:
    """(bytes, records, producer id or -1) of a produce partition's record batches, from the v2
    headers only; older message formats count bytes and one record per entry header."""
    if not records:
        return 0, 0, -1
    size = len(records)
    pos, count, producer_id = 0, 0, -1
    try:
        while pos + 61 <= size:
            length = _I32.unpack_from(records, pos + 8)[0]
            if length <= 0:
                break
            if records[pos + 16] >= 2:
                count += _I32.unpack_from(records, pos + 23)[0] + 1
                pid = _I64.unpack_from(records, pos + 43)[0]
                if pid >= 0:
                    producer_id = pid
            else:
                count += 1
            pos += 12 + length
    except (struct.error, IndexError):
        pass
    return size, count, producer_id


class ConnectionStats:
    """One open connection as the console shows it."""

    __slots__ = (
        "id",
        "host",
        "port",
        "listener",
        "opened",
        "last_active",
        "client_id",
        "software_name",
        "software_version",
        "bytes_in",
        "bytes_out",
        "requests",
        "produces",
        "fetches",
        "replica_id",
        "coordinates",
        "producer_ids",
        "groups",
        "fetch_positions",
    )

    def __init__(self, conn_id: int, host: str, port: int, listener: str | None = None):
        self.id = conn_id
        self.host, self.port = host, port
        self.listener = listener
        self.opened = time.time()
        self.last_active = time.monotonic()
        self.client_id: str | None = None
        self.software_name: str | None = None
        self.software_version: str | None = None
        self.bytes_in = self.bytes_out = self.requests = 0
        self.produces = self.fetches = self.coordinates = 0
        self.replica_id = -1
        self.producer_ids: set[int] = set()
        self.groups: set[str] = set()
        self.fetch_positions: dict[tuple[str, int], int] = {}


class ApiStats:
    __slots__ = ("requests", "errors", "buckets", "latency_sum", "in_flight")

    def __init__(self):
        self.requests = self.errors = self.in_flight = 0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0


class TopicStats:
    __slots__ = (
        "bytes_in",
        "messages_in",
        "bytes_out",
        "messages_out",
        "replication_bytes_out",
        "produce_requests",
        "fetch_requests",
    )

    def __init__(self):
        self.bytes_in = self.messages_in = self.bytes_out = self.messages_out = 0
        self.replication_bytes_out = self.produce_requests = self.fetch_requests = 0


class BrokerStats:
    def __init__(self):
        self.started = time.time()
        self.connections: dict[int, ConnectionStats] = {}
        self.connections_opened = 0
        self.connections_closed = 0
        self._ids = itertools.count(1)
        self.apis: dict[int, ApiStats] = {}
        self.topics: dict[str, TopicStats] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leader_elections = 0
        self.bytes_in = 0
        self.bytes_out = 0

    # ------------------------------------------------------------------ connections
    def open_connection(self, peer: str, listener: str | None = None) -> ConnectionStats:
        host, _, port = peer.rpartition(":")
        conn = ConnectionStats(next(self._ids), host or peer, int(port) if port.isdigit() else 0, listener)
        self.connections[conn.id] = conn
        self.connections_opened += 1
        return conn

    def close_connection(self, conn: ConnectionStats) -> None:
        if self.connections.pop(conn.id, None) is not None:
            self.connections_closed += 1

    def received(self, conn: ConnectionStats | None, size: int) -> None:
        self.bytes_in += size
        if conn is not None:
            conn.bytes_in += size
            conn.last_active = time.monotonic()

    def sent(self, conn: ConnectionStats | None, parts) -> None:
        size = 0
        for part in parts:
            size += len(part) if isinstance(part, (bytes, bytearray, memoryview)) else part.size
        self.bytes_out += size
        if conn is not None:
            conn.bytes_out += size

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def forget_topic(self, name: str) -> None:
        self.topics.pop(name, None)

    # ------------------------------------------------------------------ requests
    def begin(self, api_key: int) -> ApiStats:
        api = self.apis.get(api_key)
        if api is None:
            api = self.apis[api_key] = ApiStats()
        api.in_flight += 1
        return api

    def end(
        self, api: ApiStats, conn: ConnectionStats | None, request, body, elapsed: float, failed: bool, topic_names=None
    ) -> None:
        """One request answered (or failed): latency, per-API and per-connection figures."""
        api.in_flight -= 1
        api.requests += 1
        api.latency_sum += elapsed
        api.buckets[bisect.bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        if failed:
            api.errors += 1
        header = request.header
        key = header.api_key
        if conn is not None:
            conn.requests += 1
            conn.last_active = time.monotonic()
            if header.client_id is not None:
                conn.client_id = header.client_id
        if failed:
            return  # the connection closes; nothing it sent counts as appended or fetched
        try:
            if key == PRODUCE:
                self._produced(conn, request.body, body)
            elif key == FETCH:
                self._fetched(conn, request, body, topic_names)
            elif conn is not None:
                if key == API_VERSIONS and header.api_version >= 3:
                    conn.software_name = request.body.client_software_name
                    conn.software_version = request.body.client_software_version
                elif key in COORDINATION_KEYS:
                    conn.coordinates += 1
                    group = getattr(request.body, "group_id", None)
                    if group and len(conn.groups) < MAX_TRACKED:
                        conn.groups.add(group)
        except (AttributeError, TypeError, KeyError, IndexError):
            pass  # accounting never fails a request

    def _produced(self, conn, request_body, response) -> None:
        if conn is not None:
            conn.produces += 1
        responses = response["responses"] if response is not None else None
        for t, topic in enumerate(request_body.topic_data):
            stats = self.topic(topic.name)
            stats.produce_requests += 1
            parts = responses[t]["partition_responses"] if responses is not None else None
            for i, partition in enumerate(topic.partition_data):
                if parts is not None and parts[i]["error_code"] != 0:
                    continue
                size, count, producer_id = batch_counts(partition.records)
                stats.bytes_in += size
                stats.messages_in += count
                if producer_id >= 0 and conn is not None and len(conn.producer_ids) < MAX_TRACKED:
                    conn.producer_ids.add(producer_id)

    def _fetched(self, conn, request, response, topic_names) -> None:
        body = request.body
        version = request.header.api_version
        replica = body.replica_state.replica_id if version >= 15 else body.replica_id
        if conn is not None:
            conn.fetches += 1
            conn.replica_id = replica
        if response is None:
            return
        for topic in response["responses"]:
            name = topic["topic"]
            if not name:
                continue
            stats = self.topic(name)
            stats.fetch_requests += 1
            size = 0
            for partition in topic["partitions"]:
                records = partition.get("records")
                if records:
                    size += len(records) if isinstance(records, (bytes, bytearray, memoryview)) else records.size
            if replica >= 0:
                stats.replication_bytes_out += size
            else:
                stats.bytes_out += size
        if replica >= 0 or conn is None:
            return
        positions = conn.fetch_positions
        for topic in body.topics:
            name = topic.topic if version < 13 else (topic_names(topic.topic_id) if topic_names else None)
            if not name:
                continue
            stats = None
            for partition in topic.partitions:
                key = (name, partition.partition)
                previous = positions.get(key)
                positions[key] = partition.fetch_offset
                if previous is not None and partition.fetch_offset > previous:
                    if stats is None:
                        stats = self.topic(name)
                    stats.messages_out += partition.fetch_offset - previous
