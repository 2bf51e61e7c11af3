"""Broker configuration: Kafka's `server.properties` key names, types and defaults.

One table (`BROKER_CONFIGS`) says every key Strom understands; parsing, validation, the README's
configuration section and DescribeConfigs for the broker resource all read it. Topic-level keys
(`TOPIC_CONFIGS`) map to the broker default they inherit, as in Kafka.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("strom.config")


class ConfigError(ValueError):
    """A configuration value a broker cannot start with; the message names the key."""


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _parse_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


PARSERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "long": int,
    "bool": _parse_bool,
    "string": str,
    "list": _parse_list,
    "double": float,
    "password": str,
}


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str
    default: Any
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: str) -> Any:
        try:
            value = PARSERS[self.type](raw)
        except ValueError as exc:
            raise ConfigError(f"{self.name}={raw!r}: {exc} ({self.type} expected)") from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}={raw!r}: must be at least {self.minimum}")
        if self.choices is not None:
            values = value if isinstance(value, list) else [value]
            bad = [v for v in values if v not in self.choices]
            if bad:
                raise ConfigError(f"{self.name}={raw!r}: must be one of {', '.join(self.choices)}")
        return value


_D = ConfigDef
_WEEK_MS = 7 * 24 * 3600 * 1000
BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _D("node.id", "int", 0, "This broker's id (Kafka's broker.id).", minimum=0),
        _D("broker.id", "int", None, "Alias of node.id.", minimum=0),
        _D(
            "listeners",
            "list",
            ["PLAINTEXT://127.0.0.1:9092"],
            "Addresses to listen on: NAME://host:port, comma separated (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL "
            "or a name in listener.security.protocol.map); port 0 lets the OS choose.",
        ),
        _D("advertised.listeners", "list", None, "Addresses given to clients, per listener name; default: listeners."),
        _D(
            "listener.security.protocol.map",
            "list",
            ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
            "Listener name to security protocol, NAME:PROTOCOL comma separated.",
        ),
        _D(
            "inter.broker.listener.name",
            "string",
            None,
            "Listener other brokers replicate through; default: the one of security.inter.broker.protocol.",
        ),
        _D(
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            "Security protocol between brokers.",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        ),
        _D(
            "ssl.keystore.type",
            "string",
            "JKS",
            "PEM or PKCS12 (JKS is not readable here: convert it with keytool).",
            choices=("JKS", "PEM", "PKCS12"),
        ),
        _D("ssl.keystore.location", "string", None, "Key store file: the broker's certificate chain and private key."),
        _D("ssl.keystore.password", "string", None, "Password of the PKCS12 key store."),
        _D("ssl.keystore.certificate.chain", "string", None, "Inline PEM certificate chain (ssl.keystore.type=PEM)."),
        _D("ssl.keystore.key", "string", None, "Inline PEM private key (ssl.keystore.type=PEM)."),
        _D("ssl.key.password", "string", None, "Password of the private key."),
        _D("ssl.truststore.type", "string", "JKS", "PEM or PKCS12.", choices=("JKS", "PEM", "PKCS12")),
        _D(
            "ssl.truststore.location",
            "string",
            None,
            "Trust store file: CA certificates client certificates are checked against.",
        ),
        _D("ssl.truststore.password", "string", None, "Password of the PKCS12 trust store."),
        _D("ssl.truststore.certificates", "string", None, "Inline PEM trusted certificates (ssl.truststore.type=PEM)."),
        _D(
            "ssl.client.auth",
            "string",
            "none",
            "Client certificates: none, requested or required.",
            choices=("none", "requested", "required"),
        ),
        _D(
            "ssl.principal.mapping.rules",
            "string",
            "DEFAULT",
            "Rules turning a client certificate's distinguished name into a principal name, as Kafka's.",
        ),
        _D(
            "ssl.enabled.protocols",
            "list",
            ["TLSv1.2", "TLSv1.3"],
            "TLS versions accepted.",
            choices=("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"),
        ),
        _D("ssl.cipher.suites", "list", [], "TLS 1.2 cipher suites (OpenSSL or IANA names); empty: the defaults."),
        _D("ssl.protocol", "string", "TLSv1.3", "Accepted for compatibility; ssl.enabled.protocols decides."),
        _D(
            "ssl.endpoint.identification.algorithm",
            "string",
            "https",
            "Host name check of the certificate when this broker connects to others (https or empty).",
        ),
        _D(
            "sasl.enabled.mechanisms",
            "list",
            ["GSSAPI"],
            "SASL mechanisms offered: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (GSSAPI is not supported).",
        ),
        _D("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", "SASL mechanism between brokers."),
        _D(
            "connection.failed.authentication.delay.ms",
            "int",
            100,
            "How long a failed authentication waits before its answer and the close.",
            minimum=0,
        ),
        _D(
            "connections.max.reauth.ms",
            "long",
            0,
            "Authenticated SASL sessions must re-authenticate within this (KIP-368); 0: never.",
            minimum=0,
        ),
        _D(
            "authorizer.class.name",
            "string",
            "",
            "ACL authorizer: kafka.security.authorizer.AclAuthorizer or "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer; empty: none.",
        ),
        _D("super.users", "string", "", "Principals allowed everything, separated by ';' (User:admin;User:broker)."),
        _D(
            "allow.everyone.if.no.acl.found",
            "bool",
            False,
            "With an authorizer: allow access to resources that have no ACL.",
        ),
        _D("log.dirs", "list", ["./strom-data"], "Directories holding the partition logs."),
        _D("log.dir", "string", None, "Single-directory alias of log.dirs."),
        _D("num.partitions", "int", 1, "Partitions of an auto-created topic.", minimum=1),
        _D("default.replication.factor", "int", 1, "Replication factor of auto-created topics.", minimum=1),
        _D(
            "auto.create.topics.enable",
            "bool",
            True,
            "Create unknown topics a Metadata request names (as Kafka 4, Produce does not).",
        ),
        _D("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
        _D("log.segment.bytes", "int", 1 << 30, "Segment size before a roll.", minimum=14),
        _D("log.roll.ms", "long", None, "Segment age before a roll; default log.roll.hours.", minimum=1),
        _D("log.roll.hours", "int", 168, "Segment age before a roll, in hours.", minimum=1),
        _D("log.retention.ms", "long", None, "Retention by time; -1 keeps forever."),
        _D("log.retention.minutes", "int", None, "Retention by time, in minutes."),
        _D("log.retention.hours", "int", 168, "Retention by time, in hours."),
        _D("log.retention.bytes", "long", -1, "Retention by size per partition; -1 unlimited."),
        _D("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", minimum=1),
        _D("log.index.interval.bytes", "int", 4096, "Bytes between offset index entries.", minimum=0),
        _D("log.index.size.max.bytes", "int", 10 * 1024 * 1024, "Maximum index file size.", minimum=8),
        _D("log.cleanup.policy", "list", ["delete"], "delete or compact.", choices=("delete", "compact")),
        _D("log.cleaner.backoff.ms", "long", 15000, "How often compacted topics are checked for cleaning.", minimum=1),
        _D(
            "log.cleaner.delete.retention.ms",
            "long",
            86400000,
            "How long tombstones stay in a compacted topic after cleaning.",
            minimum=0,
        ),
        _D("log.cleaner.min.cleanable.ratio", "double", 0.5, "Dirty share of a compacted log that triggers cleaning."),
        _D("log.cleaner.min.compaction.lag.ms", "long", 0, "Records younger than this are not compacted.", minimum=0),
        _D(
            "log.cleaner.max.compaction.lag.ms",
            "long",
            (1 << 63) - 1,
            "Records older than this are compacted whatever the dirty ratio.",
            minimum=1,
        ),
        _D(
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            "CreateTime or LogAppendTime.",
            choices=("CreateTime", "LogAppendTime"),
        ),
        _D(
            "log.message.timestamp.before.max.ms",
            "long",
            (1 << 63) - 1,
            "CreateTime topics: a produced record's timestamp may be at most this far in the past "
            "(else INVALID_TIMESTAMP).",
            minimum=0,
        ),
        _D(
            "log.message.timestamp.after.max.ms",
            "long",
            3600000,
            "CreateTime topics: a produced record's timestamp may be at most this far in the future "
            "(else INVALID_TIMESTAMP; Kafka 4.0's default, one hour).",
            minimum=0,
        ),
        _D(
            "log.flush.scheduler.interval.ms",
            "long",
            1000,
            "How often dirty logs are fsynced in the background (Kafka's default never forces one).",
            minimum=1,
        ),
        _D(
            "log.flush.offset.checkpoint.interval.ms",
            "int",
            60000,
            "How often recovery points are checkpointed.",
            minimum=1,
        ),
        _D(
            "log.open.files.max",
            "int",
            0,
            "Strom only: segment and index files kept open at once (an LRU cache; others are opened "
            "when used). 0: half the open-files limit, at most 10000.",
            minimum=0,
        ),
        _D("message.max.bytes", "int", 1048588, "Largest record batch accepted.", minimum=0),
        _D("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", minimum=1),
        _D("connections.max.idle.ms", "long", 600000, "Idle connections are closed after this."),
        _D("min.insync.replicas", "int", 1, "Replicas that must have a record for acks=all.", minimum=1),
        _D("unclean.leader.election.enable", "bool", False, "Allow out-of-sync replicas to lead."),
        _D(
            "compression.type",
            "string",
            "producer",
            "Codec the broker stores batches in.",
            choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        ),
        _D(
            "group.initial.rebalance.delay.ms",
            "int",
            3000,
            "How long the first rebalance of an empty group waits for more members.",
            minimum=0,
        ),
        _D("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a member may ask for.", minimum=0),
        _D("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a member may ask for.", minimum=0),
        _D("group.max.size", "int", 2147483647, "Most members a consumer group may have.", minimum=1),
        # share groups (KIP-932): Kafka 4.3's GroupCoordinatorConfig / ShareGroupConfig names and defaults
        _D(
            "group.share.session.timeout.ms",
            "int",
            45000,
            "Share groups: a member without a heartbeat for this long is removed.",
            minimum=1,
        ),
        _D(
            "group.share.min.session.timeout.ms",
            "int",
            45000,
            "Smallest share.session.timeout.ms a group may set.",
            minimum=1,
        ),
        _D(
            "group.share.max.session.timeout.ms",
            "int",
            60000,
            "Largest share.session.timeout.ms a group may set.",
            minimum=1,
        ),
        _D("group.share.heartbeat.interval.ms", "int", 5000, "Share groups: how often members heartbeat.", minimum=1),
        _D(
            "group.share.min.heartbeat.interval.ms",
            "int",
            5000,
            "Smallest share.heartbeat.interval.ms a group may set.",
            minimum=1,
        ),
        _D(
            "group.share.max.heartbeat.interval.ms",
            "int",
            15000,
            "Largest share.heartbeat.interval.ms a group may set.",
            minimum=1,
        ),
        _D("group.share.max.size", "int", 200, "Most members a share group may have.", minimum=1),
        _D(
            "group.share.assignment.interval.ms",
            "int",
            1000,
            "Share groups: the least time between two target assignments of a group.",
            minimum=0,
        ),
        _D(
            "group.share.min.assignment.interval.ms",
            "int",
            0,
            "Smallest share.assignment.interval.ms a group may set.",
            minimum=0,
        ),
        _D(
            "group.share.max.assignment.interval.ms",
            "int",
            15000,
            "Largest share.assignment.interval.ms a group may set.",
            minimum=0,
        ),
        _D(
            "group.share.assignors",
            "list",
            ["simple"],
            "Server-side assignor of share groups (Kafka's simple assignor).",
            choices=("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"),
        ),
        _D(
            "group.share.record.lock.duration.ms",
            "int",
            30000,
            "How long a share consumer holds the records it acquired.",
            minimum=1,
        ),
        _D(
            "group.share.min.record.lock.duration.ms",
            "int",
            15000,
            "Smallest share.record.lock.duration.ms a group may set.",
            minimum=1,
        ),
        _D(
            "group.share.max.record.lock.duration.ms",
            "int",
            60000,
            "Largest share.record.lock.duration.ms a group may set.",
            minimum=1,
        ),
        _D("group.share.delivery.count.limit", "int", 5, "Deliveries of a record before it is archived.", minimum=1),
        _D(
            "group.share.min.delivery.count.limit",
            "int",
            2,
            "Smallest share.delivery.count.limit a group may set.",
            minimum=1,
        ),
        _D(
            "group.share.max.delivery.count.limit",
            "int",
            10,
            "Largest share.delivery.count.limit a group may set.",
            minimum=1,
        ),
        _D(
            "group.share.partition.max.record.locks",
            "int",
            2000,
            "Most records in flight per share partition.",
            minimum=1,
        ),
        _D(
            "group.share.min.partition.max.record.locks",
            "int",
            100,
            "Smallest share.partition.max.record.locks a group may set.",
            minimum=1,
        ),
        _D(
            "group.share.max.partition.max.record.locks",
            "int",
            4000,
            "Largest share.partition.max.record.locks a group may set.",
            minimum=1,
        ),
        _D("group.share.max.share.sessions", "int", 2000, "Most share sessions a broker keeps.", minimum=1),
        _D(
            "group.consumer.session.timeout.ms",
            "int",
            45000,
            "KIP-848 consumer groups: a member without a heartbeat for this long is removed.",
            minimum=1,
        ),
        _D(
            "group.consumer.heartbeat.interval.ms",
            "int",
            5000,
            "KIP-848 consumer groups: how often members heartbeat.",
            minimum=1,
        ),
        _D("group.consumer.max.size", "int", 2147483647, "Most members a KIP-848 consumer group may have.", minimum=1),
        _D(
            "group.consumer.assignors",
            "list",
            ["uniform", "range"],
            "Server-side assignors of KIP-848 consumer groups, the default first (short or Kafka's class names).",
            choices=(
                "uniform",
                "range",
                "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
            ),
        ),
        _D(
            "group.consumer.migration.policy",
            "string",
            "bidirectional",
            "Online conversion of a group with members between the classic and the consumer (KIP-848) protocol: "
            "bidirectional, upgrade (classic to consumer only), downgrade (consumer to classic only) or disabled.",
            choices=(
                "bidirectional",
                "upgrade",
                "downgrade",
                "disabled",
                "BIDIRECTIONAL",
                "UPGRADE",
                "DOWNGRADE",
                "DISABLED",
            ),
        ),
        _D(
            "group.streams.session.timeout.ms",
            "int",
            45000,
            "Streams groups (KIP-1071): a member without a heartbeat for this long is removed.",
            minimum=1,
        ),
        _D(
            "group.streams.heartbeat.interval.ms",
            "int",
            5000,
            "Streams groups (KIP-1071): how often members heartbeat.",
            minimum=1,
        ),
        _D("group.streams.max.size", "int", 2147483647, "Most members a streams group may have.", minimum=1),
        _D(
            "group.streams.initial.rebalance.delay.ms",
            "int",
            3000,
            "Streams groups (KIP-1071): how long a new group's first task assignment waits for more members.",
            minimum=0,
        ),
        _D(
            "group.streams.assignment.interval.ms",
            "int",
            1000,
            "Streams groups (KIP-1071): the least time between two task assignments of a group.",
            minimum=0,
        ),
        _D(
            "group.streams.num.standby.replicas",
            "int",
            0,
            "Streams groups (KIP-1071): standby replicas of each task, on other Kafka Streams processes.",
            minimum=0,
        ),
        _D("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", minimum=1),
        _D("offsets.topic.replication.factor", "int", 1, "Replication factor of __consumer_offsets.", minimum=1),
        _D("offsets.topic.segment.bytes", "int", 100 * 1024 * 1024, "Segment size of __consumer_offsets.", minimum=14),
        _D(
            "offsets.retention.minutes",
            "int",
            10080,
            "Committed offsets of a group are kept this long after it becomes empty.",
            minimum=1,
        ),
        _D("offsets.retention.check.interval.ms", "long", 600000, "How often expired offsets are removed.", minimum=1),
        _D(
            "zookeeper.connect",
            "string",
            None,
            "ZooKeeper hosts and optional chroot (host:port[,host:port]/chroot); unset = standalone.",
        ),
        _D(
            "zookeeper.session.timeout.ms",
            "int",
            18000,
            "ZooKeeper session timeout: how soon a lost broker is noticed.",
            minimum=1,
        ),
        _D("zookeeper.connection.timeout.ms", "int", 18000, "How long to wait for ZooKeeper at start-up.", minimum=1),
        _D(
            "broker.rack",
            "string",
            None,
            "Rack of this broker: in its registration, Metadata and DescribeCluster; consumers with a "
            "matching client.rack read from it (replica.selector.class); new partitions' replicas are "
            "placed over the racks.",
        ),
        _D(
            "replica.selector.class",
            "string",
            None,
            "Which replica a consumer reads from (KIP-392): unset, the leader; "
            "org.apache.kafka.common.replica.RackAwareReplicaSelector, an in-sync replica in the consumer's "
            "client.rack; org.apache.kafka.common.replica.LeaderSelector, the leader.",
            choices=(
                "org.apache.kafka.common.replica.RackAwareReplicaSelector",
                "org.apache.kafka.common.replica.LeaderSelector",
            ),
        ),
        _D(
            "offsets.commit.timeout.ms",
            "int",
            5000,
            "How long an offset commit waits for the offsets partition's in-sync replicas.",
            minimum=1,
        ),
        _D(
            "replica.lag.time.max.ms",
            "long",
            30000,
            "A follower that has not caught up for this long leaves the ISR.",
            minimum=1,
        ),
        _D("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower fetches per partition per request.", minimum=1),
        _D("replica.fetch.response.max.bytes", "int", 10485760, "Bytes a follower fetches per request.", minimum=1),
        _D("quota.window.num", "int", 11, "Samples a client quota's rate is measured over.", minimum=1),
        _D("quota.window.size.seconds", "int", 1, "Length of one client quota rate sample.", minimum=1),
        _D(
            "replication.quota.window.num",
            "int",
            11,
            "Samples a replication throttle's rate is measured over (leader/follower.replication.throttled.rate).",
            minimum=1,
        ),
        _D(
            "replication.quota.window.size.seconds",
            "int",
            1,
            "Length of one replication throttle rate sample.",
            minimum=1,
        ),
        _D(
            "max.connection.creation.rate",
            "int",
            2**31 - 1,
            "New connections per second the broker accepts on all listeners together (the inter-broker one "
            "exempt when there are others); at the rate new ones wait. Per listener: "
            "listener.name.<listener>.max.connection.creation.rate. Also settable dynamically.",
            minimum=0,
        ),
        _D(
            "max.connections",
            "int",
            2**31 - 1,
            "Open connections the broker allows on all listeners together (the inter-broker one exempt "
            "when there are others); at the limit new ones wait. Per listener: "
            "listener.name.<listener>.max.connections. Also settable dynamically.",
            minimum=0,
        ),
        _D(
            "max.connections.per.ip",
            "int",
            2**31 - 1,
            "Open connections allowed from one IP address; more are closed at once. 0 only with "
            "overrides. Also settable dynamically.",
            minimum=0,
        ),
        _D(
            "max.connections.per.ip.overrides",
            "string",
            "",
            "Per-IP or host name limits replacing max.connections.per.ip: host:count, comma separated "
            "(e.g. hostName:100,127.0.0.1:200). Also settable dynamically.",
        ),
        _D(
            "max.request.partition.size.limit",
            "int",
            2000,
            "Most partitions one DescribeTopicPartitions answer holds.",
            minimum=1,
        ),
        _D(
            "max.incremental.fetch.session.cache.slots",
            "int",
            1000,
            "Incremental fetch sessions (KIP-227) the broker keeps; 0 turns them off.",
            minimum=0,
        ),
        _D("cluster.id", "string", None, "Cluster id for a new log dir; default: generated."),
        _D(
            "console.listeners",
            "list",
            None,
            "Web console and /metrics: http://host:port (port 0 lets the OS choose); unset = no console.",
        ),
        _D(
            "console.auth.username",
            "string",
            None,
            "Console basic-auth user (with console.auth.password); needed to bind a non-loopback address.",
        ),
        _D("console.auth.password", "password", None, "Console basic-auth password."),
        _D(
            "console.auth.token",
            "password",
            None,
            "Console shared secret, sent as 'Authorization: Bearer <token>' (or as the basic-auth password).",
        ),
        _D(
            "console.history.interval.ms",
            "long",
            5000,
            "How often the console samples offsets and rates for its graphs.",
            minimum=100,
        ),
        _D(
            "console.history.retention.ms",
            "long",
            3600000,
            "How long the console keeps offsets over time.",
            minimum=1000,
        ),
        _D(
            "control.listener",
            "string",
            None,
            "Strom only, for tests: host:port of an HTTP endpoint for fault injection and test control "
            "(loopback addresses only; port 0 lets the OS choose); unset = off. `strom serve --dev` sets it.",
        ),
        _D("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", minimum=1),
        _D(
            "transaction.state.log.replication.factor",
            "int",
            1,
            "Replication factor of __transaction_state (Kafka's default is 3; Strom's 1 suits one broker).",
            minimum=1,
        ),
        _D(
            "transaction.state.log.min.isr",
            "int",
            1,
            "min.insync.replicas of __transaction_state: replicas a transaction state change needs.",
            minimum=1,
        ),
        _D(
            "transaction.state.log.segment.bytes",
            "int",
            100 * 1024 * 1024,
            "Segment size of __transaction_state.",
            minimum=14,
        ),
        _D(
            "share.coordinator.state.topic.num.partitions",
            "int",
            50,
            "Partitions of __share_group_state.",
            minimum=1,
        ),
        _D(
            "share.coordinator.state.topic.replication.factor",
            "int",
            1,
            "Replication factor of __share_group_state (Kafka's default is 3; Strom's 1 suits one broker).",
            minimum=1,
        ),
        _D(
            "share.coordinator.state.topic.min.isr",
            "int",
            1,
            "min.insync.replicas of __share_group_state: replicas a share-partition state write needs "
            "(Kafka's default is 2).",
            minimum=1,
        ),
        _D(
            "share.coordinator.state.topic.segment.bytes",
            "int",
            100 * 1024 * 1024,
            "Segment size of __share_group_state.",
            minimum=14,
        ),
        _D(
            "share.coordinator.snapshot.update.records.per.snapshot",
            "int",
            500,
            "ShareUpdate records written for a share-partition before its state is written whole again "
            "(a ShareSnapshot).",
            minimum=0,
        ),
        _D(
            "share.coordinator.state.topic.prune.interval.ms",
            "int",
            300000,
            "How often the share coordinator deletes the __share_group_state records no share-partition needs.",
            minimum=1,
        ),
        _D(
            "share.coordinator.write.timeout.ms",
            "int",
            5000,
            "How long a share-partition state write may wait for the in-sync replicas.",
            minimum=1,
        ),
        _D(
            "transaction.max.timeout.ms",
            "int",
            900000,
            "Largest transaction.timeout.ms a producer may ask for (else INVALID_TRANSACTION_TIMEOUT).",
            minimum=1,
        ),
        _D(
            "transactional.id.expiration.ms",
            "int",
            604800000,
            "A transactional id idle this long (no transaction in progress) is forgotten.",
            minimum=1,
        ),
        _D(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "int",
            10000,
            "How often transactions open longer than their timeout are aborted.",
            minimum=1,
        ),
        _D(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            "int",
            3600000,
            "How often expired transactional ids are removed.",
            minimum=1,
        ),
        _D(
            "producer.id.expiration.ms",
            "int",
            86400000,
            "A producer id with no transaction open and no write for this long leaves a partition's "
            "producer state (and the cleaner no longer keeps its last batch).",
            minimum=1,
        ),
        _D(
            "producer.id.expiration.check.interval.ms",
            "int",
            600000,
            "How often expired producer ids are removed.",
            minimum=1,
        ),
    ]
}

# `strom serve --dev` and strom.testing's brokers: what a test suite wants, each one overridable.
DEV_CONFIGS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.streams.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "auto.create.topics.enable": "true",
    "offsets.topic.num.partitions": "1",
    "num.partitions": "1",
    "default.replication.factor": "1",
}


TopicDef = tuple[str, str | None, str, Any]  # topic key, broker key it inherits, type, default
TOPIC_CONFIGS: dict[str, TopicDef] = {
    t[0]: t
    for t in [
        ("cleanup.policy", "log.cleanup.policy", "list", ["delete"]),
        ("compression.type", "compression.type", "string", "producer"),
        ("delete.retention.ms", "log.cleaner.delete.retention.ms", "long", 86400000),
        ("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "double", 0.5),
        ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "long", 0),
        ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "long", (1 << 63) - 1),
        ("file.delete.delay.ms", None, "long", 60000),
        ("index.interval.bytes", "log.index.interval.bytes", "int", 4096),
        ("max.message.bytes", "message.max.bytes", "int", 1048588),
        ("message.timestamp.type", "log.message.timestamp.type", "string", "CreateTime"),
        ("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", "long", (1 << 63) - 1),
        ("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", "long", 3600000),
        ("min.insync.replicas", "min.insync.replicas", "int", 1),
        ("retention.bytes", "log.retention.bytes", "long", -1),
        ("retention.ms", "log.retention.ms", "long", _WEEK_MS),
        ("segment.bytes", "log.segment.bytes", "int", 1 << 30),
        ("segment.index.bytes", "log.index.size.max.bytes", "int", 10 * 1024 * 1024),
        ("segment.ms", "log.roll.ms", "long", _WEEK_MS),
        ("unclean.leader.election.enable", "unclean.leader.election.enable", "bool", False),
        # Accepted and shown as Kafka 3.x does, with no effect here: batches are always stored as v2
        # (message.format.version is ignored from inter-broker protocol 3.0 on in Kafka too), the log
        # is not preallocated. The replication throttle lists are honoured (strom.broker.replication_quota).
        ("message.format.version", None, "string", "3.0-IV1"),
        ("message.downconversion.enable", None, "bool", True),
        ("preallocate", None, "bool", False),
        ("segment.jitter.ms", None, "long", 0),
        ("message.timestamp.difference.max.ms", None, "long", (1 << 63) - 1),
        ("leader.replication.throttled.replicas", None, "list", []),
        ("follower.replication.throttled.replicas", None, "list", []),
    ]
}

# Kafka's internal topic configs (LogConfig.defineInternal): accepted and described when set, never
# listed among the defaults. internal.segment.bytes overrides segment.bytes (no 1 MiB minimum).
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"
INTERNAL_TOPIC_CONFIGS: dict[str, str] = {INTERNAL_SEGMENT_BYTES: "int"}

# Kafka's topic config validators (LogConfig), in Kafka's order: their refusals are worded as
# Kafka words them ("Invalid value x for configuration k: ..."), which tools and libraries match.
_TOPIC_CHOICES = {
    "cleanup.policy": ("compact", "delete"),
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "message.timestamp.type": ("CreateTime", "LogAppendTime"),
}
_TOPIC_MINIMUMS = {
    # Kafka 4.1+ (KAFKA-19035); 4.0 took 14. Tests that need small segments set the internal
    # override internal.segment.bytes, as Kafka's own tests do.
    "segment.bytes": 1024 * 1024,
    INTERNAL_SEGMENT_BYTES: 14,
    "segment.ms": 1,
    "segment.jitter.ms": 0,
    "retention.ms": -1,
    "max.message.bytes": 0,
    "index.interval.bytes": 0,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 1,
    "file.delete.delay.ms": 0,
    "min.cleanable.dirty.ratio": 0,
    "min.insync.replicas": 1,
    "message.timestamp.before.max.ms": 0,
    "message.timestamp.after.max.ms": 0,
    "message.timestamp.difference.max.ms": 0,
    # Kafka takes 4; Strom's offset index needs room for one 8-byte entry
    "segment.index.bytes": 8,
}
_TOPIC_MAXIMUMS = {"min.cleanable.dirty.ratio": 1}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT_RANGE = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}


def parse_topic_config(key: str, raw: str) -> Any:
    """Parse one topic-level value; ConfigError names an unknown key or a bad value in Kafka's words."""
    if key not in TOPIC_CONFIGS and key not in INTERNAL_TOPIC_CONFIGS:
        raise ConfigError(f"Unknown topic config name: {key}")
    typ = TOPIC_CONFIGS[key][2] if key in TOPIC_CONFIGS else INTERNAL_TOPIC_CONFIGS[key]
    if key in THROTTLED_REPLICAS_KEYS:
        _check_throttled_replicas(key, raw)

    def invalid(value: Any, reason: str) -> ConfigError:
        return ConfigError(f"Invalid value {value} for configuration {key}: {reason}")

    text = raw.strip()
    if typ in _INT_RANGE:
        low, high = _INT_RANGE[typ]
        if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
            raise invalid(text, f"Not a number of type {typ.upper()}")
        value: Any = int(text)
    elif typ == "double":
        try:
            value = float(text) if "_" not in text else None
        except ValueError:
            value = None
        if value is None:
            raise invalid(text, "Not a number of type DOUBLE")
    elif typ == "bool":
        if text.lower() not in ("true", "false"):
            raise invalid(text, "Expected value to be either true or false")
        value = text.lower() == "true"
    elif typ == "list":
        value = _parse_list(text)
    else:
        value = text
    choices = _TOPIC_CHOICES.get(key)
    if choices is not None:  # Kafka splits "a, ,b" into a, "" and b: an empty item is refused
        for item in (re.split(r"\s*,\s*", text) if text else []) if typ == "list" else [value]:
            if item not in choices:
                raise invalid(item, f"String must be one of: {', '.join(choices)}")
    if key in _TOPIC_MINIMUMS and value < _TOPIC_MINIMUMS[key]:
        raise invalid(value, f"Value must be at least {_TOPIC_MINIMUMS[key]}")
    if key in _TOPIC_MAXIMUMS and value > _TOPIC_MAXIMUMS[key]:
        raise invalid(value, f"Value must be no more than {_TOPIC_MAXIMUMS[key]}")
    return value


