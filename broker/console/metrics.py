"""/metrics: the broker's figures in Prometheus text format, named after Kafka's JMX metrics the way
the Prometheus JMX exporter names them (`kafka_server_brokertopicmetrics_bytes_in_total` for
kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec), so dashboards carry over.

Nothing is counted here: a collector reads `BrokerStats` and the broker's state when scraped,
so the request path only pays for plain integer increments. Scraping is split in two: `collect`
takes a snapshot of plain numbers on the event loop (about 10 ms for 10,000 partitions), and
`render` writes the Prometheus text format (version 0.0.4) from it, off the loop. The writer is
our own: prometheus_client's `generate_latest` took about 200 ms for 10,000 partitions' gauges;
its parser checks the output in the tests.
"""

from __future__ import annotations

import trio
import trio.lowlevel

from strom.protocol.schema import ApiKey

from ..stats import LATENCY_BUCKETS
from .source import BrokerSource
from .views import CHUNK, Views

PAUSE = object()  # yielded by the collector between chunks of partitions

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# Kafka's request names (the `request` tag of kafka.network:type=RequestMetrics).
def request_name(api_key: int) -> str:
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


METRIC_NAMES = {
    "kafka_server_brokertopicmetrics_messages_in_total": "records appended, per topic (MessagesInPerSec)",
    "kafka_server_brokertopicmetrics_bytes_in_total": (
        "record batch bytes appended by producers, per topic (BytesInPerSec)"
    ),
    "kafka_server_brokertopicmetrics_bytes_out_total": "record bytes sent to consumers, per topic (BytesOutPerSec)",
    "kafka_server_brokertopicmetrics_messages_out_total": (
        "records consumers moved past, per topic (fetch offset advances)"
    ),
    "kafka_server_brokertopicmetrics_replication_bytes_out_total": (
        "record bytes sent to follower replicas (ReplicationBytesOutPerSec)"
    ),
    "kafka_server_brokertopicmetrics_total_produce_requests_total": (
        "produce requests per topic (TotalProduceRequestsPerSec)"
    ),
    "kafka_server_brokertopicmetrics_total_fetch_requests_total": "fetch requests per topic (TotalFetchRequestsPerSec)",
    "kafka_network_requestmetrics_requests_total": "requests answered, per API (RequestsPerSec)",
    "kafka_network_requestmetrics_errors_total": "requests whose handler failed, per API",
    "kafka_network_requestmetrics_total_time_seconds": "request latency histogram, per API (TotalTimeMs)",
    "kafka_server_delayedoperationpurgatory_purgatory_size": (
        "Produce (acks=all) and Fetch (long poll) requests waiting"
    ),
    "kafka_server_replicamanager_partition_count": "partitions hosted here",
    "kafka_server_replicamanager_leader_count": "partitions led here",
    "kafka_server_replicamanager_under_replicated_partitions": (
        "partitions led here with fewer in-sync replicas than replicas"
    ),
    "kafka_server_replicamanager_isr_shrinks_total": "ISR shrinks by this broker as leader (IsrShrinksPerSec)",
    "kafka_server_replicamanager_isr_expands_total": "ISR expansions by this broker as leader (IsrExpandsPerSec)",
    "kafka_controller_kafkacontroller_offline_partitions_count": "partitions without a live leader",
    "kafka_controller_kafkacontroller_active_controller_count": "1 on the active controller",
    "kafka_controller_controllerstats_leader_elections_total": "times this broker became a partition's leader",
    "kafka_server_socketservermetrics_connection_count": "open client connections, per listener",
    "kafka_server_socketservermetrics_connection_accept_rate": (
        "connections accepted per second, per listener (connection-accept-rate, over the quota window)"
    ),
    "kafka_server_socketservermetrics_connection_accept_throttle_time": (
        "average ms new connections waited for max.connection.creation.rate (or the listener's), of those that waited, "
        "per listener (connection-accept-throttle-time)"
    ),
    "kafka_server_socketservermetrics_ip_connection_accept_throttle_time": (
        "average ms before closing a connection over its IP's connection_creation_rate, per listener "
        "(ip-connection-accept-throttle-time)"
    ),
    "kafka_server_socketservermetrics_connection_rejected_total": (
        "connections closed unserved, per listener and reason: max.connections.per.ip (closed at once), "
        "connection_creation_rate (an IP quota), max.connections (least recently used, closed to make room); Strom's, "
        "Kafka only logs these"
    ),
    "kafka_network_acceptor_acceptorblockedpercent": (
        "fraction of the quota window a listener stopped accepting (max.connections, a listener's max.connections or a "
        "creation rate) (AcceptorBlockedPercent)"
    ),
    "kafka_server_leaderreplication_byte_rate": (
        "bytes per second sent to followers for throttled replicas, those the topics' "
        "leader.replication.throttled.replicas name (LeaderReplication byte-rate)"
    ),
    "kafka_server_followerreplication_byte_rate": (
        "bytes per second fetched from leaders for throttled replicas, those the topics' "
        "follower.replication.throttled.replicas name (FollowerReplication byte-rate)"
    ),
    "kafka_server_socketservermetrics_connection_creation_total": "connections accepted",
    "kafka_server_socketservermetrics_connection_close_total": "connections closed",
    "kafka_server_socketservermetrics_incoming_byte_total": "bytes received on client connections",
    "kafka_server_socketservermetrics_outgoing_byte_total": "bytes sent on client connections",
    "kafka_coordinator_group_groupmetadatamanager_num_groups": "consumer groups coordinated here, per state",
    "kafka_consumergroup_lag": "records between a group's committed offset and the high watermark, per partition",
    "kafka_consumergroup_lag_bytes": "bytes between a group's committed offset and the high watermark, per partition",
    "kafka_consumergroup_current_offset": "a group's committed offset, per partition",
    "kafka_server_group_coordinator_metrics_group_count": "groups coordinated here, per protocol (group-count)",
    "kafka_server_group_coordinator_metrics_share_group_count": "share groups coordinated here, per state",
    "kafka_server_brokertopicmetrics_total_share_fetch_requests_total": (
        "share fetch requests per topic (TotalShareFetchRequestsPerSec)"
    ),
    "kafka_server_brokertopicmetrics_failed_share_fetch_requests_total": (
        "share fetch requests that failed, per topic (FailedShareFetchRequestsPerSec)"
    ),
    "kafka_server_brokertopicmetrics_total_share_acknowledgement_requests_total": (
        "share acknowledgement requests per topic (TotalShareAcknowledgementRequestsPerSec)"
    ),
    "kafka_server_brokertopicmetrics_failed_share_acknowledgement_requests_total": (
        "share acknowledgement requests that failed, per topic (FailedShareAcknowledgementRequestsPerSec)"
    ),
    "kafka_server_sharegroupmetrics_record_acknowledgements_total": (
        "records acknowledged, per acknowledgement type (RecordAcknowledgementsPerSec)"
    ),
    "kafka_server_sharepartitionmetrics_acquisition_lock_timeout_total": (
        "acquisition locks that expired, per share partition (AcquisitionLockTimeoutPerSec)"
    ),
    "kafka_server_sharepartitionmetrics_in_flight_message_count": (
        "records in flight (from the share-partition start offset), per share partition (InFlightMessageCount)"
    ),
    "kafka_server_sharepartitionmetrics_start_offset": "a share partition's start offset (SPSO)",
    "kafka_server_sharepartitionmetrics_records": "in-flight records of a share partition, per state",
    "kafka_log_log_size_bytes": "bytes in a partition's segments (kafka.log:type=Log,name=Size)",
    "kafka_log_log_end_offset": "a partition's log end offset (LogEndOffset)",
    "kafka_log_log_start_offset": "a partition's log start offset (LogStartOffset)",
    "kafka_log_num_log_segments": "a partition's segment count (NumLogSegments)",
    "kafka_server_kafkaserver_uptime_seconds": "seconds since the broker started",
}

GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Empty", "Dead")


def _name(full: str) -> str:
    return full[: -len("_total")] if full.endswith("_total") else full


class _Family:
    __slots__ = ("name", "type", "help", "labels", "samples")

    def __init__(self, name: str, type_: str, help_: str, labels=()):
        self.name, self.type, self.help = name, type_, help_
        self.labels = list(labels)
        self.samples: list[tuple[str, str, float]] = []  # (name suffix, label text, value)

    def add_metric(self, values, value, *extra) -> None:
        labels = label_text(self.labels, values)
        if self.type == "histogram":
            buckets, total = value, extra[0]
            for le, count in buckets:
                self.samples.append(("_bucket", (labels + "," if labels else "") + f'le="{le}"', count))
            self.samples.append(("_count", labels, buckets[-1][1]))
            self.samples.append(("_sum", labels, total))
        else:
            self.add_raw(labels, value)

    def add_raw(self, labels: str, value) -> None:
        """A sample whose label text (`label_text`) is already built, shared by several families."""
        self.samples.append(("_total" if self.type == "counter" else "", labels, value))


def label_text(names, values) -> str:
    return ",".join(f'{k}="{_escape(str(v))}"' for k, v in zip(names, values, strict=False))


class _Collector:
    def __init__(self, source: BrokerSource):
        self.source = source
        self.views = Views(source)

    def _counter(self, name: str, labels=()):
        return _Family(_name(name), "counter", METRIC_NAMES[name], labels)

    def _gauge(self, name: str, labels=()):
        return _Family(name, "gauge", METRIC_NAMES[name], labels)

    def _connections(self, s: BrokerSource, stats):
        """Per listener: open connections, the acceptor's rates, waits and refusals; and the
        replication throttles' byte rates."""
        names = s.listener_names()
        counts = dict.fromkeys(names, 0)
        for conn in stats.connections.values():
            if conn.listener is not None:
                counts[conn.listener] = counts.get(conn.listener, 0) + 1
        count = self._gauge("kafka_server_socketservermetrics_connection_count", ["listener"])
        for name, value in counts.items():
            count.add_metric([name], value)
        yield count
        quotas = s.connection_quota_metrics()
        rate = self._gauge("kafka_server_socketservermetrics_connection_accept_rate", ["listener"])
        throttle = self._gauge("kafka_server_socketservermetrics_connection_accept_throttle_time", ["listener"])
        ip_throttle = self._gauge("kafka_server_socketservermetrics_ip_connection_accept_throttle_time", ["listener"])
        blocked = self._gauge("kafka_network_acceptor_acceptorblockedpercent", ["listener"])
        rejected = self._counter("kafka_server_socketservermetrics_connection_rejected_total", ["listener", "reason"])
        for name, m in quotas.items():
            rate.add_metric([name], m["accept_rate"])
            throttle.add_metric([name], m["accept_throttle_time_ms"])
            ip_throttle.add_metric([name], m["ip_accept_throttle_time_ms"])
            blocked.add_metric([name], m["blocked_fraction"])
            for reason, key in (
                ("max.connections.per.ip", "refused_per_ip"),
                ("connection_creation_rate", "closed_ip_rate"),
                ("max.connections", "closed_excess"),
            ):
                rejected.add_metric([name, reason], m[key])
        yield from (rate, throttle, ip_throttle, blocked, rejected)
        rates = s.replication_byte_rates()
        for name, kind in (
            ("kafka_server_leaderreplication_byte_rate", "leader"),
            ("kafka_server_followerreplication_byte_rate", "follower"),
        ):
            gauge = self._gauge(name)
            gauge.add_metric([], rates[kind])
            yield gauge

    def collect(self):
        s = self.source
        stats = s.stats
        topic_metrics = {
            "kafka_server_brokertopicmetrics_messages_in_total": "messages_in",
            "kafka_server_brokertopicmetrics_bytes_in_total": "bytes_in",
            "kafka_server_brokertopicmetrics_bytes_out_total": "bytes_out",
            "kafka_server_brokertopicmetrics_messages_out_total": "messages_out",
            "kafka_server_brokertopicmetrics_replication_bytes_out_total": "replication_bytes_out",
            "kafka_server_brokertopicmetrics_total_produce_requests_total": "produce_requests",
            "kafka_server_brokertopicmetrics_total_fetch_requests_total": "fetch_requests",
        }
        for metric, attr in topic_metrics.items():
            family = self._counter(metric, ["topic"])
            for topic, t in sorted(stats.topics.items()):
                family.add_metric([topic], getattr(t, attr))
            yield family

        requests = self._counter("kafka_network_requestmetrics_requests_total", ["request"])
        errors = self._counter("kafka_network_requestmetrics_errors_total", ["request"])
        latency = _Family(
            "kafka_network_requestmetrics_total_time_seconds",
            "histogram",
            METRIC_NAMES["kafka_network_requestmetrics_total_time_seconds"],
            ["request"],
        )
        for key, api in sorted(stats.apis.items()):
            name = request_name(key)
            requests.add_metric([name], api.requests)
            errors.add_metric([name], api.errors)
            cumulative, buckets = 0, []
            for bound, count in zip(LATENCY_BUCKETS, api.buckets, strict=False):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", cumulative + api.buckets[-1]))
            latency.add_metric([name], buckets, api.latency_sum)
        yield requests
        yield errors
        yield latency

        purgatory = self._gauge("kafka_server_delayedoperationpurgatory_purgatory_size", ["delayed_operation"])
        for key, operation in ((0, "Produce"), (1, "Fetch")):
            api = stats.apis.get(key)
            purgatory.add_metric([operation], api.in_flight if api is not None else 0)
        yield purgatory

        local = s.local_partitions()
        led = [p for p in local if p.is_leader]
        for name, value in (
            ("kafka_server_replicamanager_partition_count", len(local)),
            ("kafka_server_replicamanager_leader_count", len(led)),
            ("kafka_server_replicamanager_under_replicated_partitions", sum(len(p.isr) < len(p.replicas) for p in led)),
            ("kafka_controller_kafkacontroller_active_controller_count", int(s.controller_id() == s.node_id)),
            ("kafka_server_kafkaserver_uptime_seconds", round(s.uptime_s(), 3)),
        ):
            gauge = self._gauge(name)
            gauge.add_metric([], value)
            yield gauge
        yield from self._connections(s, stats)
        offline = self._gauge("kafka_controller_kafkacontroller_offline_partitions_count")
        # as Kafka: reported by the active controller, 0 on the others
        offline.add_metric([], s.offline_partition_count() if s.controller_id() == s.node_id else 0)
        yield offline
        for name, value in (
            ("kafka_server_replicamanager_isr_shrinks_total", stats.isr_shrinks),
            ("kafka_server_replicamanager_isr_expands_total", stats.isr_expands),
            ("kafka_controller_controllerstats_leader_elections_total", stats.leader_elections),
            ("kafka_server_socketservermetrics_connection_creation_total", stats.connections_opened),
            ("kafka_server_socketservermetrics_connection_close_total", stats.connections_closed),
            ("kafka_server_socketservermetrics_incoming_byte_total", stats.bytes_in),
            ("kafka_server_socketservermetrics_outgoing_byte_total", stats.bytes_out),
        ):
            counter = self._counter(name)
            counter.add_metric([], value)
            yield counter

        groups = s.groups()
        states = self._gauge("kafka_coordinator_group_groupmetadatamanager_num_groups", ["state"])
        counts: dict[str, int] = {state: 0 for state in GROUP_STATES}
        for group_id in self.views._group_ids():
            state = s.group_state(group_id)[0]
            counts[state] = counts.get(state, 0) + 1
        for state, count in counts.items():
            states.add_metric([state], count)
        yield states
        lag = self._gauge("kafka_consumergroup_lag", ["group", "topic", "partition"])
        lag_bytes = self._gauge("kafka_consumergroup_lag_bytes", ["group", "topic", "partition"])
        current = self._gauge("kafka_consumergroup_current_offset", ["group", "topic", "partition"])
        for group in sorted(groups, key=lambda g: g.group_id):
            yield PAUSE
            for entry in self.views._offsets(group):
                labels = label_text(
                    ("group", "topic", "partition"), (group.group_id, entry["topic"], entry["partition"])
                )
                current.add_raw(labels, entry["committed_offset"])
                if entry["log_end_offset"] is not None:
                    lag.add_raw(labels, entry["lag"])
                    lag_bytes.add_raw(labels, entry["lag_bytes"])
        yield lag
        yield lag_bytes
        yield current

        yield from self._share(s)

        size = self._gauge("kafka_log_log_size_bytes", ["topic", "partition"])
        end = self._gauge("kafka_log_log_end_offset", ["topic", "partition"])
        start = self._gauge("kafka_log_log_start_offset", ["topic", "partition"])
        segments = self._gauge("kafka_log_num_log_segments", ["topic", "partition"])
        escaped: dict[str, str] = {}
        for n, p in enumerate(sorted(local, key=lambda p: (p.topic, p.index))):
            if n % CHUNK == CHUNK - 1:
                yield PAUSE
            topic = escaped.get(p.topic)
            if topic is None:
                topic = escaped[p.topic] = _escape(p.topic)
            labels = f'topic="{topic}",partition="{p.index}"'
            plog = p.log
            plog_segments = plog.segments
            size.add_raw(labels, sum(seg.size for seg in plog_segments))
            end.add_raw(labels, plog.log_end_offset)
            start.add_raw(labels, plog.log_start_offset)
            segments.add_raw(labels, len(plog_segments))
        yield size
        yield end
        yield start
        yield segments

    def _share(self, s: BrokerSource):
        """Share groups (KIP-932): counts, requests, acknowledgements and each share partition."""
        share_groups = s.share_groups()
        count = self._gauge("kafka_server_group_coordinator_metrics_group_count", ["protocol"])
        count.add_metric(["share"], len(share_groups))
        yield count
        states = self._gauge("kafka_server_group_coordinator_metrics_share_group_count", ["state"])
        by_state = {"Empty": 0, "Stable": 0, "Dead": 0}
        for group in share_groups:
            by_state[group.state] = by_state.get(group.state, 0) + 1
        for state, n in by_state.items():
            states.add_metric([state], n)
        yield states
        metrics = s.share_metrics()
        if metrics is not None:
            for name, counts in (
                ("kafka_server_brokertopicmetrics_total_share_fetch_requests_total", metrics.fetch_requests),
                ("kafka_server_brokertopicmetrics_failed_share_fetch_requests_total", metrics.failed_fetch_requests),
                (
                    "kafka_server_brokertopicmetrics_total_share_acknowledgement_requests_total",
                    metrics.acknowledgement_requests,
                ),
                (
                    "kafka_server_brokertopicmetrics_failed_share_acknowledgement_requests_total",
                    metrics.failed_acknowledgement_requests,
                ),
            ):
                family = self._counter(name, ["topic"])
                for topic, n in sorted(counts.items()):
                    family.add_metric([topic], n)
                yield family
            acks = self._counter("kafka_server_sharegroupmetrics_record_acknowledgements_total", ["ack_type"])
            for kind in ("Accept", "Release", "Reject", "Renew"):
                acks.add_metric([kind], metrics.record_acknowledgements[kind])
            yield acks
        labels = ("group", "topic", "partition")
        timeouts = self._counter("kafka_server_sharepartitionmetrics_acquisition_lock_timeout_total", labels)
        in_flight = self._gauge("kafka_server_sharepartitionmetrics_in_flight_message_count", labels)
        start = self._gauge("kafka_server_sharepartitionmetrics_start_offset", labels)
        records = self._gauge("kafka_server_sharepartitionmetrics_records", [*labels, "state"])
        for group, topic, index, sp in s.share_partitions():
            key = (group, topic, index)
            timeouts.add_metric(key, metrics.lock_timeouts[key] if metrics is not None else 0)
            in_flight.add_metric(key, sp.in_flight())
            start.add_metric(key, sp.start_offset)
            for state, n in sp.counts().items():
                records.add_metric([*key, state], n)
        yield timeouts
        yield in_flight
        yield start
        yield records


async def collect(source: BrokerSource) -> list[_Family]:
    """A snapshot of every metric as plain numbers (on the event loop: it reads live state),
    giving the loop back between chunks of partitions."""
    families = []
    for item in _Collector(source).collect():
        if item is PAUSE:
            await trio.lowlevel.checkpoint()
        else:
            families.append(item)
    return families


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value) -> str:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: list[_Family]) -> bytes:
    """The Prometheus text exposition format, version 0.0.4 (pure: safe off the event loop)."""
    out: list[str] = []
    for f in families:
        name = f.name + "_total" if f.type == "counter" else f.name
        out.append(f"# HELP {name} {f.help}\n# TYPE {name} {f.type}\n")
        for suffix, labels, value in f.samples:
            if labels:
                out.append(f"{f.name}{suffix}{{{labels}}} {_number(value)}\n")
            else:
                out.append(f"{f.name}{suffix} {_number(value)}\n")
    return "".join(out).encode()