THROTTLED_REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
_REPLICA_PAIR = re.compile(r"([0-9]+:[0-9]+)?")


def _check_throttled_replicas(key: str, raw: str) -> None:
    """Kafka's ThrottledReplicaListValidator: '*' or partition:broker pairs, comma separated."""
    items = _parse_list(raw)
    if all(_REPLICA_PAIR.fullmatch(i) for i in items) or "".join(items) == "*":
        return
    raise ConfigError(
        f"Invalid value [{', '.join(items)}] for configuration {key}: {key} must be the literal '*' "
        "or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def read_properties(path: Path) -> dict[str, str]:
    """Java-properties subset: key=value or key: value lines, # and ! comments, \\ continuations."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    pending = ""
    for number, line in enumerate(text.splitlines(), 1):
        line = pending + line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not match:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        props[match.group(1)] = match.group(2)
    return props


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}


def parse_protocol_map(entries: list[str]) -> dict[str, str]:
    out = {}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: {entry!r}: expected NAME:PROTOCOL with PROTOCOL "
                f"one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        out[name] = protocol
    return out


def parse_listener(text: str, protocol_map: dict[str, str] | None = None) -> Listener:
    match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[0-9a-fA-F:.]*\]|[^:\[\]]*):(\d+)", text)
    if not match:
        raise ConfigError(f"listener {text!r}: expected NAME://host:port")
    name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
    protocols = DEFAULT_PROTOCOL_MAP if protocol_map is None else protocol_map
    if name not in protocols:
        raise ConfigError(
            f"listener {text!r}: {name} has no security protocol; add {name}:PROTOCOL to listener.security.protocol.map"
        )
    if port > 65535:
        raise ConfigError(f"listener {text!r}: port out of range")
    return Listener(name, host, port, protocols[name])


LISTENER_PREFIX = "listener.name."
# listener-level connection limits: listener.name.<listener>.<key> (checked at start-up)
LISTENER_LIMIT_KEYS = ("max.connections", "max.connection.creation.rate")
INT_MAX = 2**31 - 1


def parse_java_int(text: str) -> int:
    """Java's Integer.parseInt: an optional sign and digits, within 32 bits; ValueError with its
    message otherwise (Kafka quotes it in its answers)."""
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(2**31) <= int(text) <= INT_MAX:
        raise ValueError(f'For input string: "{text}"')
    return int(text)


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: host:count pairs, comma separated, split at the last
    colon (so `::1:5` is an IPv6 address), as Kafka's parseCsvMap reads them. ValueError with
    Kafka's message for a pair without a colon or a count that is not an int."""
    if raw == "":
        return {}
    items = re.split(r"\s*,\s*", raw)
    while len(items) > 1 and items[-1] == "":
        items.pop()  # Java's split drops trailing empty strings
    pairs = []
    for item in items:
        colon = item.rfind(":")
        if colon < 0:
            raise ValueError(
                f"Error parsing configuration property 'max.connections.per.ip.overrides': "
                f"begin 0, end -1, length {len(item)}"
            )
        pairs.append((item[:colon].strip(), item[colon + 1 :].strip()))
    return {host: parse_java_int(count) for host, count in pairs}


def check_connection_limits(values: dict[str, Any], originals: dict[str, str]) -> None:
    """Start-up checks of the connection limits Kafka makes: the overrides parse, a per-IP limit of
    0 needs overrides, listener-level limits are ints of at least 0."""
    try:
        overrides = parse_ip_overrides(values["max.connections.per.ip.overrides"] or "")
    except ValueError as exc:
        raise ConfigError(
            f"max.connections.per.ip.overrides={values['max.connections.per.ip.overrides']!r}: {exc}"
        ) from None
    if values["max.connections.per.ip"] == 0 and not overrides:
        raise ConfigError(
            "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
        )
    for name, raw in originals.items():
        if not name.startswith(LISTENER_PREFIX):
            continue
        key = name[len(LISTENER_PREFIX) :].partition(".")[2]
        if key in LISTENER_LIMIT_KEYS:
            try:
                number = parse_java_int(raw.strip())
            except ValueError:
                raise ConfigError(f"{name}={raw!r}: not a number of type INT") from None
            if number < 0:
                raise ConfigError(f"{name}={raw!r}: must be at least 0")


def parse_console_listener(text: str) -> tuple[str, int]:
    """(host, port) of an http://host:port console listener."""
    match = re.fullmatch(r"http://(\[[0-9a-fA-F:.]*\]|[^:\[\]/]*):(\d+)/?", text.strip())
    if not match:
        raise ConfigError(f"console.listeners: {text!r}: expected http://host:port")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    if port > 65535:
        raise ConfigError(f"console.listeners: {text!r}: port out of range")
    return host or "127.0.0.1", port


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_control_listener(text: str) -> Listener:
    """``host:port`` of the test control endpoint; only loopback hosts, it has no authentication."""
    match = re.fullmatch(r"(?:[A-Za-z]+://)?(\[[0-9a-fA-F:.]*\]|[^:\[\]]*):(\d+)", text.strip())
    if not match:
        raise ConfigError(f"control.listener={text!r}: expected host:port, e.g. 127.0.0.1:0")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    if not (host == "localhost" or host == "::1" or re.fullmatch(r"127(\.\d{1,3}){3}", host)):
        raise ConfigError(
            f"control.listener={text!r}: must be a loopback address (127.0.0.1); "
            f"the control endpoint has no authentication"
        )
    if port > 65535:
        raise ConfigError(f"control.listener={text!r}: port out of range")
    return Listener("CONTROL", host, port)


class BrokerConfig:
    """Parsed broker configuration. `values` holds every key of BROKER_CONFIGS."""

    def __init__(self, props: dict[str, str] | None = None):
        props = dict(props or {})
        self.originals = props
        self.values: dict[str, Any] = {}
        for name, definition in BROKER_CONFIGS.items():
            raw = props.get(name)
            self.values[name] = definition.default if raw is None else definition.parse(raw)
        for name in props:
            if name not in BROKER_CONFIGS and not name.startswith(LISTENER_PREFIX):
                log.warning("config key=%s is not a known config and is ignored", name)
        check_connection_limits(self.values, props)
        if self.values["broker.id"] is not None:
            self.values["node.id"] = self.values["broker.id"]
        if self.values["log.dir"] and "log.dirs" not in props:
            self.values["log.dirs"] = [self.values["log.dir"]]
        if not self.values["log.dirs"]:
            raise ConfigError("log.dirs: at least one directory is needed")
        self.protocol_map = parse_protocol_map(self.values["listener.security.protocol.map"])
        self.listeners = [parse_listener(text, self.protocol_map) for text in self.values["listeners"]]
        if not self.listeners:
            raise ConfigError("listeners: at least one listener is needed")
        names = [listener.name for listener in self.listeners]
        if len(set(names)) != len(names):
            raise ConfigError(f"listeners: each listener name may appear once: {','.join(names)}")
        advertised = self.values["advertised.listeners"]
        self.advertised = [parse_listener(text, self.protocol_map) for text in advertised] if advertised else None
        for adv in self.advertised or ():
            if adv.name not in names:
                raise ConfigError(f"advertised.listeners: {adv} names no listener in listeners ({','.join(names)})")
        self.inter_broker_listener = self._inter_broker_listener(names)
        self.console_listeners = [parse_console_listener(text) for text in self.values["console.listeners"] or ()]
        if self.console_listeners and not self.console_auth_configured():
            public = [c for c in self.console_listeners if not _is_loopback(c[0])]
            if public:
                raise ConfigError(
                    f"console.listeners: {public[0][0]} is not a loopback address; set "
                    f"console.auth.username and console.auth.password, or console.auth.token"
                )
        if (self.values["console.auth.username"] is None) != (self.values["console.auth.password"] is None):
            raise ConfigError("console.auth.username and console.auth.password go together")
        control = self.values["control.listener"]
        self.control = parse_control_listener(control) if control else None

    def console_auth_configured(self) -> bool:
        return bool(self.values["console.auth.token"] or self.values["console.auth.password"])

    def _inter_broker_listener(self, names: list[str]) -> str:
        explicit = self.values["inter.broker.listener.name"]
        if explicit is not None:
            if "security.inter.broker.protocol" in self.originals:
                raise ConfigError("set only one of inter.broker.listener.name and security.inter.broker.protocol")
            if explicit.upper() not in names:
                raise ConfigError(f"inter.broker.listener.name={explicit}: no such listener in listeners")
            return explicit.upper()
        protocol = self.values["security.inter.broker.protocol"]
        if "security.inter.broker.protocol" in self.originals:
            if protocol not in names:
                raise ConfigError(f"security.inter.broker.protocol={protocol}: listeners has no {protocol} listener")
            return protocol
        return protocol if protocol in names else names[0]

    def listener_value(self, listener: str, key: str) -> Any:
        """A setting as one listener sees it: ``listener.name.<listener>.<key>`` when set, else the
        broker-wide value (Kafka's listener-prefixed overrides)."""
        raw = self.originals.get(f"{LISTENER_PREFIX}{listener.lower()}.{key}")
        if raw is None:
            return self.values.get(key)
        definition = BROKER_CONFIGS.get(key)
        return definition.parse(raw) if definition is not None else raw

    def listener_raw(self, listener: str, key: str) -> str | None:
        """A listener-only setting without a broker-wide default (sasl.jaas.config and the like)."""
        return self.originals.get(f"{LISTENER_PREFIX}{listener.lower()}.{key}")

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self.values["log.dirs"]]

    def retention_ms(self) -> int:
        if self.values["log.retention.ms"] is not None:
            return self.values["log.retention.ms"]
        if self.values["log.retention.minutes"] is not None:
            return self.values["log.retention.minutes"] * 60_000
        return self.values["log.retention.hours"] * 3_600_000

    def roll_ms(self) -> int:
        if self.values["log.roll.ms"] is not None:
            return self.values["log.roll.ms"]
        return self.values["log.roll.hours"] * 3_600_000

    def topic_default(self, key: str) -> Any:
        """The broker-level default a topic config inherits."""
        _, broker_key, _, default = TOPIC_CONFIGS[key]
        special = {"retention.ms": self.retention_ms, "segment.ms": self.roll_ms}
        if key in special:
            return special[key]()
        if broker_key is None or self.values.get(broker_key) is None:
            return default
        return self.values[broker_key]


def format_value(value: Any) -> str | None:
    """A config value as Kafka shows it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
