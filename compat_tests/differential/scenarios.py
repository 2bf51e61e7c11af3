"""The differential scenarios, as data: each a name and a few requests (``harness.Step``).

The first scenario builds the shared world both brokers start from (topics ``w-one`` with ten
records at fixed timestamps, ``w-three`` with two records per partition, ``w-compact``,
``w-empty``, ``w-small`` with max.message.bytes=1024, and committed offsets of group ``w-group``);
every later scenario reads the world or makes its own topics and groups named after itself
(``{s}``), so scenarios never disturb each other. Version loops cover every version Strom
serves (``strom.broker.apis.SUPPORTED_RANGE``) and the error paths.

Adding a scenario: append ``sc("name", step, step, ...)`` in a section below; a step is
``req(ApiKey.X, version, {body})`` (helpers below build the common ones).
"""

from __future__ import annotations

import struct
from typing import Any

from compat_tests.differential.harness import CLIENT_ID, Scenario, Step, served_within
from strom.broker.apis import SUPPORTED_RANGE as STROM_RANGE
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.compression import Compression
from strom.protocol.records.crc import crc32c
from strom.protocol.records.legacy import LegacyMessage, build_message_set
from strom.protocol.schema import ApiKey

# What these scenarios send: the versions Strom serves up to Kafka 4.0's (the newer ones run against
# Kafka 4.3.1, scenarios_43.py).
SUPPORTED_RANGE = served_within("4.0")
BASE_TS = 1_700_000_000_000
GROUP_SESSION_MS = 120_000  # members of the run's groups must not expire while it runs
A = ApiKey


def versions(api: int) -> range:
    """The versions Strom serves (none if it does not serve the API)."""
    lo, hi = SUPPORTED_RANGE.get(api, (0, -1))
    return range(lo, hi + 1)


def req(api: int, version: int, body: dict[str, Any] | None = None, **kw: Any) -> Step:
    return Step(int(api), version, body or {}, **kw)


def setup(api: int, version: int, body: dict[str, Any], **kw: Any) -> Step:
    """A step whose answer is not compared (retried until it carries no error)."""
    return Step(int(api), version, body, compare=False, until_ok=True, **kw)


def sc(name: str, *steps: Step, note: str = "") -> Scenario:
    return Scenario(name, tuple(steps), note)


# --------------------------------------------------------------------------- building blocks


def batch(
    n: int = 3,
    *,
    first_ts: int = BASE_TS,
    codec: int = 0,
    key: bytes | None = b"k",
    value_size: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    headers: bool = False,
    is_transactional: bool = False,
) -> bytes:
    records = [
        Record(
            i,
            i * 1000,
            key + str(i).encode() if key is not None else None,
            (b"v" * value_size) if value_size else f"value-{i}".encode(),
            [("h", f"hv{i}".encode())] if headers else [],
        )
        for i in range(n)
    ]
    return build_batch(
        records,
        compression=codec,
        base_timestamp=first_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )


def legacy(magic: int, n: int = 2, codec: int = 0) -> bytes:
    return build_message_set(
        [LegacyMessage(i, BASE_TS + i if magic else -1, b"k%d" % i, b"legacy-%d" % i, 0, magic) for i in range(n)],
        magic,
        codec,
    )


def patched(data: bytes, **fields: int) -> bytes:
    """A v2 batch with header fields overwritten (``length``, ``magic``, ``attributes``,
    ``last_offset_delta``, ``records_count``, ``base_sequence``) and its CRC-32C made right again, so
    that only the named field is wrong."""
    out = bytearray(data)
    for name, value in fields.items():
        offset, fmt = _HEADER_FIELDS[name]
        struct.pack_into(fmt, out, offset, value)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


_HEADER_FIELDS = {
    "length": (8, ">i"),
    "magic": (16, ">b"),
    "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"),
    "base_sequence": (53, ">i"),
    "records_count": (57, ">i"),
}


def malformed_batches() -> dict[str, bytes]:
    """A Produce v9 batch wrong in each way a client (or a broken proxy) can get one wrong."""
    two = batch(2)
    three = batch(3)
    body = bytearray(three)
    body[61] = 0x7E  # the first record's length varint: 63 where its fields take fewer bytes
    gzip_garbage = patched(build_batch([Record(0, 0, b"k", b"v")]) + b"", attributes=Compression.GZIP)
    return {
        "truncated-batch": two[:-5],
        "truncated-header": two[:40],
        "truncated-frame": two[:8],
        "second-batch-truncated": two + two[:-5],
        "two-batches": two + batch(1),
        "length-below-minimum": patched(two, length=20),
        "negative-length": patched(two, length=-1),
        "unknown-magic": patched(two, magic=3),
        "count-above-offsets": patched(three, records_count=5),
        "count-below-offsets": patched(three, records_count=2),
        "no-records": build_batch([], base_timestamp=BASE_TS),
        "unknown-codec": patched(two, attributes=5),
        "record-length-wrong": patched(bytes(body)),
        "bytes-after-last-record": patched(three + b"\x00\x00", length=len(three) - 12 + 2),
        "garbage-gzip-payload": gzip_garbage,
        "control-batch": patched(two, attributes=0x20),
        "producer-id-without-sequence": batch(2, producer_id=7, producer_epoch=0, base_sequence=-1),
        "legacy-magic": legacy(1),
        "whole-batch-then-garbage": two + b"\x00" * 11,
        "whole-batch-then-impossible-entry": two + b"\x00" * 12,
    }


def records_for(version: int, n: int = 3, **kw: Any) -> bytes:
    """The record format a Produce version carries: v0-1 magic 0, v2 magic 1, v3+ batches."""
    if version <= 1:
        return legacy(0, n)
    if version == 2:
        return legacy(1, n)
    return batch(n, **kw)


def create_topic(
    name: str, partitions: int = 1, configs: dict[str, str] | None = None, *, compare: bool = False, version: int = 7
) -> Step:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout_ms": 10_000,
        "validate_only": False,
    }
    if compare:
        return req(A.CREATE_TOPICS, version, body)
    return setup(A.CREATE_TOPICS, version, body)


def await_topic(name: str, partitions: int = 1) -> Step:
    """ListOffsets until every partition answers without error: Kafka's broker becomes leader of a new
    topic's partitions a little after CreateTopics returns."""
    return setup(
        A.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in range(partitions)
                    ],
                }
            ],
        },
    )


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1, txn: str | None = None) -> dict:
    return {
        "transactional_id": txn,
        "acks": acks,
        "timeout_ms": 10_000,
        "topic_data": [
            {"name": topic, "topic_id": "@tid:" + topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def produce(topic: str, partition: int, records: bytes, version: int = 9, **kw: Any) -> Step:
    return req(A.PRODUCE, version, produce_body(topic, partition, records), **kw)


def fetch_body(
    version: int,
    topic: str,
    partition: int = 0,
    offset: int = 0,
    *,
    max_bytes: int = 1 << 20,
    leader_epoch: int = -1,
    isolation: int = 0,
) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": 10,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": isolation,
        "session_id": 0,
        "session_epoch": -1,
        "rack_id": "",
        "topics": [
            {
                "topic": topic,
                "topic_id": "@tid:" + topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": leader_epoch,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
    }


def list_offsets_body(topic: str, partition: int, timestamp: int, leader_epoch: int = -1) -> dict:
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "timeout_ms": 10_000,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": leader_epoch,
                        "timestamp": timestamp,
                        "max_num_offsets": 1,
                    }
                ],
            }
        ],
    }


def commit_body(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    generation: int = -1,
    member: str = "",
    metadata: str | None = "m",
) -> dict:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": topic,
                "topic_id": "@tid:" + topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": metadata,
                    }
                ],
            }
        ],
    }


def offset_fetch_body(version: int, group: str, topics: list[tuple[str, list[int]]] | None) -> dict:
    tops = None if topics is None else [{"name": t, "topic_id": "@tid:" + t, "partition_indexes": p} for t, p in topics]
    if version >= 8:
        return {
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": tops}],
            "require_stable": False,
        }
    return {"group_id": group, "topics": tops, "require_stable": False}


def join_body(
    group: str,
    member: str = "",
    *,
    session_ms: int = GROUP_SESSION_MS,
    protocol: str = "range",
    protocol_type: str = "consumer",
) -> dict:
    return {
        "group_id": group,
        "session_timeout_ms": session_ms,
        "rebalance_timeout_ms": 30_000,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": protocol_type,
        "protocols": [{"name": protocol, "metadata": b"\x00\x01\x00\x00\x00\x01\x00\x05w-one\xff\xff\xff\xff"}],
        "reason": None,
    }


def join_steps(version: int, group: str, member_var: str = "member") -> list[Step]:
    """JoinGroup as a client does it: from v4 the first join asks for a member id (MEMBER_ID_REQUIRED)."""
    steps = []
    if version >= 4:
        steps.append(req(A.JOIN_GROUP, version, join_body(group), capture={member_var: "member_id"}))
        steps.append(
            req(
                A.JOIN_GROUP,
                version,
                join_body(group, "$" + member_var),
                capture={member_var: "member_id", "generation": "generation_id"},
            )
        )
    else:
        steps.append(
            req(
                A.JOIN_GROUP,
                version,
                join_body(group),
                capture={member_var: "member_id", "generation": "generation_id"},
            )
        )
    return steps


def sync_body(group: str, member: str = "$member", generation: Any = "$generation", assign: bool = True) -> dict:
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [
            {
                "member_id": member,
                "assignment": b"\x00\x01\x00\x00\x00\x01\x00\x05w-one\x00\x00\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff",
            }
        ]
        if assign
        else [],
    }


def heartbeat_body(group: str, member: str = "$member", generation: Any = "$generation") -> dict:
    return {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None}


def leave_body(group: str, member: str = "$member") -> dict:
    return {
        "group_id": group,
        "member_id": member,
        "members": [{"member_id": member, "group_instance_id": None, "reason": None}],
    }


def describe_configs_body(rtype: int, name: str, keys: list[str] | None, synonyms: bool = False) -> dict:
    return {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms,
        "include_documentation": False,
    }


TOPIC, BROKER = 2, 4
TOPIC_KEYS = ["cleanup.policy", "retention.ms", "max.message.bytes", "segment.bytes", "min.insync.replicas"]


# Kafka's broker applies a config change when the controller's metadata record reaches it, a little
# after AlterConfigs returns: a DescribeConfigs that reads a change is resent until it shows it
# (``has``/``lacks``, up to 5 s), so a slow machine does not make a difference that is not there.
def describe_topic(
    name: str,
    version: int = 4,
    keys: list[str] | None = None,
    pause_s: float = 0.0,
    has: str | None = None,
    lacks: str | None = None,
) -> Step:
    return req(
        A.DESCRIBE_CONFIGS,
        version,
        describe_configs_body(TOPIC, name, keys or TOPIC_KEYS),
        pause_s=pause_s,
        until_has=has,
        until_lacks=lacks,
    )


# --------------------------------------------------------------------------- the world


WORLD = sc(
    "world",
    create_topic("w-one", 1, compare=True),
    create_topic("w-three", 3, compare=True),
    create_topic("w-compact", 1, {"cleanup.policy": "compact"}, compare=True),
    create_topic("w-empty", 1, compare=True),
    create_topic("w-small", 1, {"max.message.bytes": "1024"}, compare=True),
    await_topic("w-one"),
    await_topic("w-three", 3),
    await_topic("w-compact"),
    await_topic("w-empty"),
    await_topic("w-small"),
    produce("w-one", 0, batch(5, headers=True), until_ok=True),
    produce("w-one", 0, batch(5, first_ts=BASE_TS + 5000, key=b"j"), until_ok=True),
    *[produce("w-three", p, batch(2, first_ts=BASE_TS + p), until_ok=True) for p in range(3)],
    produce("w-compact", 0, batch(3), until_ok=True),
    setup(A.FIND_COORDINATOR, 3, {"key": "w-group", "key_type": 0}),
    req(A.OFFSET_COMMIT, 8, commit_body("w-group", "w-one", 0, 4), until_ok=True),
)

# A stable group with one member that stays for the whole run (session 120 s).
STABLE = sc(
    "stable-group",
    setup(A.FIND_COORDINATOR, 3, {"key": "w-stable", "key_type": 0}),
    *join_steps(7, "w-stable"),
    req(A.SYNC_GROUP, 5, sync_body("w-stable")),
    req(A.OFFSET_COMMIT, 8, commit_body("w-stable", "w-one", 0, 2, generation="$generation", member="$member")),
)


# --------------------------------------------------------------------------- per API


def api_versions() -> list[Scenario]:
    out = [
        sc(
            f"api_versions-v{v}",
            req(A.API_VERSIONS, v, {"client_software_name": "strom-diff", "client_software_version": "1.0"}),
        )
        for v in versions(A.API_VERSIONS)
    ]
    out.append(
        sc(
            "api_versions-v3-invalid-software-name",
            req(A.API_VERSIONS, 3, {"client_software_name": "bad name!", "client_software_version": "1.0"}),
        )
    )
    # An ApiVersions version no broker knows: answered in v0 with UNSUPPORTED_VERSION.
    out.append(
        sc(
            "api_versions-v99-unknown",
            Step(A.API_VERSIONS, 99, {}, raw=b"\x00\x12\x00\x63\x00\x00\x00\x07\x00\x04diff\x00\x00\x00"),
        )
    )
    return out


def metadata() -> list[Scenario]:
    out = []
    for v in versions(A.METADATA):
        body = {
            "topics": [{"name": "w-one", "topic_id": bytes(16)}, {"name": "w-three", "topic_id": bytes(16)}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        out.append(sc(f"metadata-v{v}-two-topics", req(A.METADATA, v, body)))
        if v >= 4:
            out.append(
                sc(
                    f"metadata-v{v}-unknown-topic-no-autocreate",
                    req(
                        A.METADATA,
                        v,
                        {"topics": [{"name": "{s}", "topic_id": bytes(16)}], "allow_auto_topic_creation": False},
                    ),
                )
            )
            out.append(
                sc(
                    f"metadata-v{v}-autocreate",
                    req(
                        A.METADATA,
                        v,
                        {"topics": [{"name": "{s}", "topic_id": bytes(16)}], "allow_auto_topic_creation": True},
                    ),
                    await_topic("{s}"),
                    req(
                        A.METADATA,
                        v,
                        {"topics": [{"name": "{s}", "topic_id": bytes(16)}], "allow_auto_topic_creation": False},
                    ),
                )
            )
        if v >= 8:
            out.append(
                sc(
                    f"metadata-v{v}-authorized-operations",
                    req(
                        A.METADATA,
                        v,
                        {
                            "topics": [{"name": "w-one", "topic_id": bytes(16)}],
                            "allow_auto_topic_creation": False,
                            "include_cluster_authorized_operations": v <= 10,
                            "include_topic_authorized_operations": True,
                        },
                    ),
                )
            )
    out.append(sc("metadata-v1-invalid-topic-name", req(A.METADATA, 1, {"topics": [{"name": "bad name!"}]})))
    for v in sorted({12, SUPPORTED_RANGE[A.METADATA][1]}):  # v13: the same, with a top-level error code
        out.append(
            sc(
                f"metadata-v{v}-invalid-topic-name",
                req(A.METADATA, v, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True}),
            )
        )
        out.append(
            sc(
                f"metadata-v{v}-autocreate-invalid-name",
                req(A.METADATA, v, {"topics": [{"name": "a" * 250}], "allow_auto_topic_creation": True}),
            )
        )
        out.append(
            sc(
                f"metadata-v{v}-by-topic-id",
                req(
                    A.METADATA,
                    v,
                    {"topics": [{"name": None, "topic_id": "@tid:w-one"}], "allow_auto_topic_creation": False},
                ),
            )
        )
        out.append(
            sc(
                f"metadata-v{v}-unknown-topic-id",
                req(
                    A.METADATA,
                    v,
                    {"topics": [{"name": None, "topic_id": b"\x01" * 16}], "allow_auto_topic_creation": False},
                ),
            )
        )
        out.append(
            sc(f"metadata-v{v}-empty-list", req(A.METADATA, v, {"topics": [], "allow_auto_topic_creation": False}))
        )
    out.append(
        sc(
            "metadata-v3-autocreate-implied",
            req(A.METADATA, 3, {"topics": [{"name": "{s}"}]}),
            await_topic("{s}"),
            req(A.METADATA, 12, {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False}),
        )
    )
    return out


def produce_scenarios() -> list[Scenario]:
    out = []
    for v in versions(A.PRODUCE):
        out.append(
            sc(
                f"produce-v{v}",
                create_topic("{s}"),
                await_topic("{s}"),
                produce("{s}", 0, records_for(v), v),
                produce("{s}", 0, records_for(v), v),
                req(A.FETCH, 12, fetch_body(12, "{s}")),
            )
        )
        out.append(sc(f"produce-v{v}-unknown-topic", produce("{s}", 0, records_for(v), v)))
        out.append(sc(f"produce-v{v}-unknown-partition", produce("w-empty", 7, records_for(v), v)))
    codecs = [
        ("gzip", Compression.GZIP, 3),
        ("snappy", Compression.SNAPPY, 3),
        ("lz4", Compression.LZ4, 3),
        ("zstd", Compression.ZSTD, 7),
    ]
    for label, codec, v in codecs:
        out.append(
            sc(
                f"produce-v{v}-{label}",
                create_topic("{s}"),
                await_topic("{s}"),
                produce("{s}", 0, batch(4, codec=codec, headers=True), v),
                req(A.FETCH, 12, fetch_body(12, "{s}")),
            )
        )
    out.append(
        sc(
            "produce-v3-zstd-too-old",
            create_topic("{s}"),
            await_topic("{s}"),
            produce("{s}", 0, batch(2, codec=Compression.ZSTD), 3),
        )
    )
    for v in (0, 1):
        out.append(
            sc(
                f"produce-v{v}-legacy-gzip",
                create_topic("{s}"),
                await_topic("{s}"),
                produce("{s}", 0, legacy(0, 3, Compression.GZIP), v),
                req(A.FETCH, 12, fetch_body(12, "{s}")),
            )
        )
    out.append(
        sc(
            "produce-v9-acks-0",
            create_topic("{s}"),
            await_topic("{s}"),
            req(A.PRODUCE, 9, produce_body("{s}", 0, batch(2), acks=0), no_response=True),
            req(A.LIST_OFFSETS, 7, list_offsets_body("{s}", 0, -1), until_has="'offset': 2"),
        )
    )
    out.append(
        sc(
            "produce-v9-acks-1",
            create_topic("{s}"),
            await_topic("{s}"),
            req(A.PRODUCE, 9, produce_body("{s}", 0, batch(2), acks=1)),
        )
    )
    out.append(sc("produce-v9-invalid-acks", req(A.PRODUCE, 9, produce_body("w-empty", 0, batch(2), acks=2))))
    out.append(
        sc(
            "produce-v9-over-topic-max-message-bytes",
            produce("w-small", 0, batch(1, value_size=2000)),
            req(A.LIST_OFFSETS, 7, list_offsets_body("w-small", 0, -1)),
        )
    )
    out.append(sc("produce-v9-under-topic-max-message-bytes", produce("w-small", 0, batch(1, value_size=100))))
    out.append(
        sc(
            "produce-v9-over-segment-bytes",
            create_topic("{s}", 1, {"segment.bytes": "2048"}),
            await_topic("{s}"),
            produce("{s}", 0, batch(8, value_size=300)),
            req(A.LIST_OFFSETS, 7, list_offsets_body("{s}", 0, -1)),
        )
    )
    out.append(sc("produce-v3-over-topic-max-message-bytes", produce("w-small", 0, batch(1, value_size=4000), 3)))
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    out.append(
        sc(
            "produce-v9-corrupt-crc",
            produce("w-empty", 0, bytes(corrupt)),
            req(A.LIST_OFFSETS, 7, list_offsets_body("w-empty", 0, -1)),
        )
    )
    for label, records in malformed_batches().items():
        out.append(
            sc(
                f"produce-v9-malformed-{label}",
                create_topic("{s}"),
                await_topic("{s}"),
                produce("{s}", 0, records),
                req(A.LIST_OFFSETS, 7, list_offsets_body("{s}", 0, -1)),
            )
        )
    out.append(sc("produce-v9-compacted-null-key", produce("w-compact", 0, batch(2, key=None))))
    out.append(sc("produce-v9-compacted-keyed", produce("w-compact", 0, batch(2, key=b"c"))))
    out.append(sc("produce-v9-invalid-topic-name", produce("bad name!", 0, batch(1))))
    out.append(sc("produce-v9-empty-records", produce("w-empty", 0, b"")))
    out.append(
        sc(
            "produce-v9-three-partitions",
            create_topic("{s}", 3),
            await_topic("{s}", 3),
            req(
                A.PRODUCE,
                9,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout_ms": 10_000,
                    "topic_data": [
                        {"name": "{s}", "partition_data": [{"index": p, "records": batch(p + 1)} for p in range(3)]}
                    ],
                },
            ),
            req(
                A.LIST_OFFSETS,
                7,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": "{s}",
                            "partitions": [
                                {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in range(3)
                            ],
                        }
                    ],
                },
            ),
        )
    )
    # idempotence: InitProducerId, sequences in order, a duplicate, a gap, a wrong epoch
    idem = [
        create_topic("{s}"),
        await_topic("{s}"),
        req(
            A.INIT_PRODUCER_ID,
            4,
            {"transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1, "producer_epoch": -1},
            capture={"pid": "producer_id", "epoch": "producer_epoch"},
            until_ok=True,
        ),
    ]
    out.append(
        sc(
            "produce-idempotent-in-order",
            *idem,
            produce("{s}", 0, "@batch:0"),
            produce("{s}", 0, "@batch:2"),
            produce("{s}", 0, "@batch:2"),
            produce("{s}", 0, "@batch:8"),
            produce("{s}", 0, "@batch:4"),
            req(A.LIST_OFFSETS, 7, list_offsets_body("{s}", 0, -1)),
        )
    )
    out.append(sc("produce-idempotent-first-sequence-not-zero", *idem, produce("{s}", 0, "@batch:5")))
    out.append(
        sc(
            "produce-idempotent-unknown-producer-id",
            create_topic("{s}"),
            await_topic("{s}"),
            produce("{s}", 0, batch(2, producer_id=999_999, producer_epoch=0, base_sequence=0)),
        )
    )
    out.append(
        sc(
            "produce-transactional-without-init",
            create_topic("{s}"),
            await_topic("{s}"),
            req(A.PRODUCE, 9, produce_body("{s}", 0, batch(2), txn="no-such-txn")),
        )
    )
    return out


def fetch_scenarios() -> list[Scenario]:
    out = []
    for v in versions(A.FETCH):
        out.append(sc(f"fetch-v{v}-from-3", req(A.FETCH, v, fetch_body(v, "w-one", 0, 3))))
        out.append(sc(f"fetch-v{v}-out-of-range", req(A.FETCH, v, fetch_body(v, "w-one", 0, 100))))
        out.append(sc(f"fetch-v{v}-unknown-partition", req(A.FETCH, v, fetch_body(v, "w-one", 9, 0))))
    for v in (4, 11, 12, 13, 17):
        out.append(sc(f"fetch-v{v}-at-end", req(A.FETCH, v, fetch_body(v, "w-one", 0, 10))))
        out.append(sc(f"fetch-v{v}-empty-topic", req(A.FETCH, v, fetch_body(v, "w-empty", 0, 0))))
        out.append(
            sc(
                f"fetch-v{v}-three-partitions",
                req(
                    A.FETCH,
                    v,
                    {
                        **fetch_body(v, "w-three"),
                        "topics": [
                            {
                                "topic": "w-three",
                                "topic_id": "@tid:w-three",
                                "partitions": [
                                    {
                                        "partition": p,
                                        "current_leader_epoch": -1,
                                        "fetch_offset": 0,
                                        "last_fetched_epoch": -1,
                                        "log_start_offset": -1,
                                        "partition_max_bytes": 1 << 20,
                                    }
                                    for p in range(3)
                                ],
                            }
                        ],
                    },
                ),
            )
        )
        out.append(sc(f"fetch-v{v}-small-max-bytes", req(A.FETCH, v, fetch_body(v, "w-one", 0, 0, max_bytes=10))))
        out.append(sc(f"fetch-v{v}-negative-offset", req(A.FETCH, v, fetch_body(v, "w-one", 0, -5))))
    for v in (9, 12, 17):
        out.append(sc(f"fetch-v{v}-future-leader-epoch", req(A.FETCH, v, fetch_body(v, "w-one", 0, 0, leader_epoch=5))))
        out.append(
            sc(f"fetch-v{v}-current-leader-epoch", req(A.FETCH, v, fetch_body(v, "w-one", 0, 0, leader_epoch=0)))
        )
        out.append(sc(f"fetch-v{v}-read-committed", req(A.FETCH, v, fetch_body(v, "w-one", 0, 0, isolation=1))))
    for v in (4, 12):
        out.append(sc(f"fetch-v{v}-unknown-topic", req(A.FETCH, v, fetch_body(v, "no-such-topic-at-all"))))
    for v in (13, 17):
        body = fetch_body(v, "w-one")
        body["topics"][0]["topic_id"] = b"\x02" * 16
        out.append(sc(f"fetch-v{v}-unknown-topic-id", req(A.FETCH, v, body)))
    out.append(
        sc(
            "fetch-v12-last-fetched-epoch-diverging",
            req(
                A.FETCH,
                12,
                {
                    **fetch_body(12, "w-one"),
                    "topics": [
                        {
                            "topic": "w-one",
                            "partitions": [
                                {
                                    "partition": 0,
                                    "current_leader_epoch": 0,
                                    "fetch_offset": 10,
                                    "last_fetched_epoch": 3,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": 1 << 20,
                                }
                            ],
                        }
                    ],
                },
            ),
        )
    )
    out.append(
        sc(
            "fetch-v12-unknown-session",
            req(A.FETCH, 12, {**fetch_body(12, "w-one"), "session_id": 12345, "session_epoch": 3}),
        )
    )
    out.append(sc("fetch-v12-new-session", req(A.FETCH, 12, {**fetch_body(12, "w-one"), "session_epoch": 0})))
    return out


def list_offsets() -> list[Scenario]:
    out = []
    for v in versions(A.LIST_OFFSETS):
        for label, ts in (
            ("earliest", -2),
            ("latest", -1),
            ("timestamp", BASE_TS + 4500),
            ("after-last", BASE_TS + 99_000),
        ):
            out.append(sc(f"list_offsets-v{v}-{label}", req(A.LIST_OFFSETS, v, list_offsets_body("w-one", 0, ts))))
        out.append(
            sc(f"list_offsets-v{v}-unknown-partition", req(A.LIST_OFFSETS, v, list_offsets_body("w-one", 4, -1)))
        )
    for v in (7, 8, 10):
        out.append(sc(f"list_offsets-v{v}-max-timestamp", req(A.LIST_OFFSETS, v, list_offsets_body("w-one", 0, -3))))
    for v in (4, 10):
        out.append(
            sc(f"list_offsets-v{v}-future-leader-epoch", req(A.LIST_OFFSETS, v, list_offsets_body("w-one", 0, -1, 3)))
        )
        out.append(
            sc(f"list_offsets-v{v}-current-leader-epoch", req(A.LIST_OFFSETS, v, list_offsets_body("w-one", 0, -1, 0)))
        )
    out.append(
        sc("list_offsets-v7-unknown-topic", req(A.LIST_OFFSETS, 7, list_offsets_body("no-such-topic-at-all", 0, -1)))
    )
    out.append(
        sc(
            "list_offsets-v7-empty-topic",
            req(A.LIST_OFFSETS, 7, list_offsets_body("w-empty", 0, -2)),
            req(A.LIST_OFFSETS, 7, list_offsets_body("w-empty", 0, -1)),
            req(A.LIST_OFFSETS, 7, list_offsets_body("w-empty", 0, BASE_TS)),
        )
    )
    out.append(sc("list_offsets-v9-earliest-local", req(A.LIST_OFFSETS, 9, list_offsets_body("w-one", 0, -4))))
    out.append(
        sc(
            "list_offsets-v2-read-committed",
            req(A.LIST_OFFSETS, 2, {**list_offsets_body("w-one", 0, -1), "isolation_level": 1}),
        )
    )
    return out


def offsets() -> list[Scenario]:
    out = []
    for v in versions(A.OFFSET_COMMIT):
        fv = min(v, 9)
        out.append(
            sc(
                f"offset_commit-v{v}-simple-group",
                setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
                req(A.OFFSET_COMMIT, v, commit_body("{s}", "w-one", 0, 7)),
                req(A.OFFSET_FETCH, fv, offset_fetch_body(fv, "{s}", [("w-one", [0])])),
            )
        )
        out.append(
            sc(
                f"offset_commit-v{v}-unknown-topic",
                req(A.OFFSET_COMMIT, v, commit_body("w-group", "no-such-topic-at-all", 0, 1)),
            )
        )
        if v >= 1:
            out.append(
                sc(
                    f"offset_commit-v{v}-unknown-member",
                    req(
                        A.OFFSET_COMMIT, v, commit_body("w-stable", "w-one", 0, 1, generation=1, member="not-a-member")
                    ),
                )
            )
            out.append(
                sc(
                    f"offset_commit-v{v}-illegal-generation",
                    req(A.OFFSET_COMMIT, v, commit_body("w-group", "w-one", 0, 1, generation=5, member="someone")),
                )
            )
    out.append(sc("offset_commit-v8-unknown-partition", req(A.OFFSET_COMMIT, 8, commit_body("w-group", "w-one", 7, 1))))
    out.append(
        sc(
            "offset_commit-v8-null-metadata",
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 1, metadata=None)),
            req(A.OFFSET_FETCH, 8, offset_fetch_body(8, "{s}", [("w-one", [0])])),
        )
    )
    out.append(
        sc(
            "offset_commit-v8-metadata-too-large",
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 1, metadata="m" * 5000)),
        )
    )
    out.append(sc("offset_commit-v8-invalid-group-id", req(A.OFFSET_COMMIT, 8, commit_body("", "w-one", 0, 1))))
    for v in versions(A.OFFSET_FETCH):
        out.append(
            sc(
                f"offset_fetch-v{v}-committed",
                req(A.OFFSET_FETCH, v, offset_fetch_body(v, "w-group", [("w-one", [0]), ("w-three", [0, 1])])),
            )
        )
        out.append(
            sc(
                f"offset_fetch-v{v}-unknown-group",
                req(A.OFFSET_FETCH, v, offset_fetch_body(v, "{s}", [("w-one", [0])])),
            )
        )
        if v >= 2:
            out.append(
                sc(f"offset_fetch-v{v}-all-topics", req(A.OFFSET_FETCH, v, offset_fetch_body(v, "w-group", None)))
            )
        out.append(
            sc(
                f"offset_fetch-v{v}-unknown-topic",
                req(A.OFFSET_FETCH, v, offset_fetch_body(v, "w-group", [("no-such-topic-at-all", [0])])),
            )
        )
    out.append(
        sc(
            "offset_fetch-v8-two-groups",
            req(
                A.OFFSET_FETCH,
                8,
                {
                    "groups": [
                        {"group_id": "w-group", "topics": None},
                        {"group_id": "w-stable", "topics": [{"name": "w-one", "partition_indexes": [0]}]},
                    ],
                    "require_stable": True,
                },
            ),
        )
    )
    out.append(
        sc(
            "offset_fetch-v7-require-stable",
            req(A.OFFSET_FETCH, 7, {**offset_fetch_body(7, "w-stable", [("w-one", [0])]), "require_stable": True}),
        )
    )
    return out


def coordinator() -> list[Scenario]:
    out = []
    for v in versions(A.FIND_COORDINATOR):
        body = {"key": "w-group", "key_type": 0, "coordinator_keys": ["w-group", "w-stable"]}
        out.append(sc(f"find_coordinator-v{v}-group", req(A.FIND_COORDINATOR, v, body)))
        if v >= 1:
            out.append(
                sc(
                    f"find_coordinator-v{v}-transaction",
                    req(A.FIND_COORDINATOR, v, {"key": "diff-txn", "key_type": 1, "coordinator_keys": ["diff-txn"]}),
                )
            )
            out.append(
                sc(
                    f"find_coordinator-v{v}-invalid-key-type",
                    req(A.FIND_COORDINATOR, v, {"key": "x", "key_type": 7, "coordinator_keys": ["x"]}),
                )
            )
    out.append(sc("find_coordinator-v3-empty-group-id", req(A.FIND_COORDINATOR, 3, {"key": "", "key_type": 0})))
    out.append(
        sc("find_coordinator-v4-empty-keys", req(A.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": []}))
    )
    return out


def groups() -> list[Scenario]:
    out = []
    for jv in versions(A.JOIN_GROUP):
        sv = min(jv, SUPPORTED_RANGE[A.SYNC_GROUP][1])
        hv = min(jv, SUPPORTED_RANGE[A.HEARTBEAT][1])
        lv = min(jv, SUPPORTED_RANGE[A.LEAVE_GROUP][1])
        dv = min(jv, SUPPORTED_RANGE[A.DESCRIBE_GROUPS][1])
        out.append(
            sc(
                f"group-lifecycle-join-v{jv}",
                setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
                *join_steps(jv, "{s}"),
                req(A.SYNC_GROUP, sv, sync_body("{s}")),
                req(A.HEARTBEAT, hv, heartbeat_body("{s}")),
                req(A.DESCRIBE_GROUPS, dv, {"groups": ["{s}"], "include_authorized_operations": False}),
                req(A.LEAVE_GROUP, lv, leave_body("{s}")),
                req(A.DESCRIBE_GROUPS, dv, {"groups": ["{s}"], "include_authorized_operations": False}),
            )
        )
        out.append(
            sc(f"join_group-v{jv}-session-timeout-too-small", req(A.JOIN_GROUP, jv, join_body("{s}", session_ms=10)))
        )
        out.append(sc(f"join_group-v{jv}-unknown-member", req(A.JOIN_GROUP, jv, join_body("{s}", "not-a-member"))))
    for v in versions(A.SYNC_GROUP):
        out.append(sc(f"sync_group-v{v}-unknown-group", req(A.SYNC_GROUP, v, sync_body("{s}", "m-1", 1))))
        out.append(
            sc(f"sync_group-v{v}-unknown-member", req(A.SYNC_GROUP, v, sync_body("w-stable", "not-a-member", 1)))
        )
        out.append(
            sc(
                f"sync_group-v{v}-illegal-generation",
                setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
                *join_steps(7, "{s}"),
                req(A.SYNC_GROUP, v, sync_body("{s}", generation=9)),
            )
        )
    for v in versions(A.HEARTBEAT):
        out.append(sc(f"heartbeat-v{v}-unknown-group", req(A.HEARTBEAT, v, heartbeat_body("{s}", "m-1", 1))))
        out.append(
            sc(f"heartbeat-v{v}-unknown-member", req(A.HEARTBEAT, v, heartbeat_body("w-stable", "not-a-member", 1)))
        )
        out.append(
            sc(
                f"heartbeat-v{v}-rebalance-in-progress",
                setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
                *join_steps(7, "{s}"),
                req(A.HEARTBEAT, v, heartbeat_body("{s}")),
            )
        )
    for v in versions(A.LEAVE_GROUP):
        out.append(
            sc(f"leave_group-v{v}-unknown-member", req(A.LEAVE_GROUP, v, leave_body("w-stable", "not-a-member")))
        )
        out.append(sc(f"leave_group-v{v}-unknown-group", req(A.LEAVE_GROUP, v, leave_body("{s}", "m-1"))))
    out.append(
        sc(
            "join_group-v5-inconsistent-protocol-type",
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            *join_steps(5, "{s}"),
            req(A.JOIN_GROUP, 5, join_body("{s}", protocol_type="connect")),
        )
    )
    out.append(
        sc(
            "join_group-v5-protocol-type-mismatch-stable",
            req(A.JOIN_GROUP, 5, join_body("w-stable", protocol="roundrobin", protocol_type="connect")),
        )
    )
    out.append(sc("join_group-v5-invalid-group-id", req(A.JOIN_GROUP, 5, join_body(""))))
    out.append(sc("join_group-v5-no-protocols", req(A.JOIN_GROUP, 5, {**join_body("{s}"), "protocols": []})))
    for v in versions(A.DESCRIBE_GROUPS):
        out.append(
            sc(
                f"describe_groups-v{v}",
                req(
                    A.DESCRIBE_GROUPS,
                    v,
                    {"groups": ["w-group", "w-stable", "no-such-group"], "include_authorized_operations": v >= 3},
                ),
            )
        )
    # a consumer group (KIP-848) described by the classic API (v6: GROUP_ID_NOT_FOUND)
    for v in sorted({5, SUPPORTED_RANGE[A.DESCRIBE_GROUPS][1]}):
        out.append(
            sc(
                f"describe_groups-v{v}-consumer-group",
                setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
                req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-m", 0, ["w-one"]), compare=False),
                req(A.DESCRIBE_GROUPS, v, {"groups": ["{s}"], "include_authorized_operations": False}),
            )
        )
    for v in versions(A.LIST_GROUPS):
        out.append(sc(f"list_groups-v{v}", req(A.LIST_GROUPS, v, {"states_filter": [], "types_filter": []})))
    out.append(sc("list_groups-v4-stable-filter", req(A.LIST_GROUPS, 4, {"states_filter": ["Stable"]})))
    out.append(sc("list_groups-v4-empty-filter", req(A.LIST_GROUPS, 4, {"states_filter": ["Empty"]})))
    out.append(
        sc("list_groups-v5-classic-filter", req(A.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]}))
    )
    out.append(
        sc("list_groups-v5-consumer-filter", req(A.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]}))
    )
    for v in versions(A.DELETE_GROUPS):
        out.append(
            sc(
                f"delete_groups-v{v}",
                setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
                req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 3), compare=False),
                req(A.DELETE_GROUPS, v, {"groups_names": ["{s}", "no-such-group", "w-stable"]}),
                req(A.OFFSET_FETCH, 8, offset_fetch_body(8, "{s}", [("w-one", [0])])),
            )
        )
    out.append(
        sc(
            "offset_delete-v0-empty-group",
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            req(A.OFFSET_COMMIT, 8, {**commit_body("{s}", "w-one", 0, 3)}, compare=False),
            req(
                A.OFFSET_DELETE,
                0,
                {"group_id": "{s}", "topics": [{"name": "w-one", "partitions": [{"partition_index": 0}]}]},
            ),
            req(A.OFFSET_FETCH, 8, offset_fetch_body(8, "{s}", [("w-one", [0])])),
        )
    )
    out.append(
        sc(
            "offset_delete-v0-subscribed-topic",
            req(
                A.OFFSET_DELETE,
                0,
                {"group_id": "w-stable", "topics": [{"name": "w-one", "partitions": [{"partition_index": 0}]}]},
            ),
        )
    )
    out.append(
        sc(
            "offset_delete-v0-unknown-group",
            req(
                A.OFFSET_DELETE,
                0,
                {"group_id": "{s}", "topics": [{"name": "w-one", "partitions": [{"partition_index": 0}]}]},
            ),
        )
    )
    out.append(
        sc(
            "offset_delete-v0-unknown-topic",
            req(
                A.OFFSET_DELETE,
                0,
                {
                    "group_id": "w-group",
                    "topics": [{"name": "no-such-topic-at-all", "partitions": [{"partition_index": 0}]}],
                },
            ),
        )
    )
    return out


# ConsumerProtocol bytes of a classic member subscribed to w-migrate (2 partitions; subscription v1,
# no owned partitions) and of its assignment (both partitions), as the Java client writes them.
# Two partitions for two members: Kafka's uniform assignor gives the extra partition of an odd
# count to whichever member its hash map yields first, which no other broker can repeat.
SUBSCRIPTION_V1 = b"\x00\x01\x00\x00\x00\x01\x00\x09w-migrate\xff\xff\xff\xff\x00\x00\x00\x00"
ASSIGNMENT_V1 = (
    b"\x00\x01\x00\x00\x00\x01\x00\x09w-migrate\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff"
)


def migration_join(
    group: str,
    member: str = "",
    protocol_type: str = "consumer",
    metadata: bytes = SUBSCRIPTION_V1,
    protocol: str = "range",
) -> dict:
    return {
        **join_body(group, member, protocol=protocol, protocol_type=protocol_type),
        "protocols": [{"name": protocol, "metadata": metadata}],
    }


def cg_heartbeat(group: str, member: str, epoch: int, topics: list[str] | None = None) -> dict:
    return {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30_000 if epoch == 0 else -1,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [] if epoch == 0 else None,
    }


def classic_member_steps(group: str, protocol_type: str = "consumer", metadata: bytes = SUBSCRIPTION_V1) -> list[Step]:
    """A classic member joins and syncs (Stable, generation 1), holding w-one partition 0."""
    return [
        setup(A.FIND_COORDINATOR, 3, {"key": group, "key_type": 0}),
        req(
            A.JOIN_GROUP,
            5,
            migration_join(group, protocol_type=protocol_type, metadata=metadata),
            capture={"member": "member_id"},
        ),
        req(
            A.JOIN_GROUP,
            5,
            migration_join(group, "$member", protocol_type=protocol_type, metadata=metadata),
            capture={"generation": "generation_id"},
        ),
        req(
            A.SYNC_GROUP,
            5,
            {
                **sync_body(group),
                "protocol_type": protocol_type,
                "assignments": [{"member_id": "$member", "assignment": ASSIGNMENT_V1}],
            },
        ),
    ]


def group_migration() -> list[Scenario]:
    """Kafka 4.0's online migration (group.consumer.migration.policy=bidirectional, its default)."""

    # every ConsumerGroupDescribe version (v1: each member's type, classic or consumer), and
    # DescribeGroups v5 and its newest (v6: GROUP_ID_NOT_FOUND for a consumer group)
    def describe() -> list[Step]:
        return [
            req(
                A.CONSUMER_GROUP_DESCRIBE,
                v,
                {
                    "group_ids": ["{s}"],
                    "include_authorized_operations": False,
                },
            )
            for v in versions(A.CONSUMER_GROUP_DESCRIBE)
        ]

    def classic_describe() -> list[Step]:
        return [
            req(
                A.DESCRIBE_GROUPS,
                v,
                {
                    "groups": ["{s}"],
                    "include_authorized_operations": False,
                },
            )
            for v in sorted({5, SUPPORTED_RANGE[A.DESCRIBE_GROUPS][1]})
        ]

    # ListGroups filtered to what this group should be (the run's other groups have their own findings)
    def listed(kind: str, state: str | None = None) -> Step:
        return req(
            A.LIST_GROUPS,
            5,
            {
                "states_filter": [state] if state else [],
                "types_filter": [kind],
            },
        )

    out = [
        sc(
            "group-migration-upgrade-then-downgrade-live-members",
            create_topic("w-migrate", 2),
            await_topic("w-migrate", 2),
            *classic_member_steps("{s}"),
            # a consumer-protocol member converts the live classic group
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-consumer-member", 0, ["w-migrate"])),
            listed("consumer"),
            *classic_describe(),
            *describe(),
            # the classic member is told to rejoin, rejoins with the new epoch, syncs its assignment
            req(A.HEARTBEAT, 4, heartbeat_body("{s}")),
            req(A.JOIN_GROUP, 5, migration_join("{s}", "$member"), capture={"generation": "generation_id"}),
            req(A.SYNC_GROUP, 5, {**sync_body("{s}"), "assignments": []}),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}")),
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-migrate", 0, 3, generation="$generation", member="$member")),
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-migrate", 0, 3, generation=1, member="$member")),
            *describe(),
            # the last consumer-protocol member leaves: a classic group again, rebalancing
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-consumer-member", -1)),
            listed("classic", "PreparingRebalance"),
            *classic_describe(),
            *describe(),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}")),
            req(A.JOIN_GROUP, 5, migration_join("{s}", "$member"), capture={"generation": "generation_id"}),
            req(
                A.SYNC_GROUP,
                5,
                {**sync_body("{s}"), "assignments": [{"member_id": "$member", "assignment": ASSIGNMENT_V1}]},
            ),
            *classic_describe(),
            req(A.OFFSET_FETCH, 8, offset_fetch_body(8, "{s}", [("w-migrate", [0])])),
        ),
        sc(
            "group-migration-refused-not-the-consumer-protocol",
            *classic_member_steps("{s}", protocol_type="connect"),
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-consumer-member", 0, ["w-migrate"])),
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-consumer-member", 1)),
            listed("classic", "Stable"),
        ),
        sc(
            "group-migration-refused-malformed-subscription",
            *classic_member_steps("{s}", metadata=b"\x00\x01\x00\x00"),
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-consumer-member", 0, ["w-migrate"])),
            listed("classic", "Stable"),
        ),
        sc(
            "group-migration-static-classic-member-replaces-the-last-consumer-one",
            *classic_member_steps("{s}"),
            req(
                A.CONSUMER_GROUP_HEARTBEAT,
                1,
                {**cg_heartbeat("{s}", "{s}-consumer-member", 0, ["w-migrate"]), "instance_id": "{s}-static"},
            ),
            # the static member restarts with the classic protocol: the group is classic again, Stable
            req(
                A.JOIN_GROUP,
                5,
                {**migration_join("{s}"), "group_instance_id": "{s}-static"},
                capture={"static": "member_id", "static_generation": "generation_id"},
            ),
            listed("classic", "Stable"),
            *classic_describe(),
            *describe(),
            req(
                A.SYNC_GROUP,
                5,
                {
                    **sync_body("{s}", "$static", "$static_generation"),
                    "group_instance_id": "{s}-static",
                    "assignments": [],
                },
            ),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}", "$static", "$static_generation")),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}")),
        ),
        sc(
            "offset_commit-v9-consumer-group-member-epochs",
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-m", 0, ["w-one"])),
            *[
                req(A.OFFSET_COMMIT, 9, commit_body("{s}", "w-one", 0, 3, generation=epoch, member=member))
                for epoch, member in ((1, "{s}-m"), (2, "{s}-m"), (0, "{s}-m"), (-1, "{s}-m"), (1, "{s}-other"))
            ],
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 3, generation=1, member="{s}-m")),
            *[
                req(
                    A.OFFSET_FETCH,
                    9,
                    {
                        "groups": [{"group_id": "{s}", "member_id": "{s}-m", "member_epoch": epoch, "topics": None}],
                        "require_stable": False,
                    },
                )
                for epoch in (2, 0)
            ],
        ),
        sc(
            "group-migration-classic-requests-to-a-consumer-group",
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            req(A.CONSUMER_GROUP_HEARTBEAT, 1, cg_heartbeat("{s}", "{s}-consumer-member", 0, ["w-migrate"])),
            req(A.JOIN_GROUP, 5, migration_join("{s}", protocol_type="connect")),
            req(A.JOIN_GROUP, 5, migration_join("{s}"), capture={"member": "member_id"}),
            req(A.JOIN_GROUP, 3, migration_join("{s}", protocol="roundrobin"), capture={"other": "member_id"}),
            req(
                A.JOIN_GROUP,
                5,
                migration_join("{s}", "$member", protocol="range"),
                capture={"generation": "generation_id"},
            ),
            req(A.SYNC_GROUP, 5, sync_body("{s}", "{s}-consumer-member", 1)),
            req(A.SYNC_GROUP, 5, {**sync_body("{s}"), "protocol_name": "roundrobin"}),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}", "{s}-consumer-member", 1)),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}", "$member", 99)),
            req(A.LEAVE_GROUP, 5, leave_body("{s}", "{s}-consumer-member")),
            req(A.LEAVE_GROUP, 5, leave_body("{s}", "$other")),
            *describe(),
        ),
    ]
    return out


def consumer_group_epochs() -> list[Scenario]:
    """KIP-848 heartbeats with epochs other than the member's, and classic members with a wrong
    generation: refused, the member stays; a regex subscription resolved after the answer naming it
    (run after the ListGroups scenarios, which would list these groups)."""

    def describe() -> Step:
        return req(
            A.CONSUMER_GROUP_DESCRIBE,
            0,
            {
                "group_ids": ["{s}"],
                "include_authorized_operations": False,
            },
        )

    def hb(
        member: str,
        epoch: Any,
        topics: list[str] | None = None,
        owned: list[int] | None = None,
        instance: str | None = None,
        regex: str | None = None,
        topic: str = "{s}",
        group: str = "{s}",
        **kw: Any,
    ) -> Step:
        body = cg_heartbeat(group, member, epoch, topics)
        if owned is not None:
            body["topic_partitions"] = [{"topic_id": "@tid:" + topic, "partitions": owned}] if owned else []
        return req(
            A.CONSUMER_GROUP_HEARTBEAT, 1, {**body, "instance_id": instance, "subscribed_topic_regex": regex}, **kw
        )

    topic = (create_topic("{s}", 2), await_topic("{s}", 2), setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}))
    txn = "{s}-txn"

    def txn_commit(
        group: str, generation: Any = -1, member: str = "", partitions: tuple[tuple[str, int], ...] = (("{s}", 0),)
    ) -> Step:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        return req(
            A.TXN_OFFSET_COMMIT,
            3,
            {
                "transactional_id": txn,
                "group_id": group,
                "producer_id": "$pid",
                "producer_epoch": "$epoch",
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": 1,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for p in ps
                        ],
                    }
                    for t, ps in by_topic.items()
                ],
            },
        )

    def add_offsets(group: str) -> Step:
        return req(
            A.ADD_OFFSETS_TO_TXN,
            3,
            {"transactional_id": txn, "producer_id": "$pid", "producer_epoch": "$epoch", "group_id": group},
        )

    groups = ("{s}-new", "{s}-cg", "{s}-classic", "{s}-gen")
    return [
        sc(
            "consumer_group_heartbeat-v1-fenced-member-epoch",
            *topic,
            hb("{s}-a", 0, ["{s}"]),
            hb("{s}-a", 0, ["{s}"]),  # its first answer lost: accepted, nothing changes
            hb("{s}-a", 7),  # ahead: fenced, the member stays
            describe(),
            hb("{s}-a", 1),
            hb("{s}-b", 0, ["{s}"]),
            hb("{s}-a", 1, owned=[0, 1]),  # told to revoke one partition
            hb("{s}-a", 1, owned=[0]),  # revoked: epoch 2, same partition (no assignment)
            hb("{s}-a", 0, ["{s}"]),  # a rejoin past its first epoch: fenced
            hb("{s}-a", 1, owned=[1]),  # its previous epoch owning what it no longer has
            describe(),
            hb("{s}-a", 1, owned=[0]),  # its previous epoch owning what it has: accepted
            hb("{s}-b", 2),
            req(A.OFFSET_COMMIT, 9, commit_body("{s}", "{s}", 0, 3, generation=1, member="{s}-a")),
            req(A.OFFSET_COMMIT, 9, commit_body("{s}", "{s}", 0, 3, generation=2, member="{s}-a")),
            hb("{s}-a", -1),
            describe(),
        ),
        sc(
            "consumer_group_heartbeat-v1-static-member-epochs",
            *topic,
            hb("{s}-a", 0, ["{s}"], instance="{s}-i"),
            hb("{s}-a", 0, ["{s}"], instance="{s}-i"),  # the instance id is held, even for its own id
            hb("{s}-b", 0, ["{s}"], instance="{s}-i"),
            hb("{s}-b", 1, instance="{s}-i"),  # another member id: fenced instance
            hb("{s}-a", 1, instance="{s}-other"),  # an unknown instance id
            hb("{s}-a", 5, instance="{s}-i"),
            describe(),
            hb("{s}-a", -2, instance="{s}-i"),  # away for now
            hb("{s}-a", 1, instance="{s}-i"),  # away: fenced until it rejoins
            hb("{s}-a", 0, ["{s}"], instance="{s}-i"),  # back under the same id, its epoch and partitions kept
            describe(),
        ),
        # Kafka resolves a regex no member used before after answering the heartbeat naming it (the
        # group's first regex at once; later ones batched at most every 10 s, not compared here)
        sc(
            "consumer_group_heartbeat-v1-regex-subscription",
            create_topic("{s}-t", 2),
            await_topic("{s}-t", 2),
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            hb("{s}-a", 0, [], regex="{s}-.*", capture={"a": "member_epoch"}),
            hb("{s}-a", "$a", owned=[], topic="{s}-t", capture={"a": "member_epoch"}, pause_s=0.5),
            describe(),
            hb("{s}-b", 0, [], regex="{s}-.*", capture={"b": "member_epoch"}),  # resolved already: at once
            hb("{s}-a", "$a", owned=[0, 1], topic="{s}-t"),
            hb("{s}-b", "$b", owned=[], topic="{s}-t"),
            describe(),
        ),
        # TxnOffsetCommit checks a member only when the request names one (id, instance or
        # generation); a generation for a group that does not exist is refused, without one the
        # group is created; partitions that do not exist are answered first, before the producer
        sc(
            "txn_offset_commit-v3-group-and-member-checks",
            *topic,
            setup(A.FIND_COORDINATOR, 3, {"key": txn, "key_type": 1}),
            *[setup(A.FIND_COORDINATOR, 3, {"key": g, "key_type": 0}) for g in groups],
            req(
                A.INIT_PRODUCER_ID,
                4,
                {"transactional_id": txn, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
                capture={"pid": "producer_id", "epoch": "producer_epoch"},
                until_ok=True,
            ),
            txn_commit("{s}-new", partitions=(("{s}", 0), ("{s}", 5), ("{s}-no-such-topic", 0))),  # not added yet
            txn_commit("{s}-new", partitions=(("{s}-no-such-topic", 0),)),
            hb("{s}-m", 0, ["{s}"], group="{s}-cg"),
            *join_steps(5, "{s}-classic"),
            req(A.SYNC_GROUP, 5, sync_body("{s}-classic")),
            *[add_offsets(g) for g in groups],
            txn_commit("{s}-gen", generation=3, member="x"),
            txn_commit("{s}-new", partitions=(("{s}", 0), ("{s}", 5))),
            req(A.DESCRIBE_GROUPS, 5, {"groups": ["{s}-new", "{s}-gen"], "include_authorized_operations": False}),
            txn_commit("{s}-cg"),
            txn_commit("{s}-cg", member="{s}-m"),
            txn_commit("{s}-cg", 1, "{s}-m"),
            txn_commit("{s}-classic"),
            txn_commit("{s}-classic", member="unknown"),
            txn_commit("{s}-classic", member="$member"),
            txn_commit("{s}-classic", "$generation", "$member"),
            req(
                A.END_TXN,
                3,
                {"transactional_id": txn, "producer_id": "$pid", "producer_epoch": "$epoch", "committed": False},
            ),
            req(A.DESCRIBE_GROUPS, 5, {"groups": ["{s}-new"], "include_authorized_operations": False}),
        ),
        sc(
            "heartbeat-v4-illegal-generation-member-stays",
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            *join_steps(5, "{s}"),
            req(A.SYNC_GROUP, 5, sync_body("{s}")),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}", generation=99)),
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 3, generation=99, member="$member")),
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 3, generation=0, member="$member")),
            # a partition that does not exist is answered so before the generation is checked
            req(
                A.OFFSET_COMMIT,
                8,
                {
                    **commit_body("{s}", "w-one", 0, 3, generation=99, member="$member"),
                    "topics": [
                        {
                            "name": t,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "committed_offset": 3,
                                    "committed_leader_epoch": -1,
                                    "commit_timestamp": -1,
                                    "committed_metadata": "m",
                                }
                            ],
                        }
                        for t, p in (("w-one", 0), ("w-one", 7), ("{s}-no-such-topic", 0))
                    ],
                },
            ),
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "{s}-no-such-topic", 0, 3, generation=99, member="$member")),
            req(A.DESCRIBE_GROUPS, 5, {"groups": ["{s}"], "include_authorized_operations": False}),
            req(A.HEARTBEAT, 4, heartbeat_body("{s}")),
            req(A.OFFSET_COMMIT, 8, commit_body("{s}", "w-one", 0, 3, generation="$generation", member="$member")),
        ),
    ]


def topics_admin() -> list[Scenario]:
    out = []
    for v in versions(A.CREATE_TOPICS):
        out.append(
            sc(
                f"create_topics-v{v}",
                create_topic("{s}", 2, {"retention.ms": "3600000"}, compare=True, version=v),
                await_topic("{s}"),
                describe_topic("{s}"),
            )
        )
        out.append(sc(f"create_topics-v{v}-already-exists", create_topic("w-one", 1, compare=True, version=v)))
        out.append(sc(f"create_topics-v{v}-invalid-name", create_topic("bad name!", 1, compare=True, version=v)))
        out.append(sc(f"create_topics-v{v}-zero-partitions", create_topic("{s}", 0, compare=True, version=v)))
        out.append(
            sc(
                f"create_topics-v{v}-invalid-config",
                create_topic("{s}", 1, {"cleanup.policy": "sometimes"}, compare=True, version=v),
            )
        )
        if v >= 1:
            out.append(
                sc(
                    f"create_topics-v{v}-validate-only",
                    req(
                        A.CREATE_TOPICS,
                        v,
                        {
                            "topics": [
                                {
                                    "name": "{s}",
                                    "num_partitions": 3,
                                    "replication_factor": 1,
                                    "assignments": [],
                                    "configs": [],
                                }
                            ],
                            "timeout_ms": 10_000,
                            "validate_only": True,
                        },
                    ),
                    req(A.METADATA, 12, {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False}),
                )
            )
    for label, topic in (
        ("replication-factor-too-large", {"num_partitions": 1, "replication_factor": 3}),
        (
            "unknown-config",
            {"num_partitions": 1, "replication_factor": 1, "configs": [{"name": "no.such.config", "value": "1"}]},
        ),
        ("default-partitions", {"num_partitions": -1, "replication_factor": -1}),
        (
            "manual-assignment",
            {
                "num_partitions": -1,
                "replication_factor": -1,
                "assignments": [
                    {"partition_index": 0, "broker_ids": ["$node"]},
                    {"partition_index": 1, "broker_ids": ["$node"]},
                ],
            },
        ),
        (
            "assignment-unknown-broker",
            {
                "num_partitions": -1,
                "replication_factor": -1,
                "assignments": [{"partition_index": 0, "broker_ids": [77]}],
            },
        ),
        ("negative-partitions", {"num_partitions": -5, "replication_factor": 1}),
        ("name-too-long", {"name": "t" * 250, "num_partitions": 1, "replication_factor": 1}),
        ("name-dot", {"name": ".", "num_partitions": 1, "replication_factor": 1}),
        (
            "invalid-retention",
            {"num_partitions": 1, "replication_factor": 1, "configs": [{"name": "retention.ms", "value": "soon"}]},
        ),
        (
            "min-insync-too-large",
            {"num_partitions": 1, "replication_factor": 1, "configs": [{"name": "min.insync.replicas", "value": "0"}]},
        ),
    ):
        entry = {"name": "{s}", "assignments": [], "configs": [], **topic}
        steps = [req(A.CREATE_TOPICS, 7, {"topics": [entry], "timeout_ms": 10_000, "validate_only": False})]
        if "$node" in repr(entry):
            steps.insert(0, req(A.DESCRIBE_CLUSTER, 0, {}, capture={"node": "controller_id"}, compare=False))
            steps.append(await_topic("{s}"))
            steps.append(req(A.METADATA, 12, {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False}))
        out.append(sc(f"create_topics-v7-{label}", *steps))
    out.extend(manual_assignments())
    out.append(
        sc(
            "create_topics-v7-duplicate-in-request",
            req(
                A.CREATE_TOPICS,
                7,
                {
                    "topics": [
                        {"name": "{s}", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                    ]
                    * 2,
                    "timeout_ms": 10_000,
                },
            ),
        )
    )
    for v in versions(A.DELETE_TOPICS):
        if v >= 6:
            body = {"topics": [{"name": "{s}", "topic_id": bytes(16)}], "timeout_ms": 10_000}
        else:
            body = {"topic_names": ["{s}"], "timeout_ms": 10_000}
        out.append(
            sc(
                f"delete_topics-v{v}",
                create_topic("{s}"),
                await_topic("{s}"),
                req(A.DELETE_TOPICS, v, body),
                req(
                    A.METADATA,
                    12,
                    {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False},
                    until_has="'error_code': 3",
                ),
            )
        )
        unknown = (
            {"topics": [{"name": "no-such-topic-at-all", "topic_id": bytes(16)}], "timeout_ms": 10_000}
            if v >= 6
            else {"topic_names": ["no-such-topic-at-all"], "timeout_ms": 10_000}
        )
        out.append(sc(f"delete_topics-v{v}-unknown-topic", req(A.DELETE_TOPICS, v, unknown)))
    out.append(
        sc(
            "delete_topics-v6-by-id",
            create_topic("{s}"),
            await_topic("{s}"),
            req(A.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": "@tid:{s}"}], "timeout_ms": 10_000}),
        )
    )
    out.append(
        sc(
            "delete_topics-v6-unknown-id",
            req(A.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": b"\x03" * 16}], "timeout_ms": 10_000}),
        )
    )
    out.append(
        sc(
            "delete_topics-v6-internal-topic",
            req(
                A.DELETE_TOPICS,
                6,
                {"topics": [{"name": "__consumer_offsets", "topic_id": bytes(16)}], "timeout_ms": 10_000},
            ),
        )
    )
    for v in versions(A.CREATE_PARTITIONS):
        out.append(
            sc(
                f"create_partitions-v{v}",
                create_topic("{s}"),
                await_topic("{s}"),
                req(
                    A.CREATE_PARTITIONS,
                    v,
                    {
                        "topics": [{"name": "{s}", "count": 3, "assignments": None}],
                        "timeout_ms": 10_000,
                        "validate_only": False,
                    },
                ),
                req(
                    A.METADATA,
                    12,
                    {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False},
                    until_has="'partition_index': 2",
                ),
            )
        )
    for label, count, topic in (
        ("decrease", 1, "w-three"),
        ("same-count", 3, "w-three"),
        ("unknown-topic", 2, "no-such-topic-at-all"),
        ("too-many-assignments", 5, "w-one"),
    ):
        assignments = [{"broker_ids": [1]}] if label == "too-many-assignments" else None
        out.append(
            sc(
                f"create_partitions-v3-{label}",
                req(
                    A.CREATE_PARTITIONS,
                    3,
                    {
                        "topics": [{"name": topic, "count": count, "assignments": assignments}],
                        "timeout_ms": 10_000,
                        "validate_only": False,
                    },
                ),
            )
        )
    out.append(
        sc(
            "create_partitions-v3-validate-only",
            req(
                A.CREATE_PARTITIONS,
                3,
                {
                    "topics": [{"name": "w-one", "count": 4, "assignments": None}],
                    "timeout_ms": 10_000,
                    "validate_only": True,
                },
            ),
            req(A.METADATA, 12, {"topics": [{"name": "w-one"}], "allow_auto_topic_creation": False}),
        )
    )
    out.append(
        sc(
            "create_partitions-v3-duplicate-topic",
            req(
                A.CREATE_PARTITIONS,
                3,
                {"topics": [{"name": "w-three", "count": 4, "assignments": None}] * 2, "timeout_ms": 10_000},
            ),
        )
    )
    return out


def manual_assignments() -> list[Scenario]:
    """CreateTopics and CreatePartitions with a manual replica assignment: Kafka's refusals (each
    checked to have created or grown nothing), validate_only, and assignments that work."""
    node = req(A.DESCRIBE_CLUSTER, 0, {}, capture={"node": "controller_id"}, compare=False)
    described = req(A.METADATA, 12, {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False})

    def assigned(*lists: list) -> list[dict]:
        return [{"partition_index": p, "broker_ids": ids} for p, ids in lists]

    out = []
    for label, topic in (
        ("duplicate-broker", {"assignments": assigned((0, ["$node", "$node"]))}),
        ("empty-replicas", {"assignments": assigned((0, []))}),
        ("gap", {"assignments": assigned((0, ["$node"]), (2, ["$node"]))}),
        ("not-from-zero", {"assignments": assigned((1, ["$node"]))}),
        ("partition-twice", {"assignments": assigned((0, ["$node"]), (0, ["$node"]))}),
        ("unknown-and-known", {"assignments": assigned((0, ["$node"]), (1, ["$node", 77]))}),
        ("with-partition-count", {"num_partitions": 2, "assignments": assigned((0, ["$node"]))}),
        ("with-replication-factor", {"replication_factor": 1, "assignments": assigned((0, ["$node"]))}),
        (
            "and-invalid-config",
            {"assignments": assigned((0, [77])), "configs": [{"name": "cleanup.policy", "value": "sometimes"}]},
        ),
    ):
        entry = {
            "name": "{s}",
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": [],
            "configs": [],
            **topic,
        }
        out.append(
            sc(
                f"create_topics-v7-assignment-{label}",
                node,
                req(A.CREATE_TOPICS, 7, {"topics": [entry], "timeout_ms": 10_000, "validate_only": False}),
                described,
            )
        )
    out.append(
        sc(
            "create_topics-v7-assignment-validate-only",
            node,
            req(
                A.CREATE_TOPICS,
                7,
                {
                    "topics": [
                        {
                            "name": "{s}",
                            "num_partitions": -1,
                            "replication_factor": -1,
                            "configs": [],
                            "assignments": assigned((1, ["$node"]), (0, ["$node"])),
                        }
                    ],
                    "timeout_ms": 10_000,
                    "validate_only": True,
                },
            ),
            described,
        )
    )

    def grow(count: int, assignments: list | None, validate_only: bool = False) -> Step:
        return req(
            A.CREATE_PARTITIONS,
            3,
            {
                "topics": [
                    {
                        "name": "{s}",
                        "count": count,
                        "assignments": None if assignments is None else [{"broker_ids": b} for b in assignments],
                    }
                ],
                "timeout_ms": 10_000,
                "validate_only": validate_only,
            },
        )

    out.append(
        sc(
            "create_partitions-v3-manual-assignment",
            node,
            create_topic("{s}"),
            await_topic("{s}"),
            grow(3, [["$node"], ["$node"]]),
            req(
                A.METADATA,
                12,
                {"topics": [{"name": "{s}"}], "allow_auto_topic_creation": False},
                until_has="'partition_index': 2",
            ),
        )
    )
    for label, count, assignments, validate_only in (
        ("assignment-unknown-broker", 2, [[77]], False),
        ("assignment-duplicate-broker", 2, [["$node", "$node"]], False),
        ("assignment-empty-replicas", 2, [[]], False),
        ("assignment-too-few", 3, [["$node"]], False),
        ("assignment-empty-list", 2, [], False),
        ("assignment-replication-factor", 2, [["$node", 77]], False),
        ("assignment-validate-only", 3, [["$node"], ["$node"]], True),
        ("assignment-validate-only-unknown-broker", 2, [[77]], True),
        ("assignment-same-count", 1, [["$node"]], False),
    ):
        out.append(
            sc(
                f"create_partitions-v3-{label}",
                node,
                create_topic("{s}"),
                await_topic("{s}"),
                grow(count, assignments, validate_only),
                described,
            )
        )
    return out


def configs() -> list[Scenario]:
    out = []
    for v in versions(A.DESCRIBE_CONFIGS):
        out.append(
            sc(
                f"describe_configs-v{v}-topic-keys",
                req(A.DESCRIBE_CONFIGS, v, describe_configs_body(TOPIC, "w-compact", TOPIC_KEYS, synonyms=v >= 1)),
            )
        )
        out.append(
            sc(
                f"describe_configs-v{v}-unknown-topic",
                req(A.DESCRIBE_CONFIGS, v, describe_configs_body(TOPIC, "no-such-topic-at-all", None)),
            )
        )
        # the broker resource is named by its node id as text: learn it first
        out.append(
            sc(
                f"describe_configs-v{v}-broker-keys",
                req(A.DESCRIBE_CLUSTER, 0, {}, capture={"node_str": "controller_id"}, compare=False),
                req(
                    A.DESCRIBE_CONFIGS,
                    v,
                    describe_configs_body(
                        BROKER,
                        "$node_str",
                        ["num.partitions", "auto.create.topics.enable", "log.retention.hours", "message.max.bytes"],
                        synonyms=v >= 1,
                    ),
                ),
            )
        )
    out.append(
        sc(
            "describe_configs-v4-all-topic-configs",
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(TOPIC, "w-one", None)),
        )
    )
    out.append(
        sc(
            "describe_configs-v4-unknown-key",
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(TOPIC, "w-one", ["no.such.config"])),
        )
    )
    out.append(
        sc(
            "describe_configs-v4-invalid-resource-type",
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(9, "w-one", None)),
        )
    )
    out.append(
        sc(
            "describe_configs-v4-unknown-broker",
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "77", ["num.partitions"])),
        )
    )
    out.append(
        sc(
            "describe_configs-v4-bad-broker-name",
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "abc", ["num.partitions"])),
        )
    )
    for v in versions(A.ALTER_CONFIGS):
        out.append(
            sc(
                f"alter_configs-v{v}",
                create_topic("{s}"),
                await_topic("{s}"),
                req(
                    A.ALTER_CONFIGS,
                    v,
                    {
                        "resources": [
                            {
                                "resource_type": TOPIC,
                                "resource_name": "{s}",
                                "configs": [
                                    {"name": "retention.ms", "value": "7200000"},
                                    {"name": "cleanup.policy", "value": "compact"},
                                ],
                            }
                        ],
                        "validate_only": False,
                    },
                ),
                describe_topic("{s}", has="'7200000'"),
            )
        )
        out.append(
            sc(
                f"alter_configs-v{v}-invalid-value",
                req(
                    A.ALTER_CONFIGS,
                    v,
                    {
                        "resources": [
                            {
                                "resource_type": TOPIC,
                                "resource_name": "w-empty",
                                "configs": [{"name": "retention.ms", "value": "not-a-number"}],
                            }
                        ],
                        "validate_only": False,
                    },
                ),
                describe_topic("w-empty"),
            )
        )
        out.append(
            sc(
                f"alter_configs-v{v}-unknown-topic",
                req(
                    A.ALTER_CONFIGS,
                    v,
                    {
                        "resources": [
                            {
                                "resource_type": TOPIC,
                                "resource_name": "no-such-topic-at-all",
                                "configs": [{"name": "retention.ms", "value": "1000"}],
                            }
                        ],
                        "validate_only": False,
                    },
                ),
            )
        )
    out.append(
        sc(
            "alter_configs-v2-unknown-key",
            req(
                A.ALTER_CONFIGS,
                2,
                {
                    "resources": [
                        {
                            "resource_type": TOPIC,
                            "resource_name": "w-empty",
                            "configs": [{"name": "no.such.config", "value": "1"}],
                        }
                    ],
                    "validate_only": False,
                },
            ),
        )
    )
    out.append(
        sc(
            "alter_configs-v2-validate-only",
            req(
                A.ALTER_CONFIGS,
                2,
                {
                    "resources": [
                        {
                            "resource_type": TOPIC,
                            "resource_name": "w-empty",
                            "configs": [{"name": "retention.ms", "value": "1000"}],
                        }
                    ],
                    "validate_only": True,
                },
            ),
            describe_topic("w-empty"),
        )
    )
    out.append(
        sc(
            "alter_configs-v2-invalid-resource-type",
            req(
                A.ALTER_CONFIGS,
                2,
                {
                    "resources": [{"resource_type": 9, "resource_name": "w-empty", "configs": []}],
                    "validate_only": False,
                },
            ),
        )
    )
    for v in versions(A.INCREMENTAL_ALTER_CONFIGS):

        def inc(name: str, ops: list[tuple[str, int, str | None]], validate: bool = False, rtype: int = TOPIC) -> Step:
            return req(
                A.INCREMENTAL_ALTER_CONFIGS,
                v,  # noqa: B023  inc() is called in this iteration only
                {
                    "resources": [
                        {
                            "resource_type": rtype,
                            "resource_name": name,
                            "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops],
                        }
                    ],
                    "validate_only": validate,
                },
            )

        out.append(
            sc(
                f"incremental_alter_configs-v{v}-set-delete",
                create_topic("{s}"),
                await_topic("{s}"),
                inc("{s}", [("retention.ms", 0, "5000000"), ("max.message.bytes", 0, "2048")]),
                describe_topic("{s}", has="'5000000'"),
                inc("{s}", [("retention.ms", 1, None)]),
                describe_topic("{s}", lacks="'5000000'"),
            )
        )
        out.append(
            sc(
                f"incremental_alter_configs-v{v}-append-subtract",
                create_topic("{s}"),
                await_topic("{s}"),
                inc("{s}", [("cleanup.policy", 2, "compact")]),
                describe_topic("{s}", has="'delete,compact'"),
                inc("{s}", [("cleanup.policy", 3, "delete")]),
                describe_topic("{s}", lacks="'delete,compact'"),
            )
        )
        out.append(
            sc(
                f"incremental_alter_configs-v{v}-invalid-value",
                inc("w-empty", [("retention.ms", 0, "x")]),
                describe_topic("w-empty"),
            )
        )
        out.append(sc(f"incremental_alter_configs-v{v}-unknown-key", inc("w-empty", [("no.such.config", 0, "1")])))
        out.append(
            sc(f"incremental_alter_configs-v{v}-unknown-topic", inc("no-such-topic-at-all", [("retention.ms", 0, "1")]))
        )
        out.append(sc(f"incremental_alter_configs-v{v}-invalid-operation", inc("w-empty", [("retention.ms", 9, "1")])))
        out.append(sc(f"incremental_alter_configs-v{v}-append-to-non-list", inc("w-empty", [("retention.ms", 2, "1")])))
        out.append(
            sc(
                f"incremental_alter_configs-v{v}-validate-only",
                inc("w-empty", [("retention.ms", 0, "1000")], True),
                describe_topic("w-empty"),
            )
        )
        out.append(
            sc(
                f"incremental_alter_configs-v{v}-duplicate-key",
                inc("w-empty", [("retention.ms", 0, "1000"), ("retention.ms", 0, "2000")]),
            )
        )
    return out


def _quota_entry(entity: list[tuple[str, str | None]], ops: list[tuple[str, float | None]]) -> dict:
    return {
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
        "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops],
    }


def alter_quotas(*entries: dict, **kw: Any) -> Step:
    return req(A.ALTER_CLIENT_QUOTAS, 1, {"entries": list(entries), "validate_only": False}, **kw)


def describe_quotas(components: list[tuple[str, int, str | None]], strict: bool = False, **kw: Any) -> Step:
    return req(
        A.DESCRIBE_CLIENT_QUOTAS,
        1,
        {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components], "strict": strict},
        **kw,
    )


def create_many(version: int, topics: list[tuple[str, int]], **kw: Any) -> Step:
    body = {
        "topics": [
            {"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
            for n, p in topics
        ],
        "timeout_ms": 5000,
        "validate_only": False,
    }
    return req(A.CREATE_TOPICS, version, body, **kw)


def quotas_and_throttles() -> list[Scenario]:
    """Client quotas of IPs (connection_creation_rate), the controller mutation quota
    (controller_mutation_rate: strict THROTTLING_QUOTA_EXCEEDED from CreateTopics v6, CreatePartitions
    v3 and DeleteTopics v5, only throttled before), dynamic broker configs (the replication throttle
    rates, max.connection.creation.rate) and the topics' throttled replica lists."""
    out = []
    ccr = "connection_creation_rate"
    # IP quotas are set on addresses the run never connects from: it keeps connecting from 127.0.0.1.
    # One entity per request and per answer: Kafka answers several in no fixed order (and the parts
    # of an ip+user entity, refused, too: that refusal is checked by the unit tests).
    ips = [("127.0.0.2", 7.0), ("::2", 9.0), ("localhost", 3.0)]
    out.append(
        sc(
            "client_quotas-ip-entities",
            *[alter_quotas(_quota_entry([("ip", ip)], [(ccr, v)])) for ip, v in ips],
            *[describe_quotas([("ip", 0, ip)], strict=True, until_has=repr(v)) for ip, v in ips],
            describe_quotas([("ip", 1, None)]),
            describe_quotas([("ip", 0, "127.0.0.2"), ("user", 2, None)]),
            *[alter_quotas(_quota_entry([("ip", ip)], [(ccr, None)])) for ip, _ in ips],
            *[describe_quotas([("ip", 0, ip)], strict=True, until_lacks=repr(v)) for ip, v in ips],
        )
    )
    out.append(
        sc(
            "client_quotas-ip-errors",
            *[
                alter_quotas(_quota_entry(entity, ops))
                for entity, ops in [
                    ([("ip", "127.0.0.2")], [(ccr, 2.5)]),
                    ([("ip", "not-an-ip")], [(ccr, 5.0)]),
                    ([("ip", "127.0.0.2")], [("producer_byte_rate", 5.0)]),
                    ([("user", "{s}")], [(ccr, 5.0)]),
                    ([("ip", "127.0.0.3")], [(ccr, 0.0)]),
                ]
            ],
            describe_quotas([("ip", 0, "127.0.0.2")]),
        )
    )
    # Only a creation that passes its checks takes credits (a fresh quota on the run's user, so a
    # full burst of 11): the existing, badly configured and empty topics take none.
    anonymous = [("user", "ANONYMOUS")]
    out.append(
        sc(
            "controller_mutation_quota-checks-come-first",
            alter_quotas(_quota_entry(anonymous, [("controller_mutation_rate", 1.0)])),
            describe_quotas([("user", 0, "ANONYMOUS")], strict=True, until_has="controller_mutation_rate"),
            req(
                A.CREATE_TOPICS,
                7,
                {
                    "topics": [
                        {"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": c}
                        for n, p, c in [
                            ("w-one", 11, []),
                            ("{s}-bad", 11, [{"name": "retention.ms", "value": "x"}]),
                            ("{s}-none", 0, []),
                            ("{s}-fits", 11, []),
                            ("{s}-last", 1, []),
                            ("{s}-after", 1, []),
                        ]
                    ],
                    "timeout_ms": 5000,
                    "validate_only": False,
                },
                pause_s=0.5,
            ),
            alter_quotas(_quota_entry(anonymous, [("controller_mutation_rate", None)])),
            describe_quotas([("user", 0, "ANONYMOUS")], strict=True, until_lacks="controller_mutation_rate"),
        )
    )
    # A controller mutation quota of 1 partition a second on this run's own client id (a burst of
    # 11 credits with Kafka's default 11 one-second samples), removed at the end. Each step starts
    # where the credits are known: after the mute of the step before, plus a pause.
    me = [("client-id", CLIENT_ID)]
    rate = "controller_mutation_rate"
    out.append(
        sc(
            "controller_mutation_quota",
            alter_quotas(_quota_entry(me, [(rate, 1.0)])),
            describe_quotas([("client-id", 0, CLIENT_ID)], strict=True, until_has="controller_mutation_rate"),
            # 9 + 1 + 1 empty the burst, the fourth topic takes it below zero, the fifth is refused
            create_many(7, [("{s}-z", 9), ("{s}-x", 1), ("{s}-y", 1), ("{s}-w", 1), ("{s}-v", 1)], pause_s=0.5),
            # 2 s later the credits are back at +1: x takes them below zero, y is refused
            req(
                A.CREATE_PARTITIONS,
                3,
                {
                    "topics": [
                        {"name": "{s}-x", "count": 4, "assignments": None},
                        {"name": "{s}-y", "count": 2, "assignments": None},
                    ],
                    "timeout_ms": 5000,
                    "validate_only": False,
                },
                pause_s=2.0,
            ),
            # 3 s later the credits are back at +1: x is deleted and takes them below zero
            # (Kafka's controller takes the topics of one DeleteTopics in no fixed order, so a
            # refusal among several is not compared here; the unit tests check it)
            req(
                A.DELETE_TOPICS,
                6,
                {"topics": [{"name": "{s}-x", "topic_id": bytes(16)}], "timeout_ms": 5000},
                pause_s=3.0,
            ),
            # older versions are served while over the quota, only throttled
            create_many(5, [("{s}-u", 1)]),
            req(A.DELETE_TOPICS, 4, {"topic_names": ["{s}-u"], "timeout_ms": 5000}),
            alter_quotas(_quota_entry(me, [(rate, None)])),
            describe_quotas([("client-id", 0, CLIENT_ID)], strict=True, until_lacks="controller_mutation_rate"),
            create_many(7, [("{s}-t", 12)], pause_s=0.5),
        )
    )

    def inc(name: str, ops: list[tuple[str, int, str | None]], rtype: int = BROKER, **kw: Any) -> Step:
        return req(
            A.INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": rtype,
                        "resource_name": name,
                        "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops],
                    }
                ],
                "validate_only": False,
            },
            **kw,
        )

    node = req(A.DESCRIBE_CLUSTER, 0, {}, capture={"node_str": "controller_id"}, compare=False)
    rates = ["leader.replication.throttled.rate", "follower.replication.throttled.rate", "max.connection.creation.rate"]
    out.append(
        sc(
            "broker_dynamic_configs-replication-throttles",
            node,
            inc(
                "$node_str",
                [("leader.replication.throttled.rate", 0, "1000"), ("follower.replication.throttled.rate", 0, "2000")],
            ),
            req(
                A.DESCRIBE_CONFIGS,
                4,
                describe_configs_body(BROKER, "$node_str", rates[:2], synonyms=True),
                until_has="'2000'",
            ),
            inc(
                "$node_str",
                [("leader.replication.throttled.rate", 1, None), ("follower.replication.throttled.rate", 1, None)],
            ),
            req(
                A.DESCRIBE_CONFIGS,
                4,
                describe_configs_body(BROKER, "$node_str", rates[:2], synonyms=True),
                until_lacks="'2000'",
            ),
            req(
                A.ALTER_CONFIGS,
                2,
                {
                    "resources": [
                        {
                            "resource_type": BROKER,
                            "resource_name": "$node_str",
                            "configs": [{"name": "leader.replication.throttled.rate", "value": "77"}],
                        }
                    ],
                    "validate_only": False,
                },
            ),
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "$node_str", rates[:1]), until_has="'77'"),
            req(
                A.ALTER_CONFIGS,
                2,
                {
                    "resources": [{"resource_type": BROKER, "resource_name": "$node_str", "configs": []}],
                    "validate_only": False,
                },
            ),
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "$node_str", rates[:1]), until_lacks="'77'"),
        )
    )
    out.append(
        sc(
            "broker_dynamic_configs-cluster-default",
            inc("", [("follower.replication.throttled.rate", 0, "3000"), ("max.connection.creation.rate", 0, "5000")]),
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "", rates, synonyms=True), until_has="'5000'"),
            inc("", [("follower.replication.throttled.rate", 1, None), ("max.connection.creation.rate", 1, None)]),
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "", rates), until_lacks="'5000'"),
        )
    )
    listener_rate = "listener.name.plaintext.max.connection.creation.rate"  # high: the run's connections never wait
    out.append(
        sc(
            "broker_dynamic_configs-listener-rate",
            node,
            inc("$node_str", [(listener_rate, 0, "10000")]),
            inc("", [(listener_rate, 0, "20000")]),
            req(
                A.DESCRIBE_CONFIGS,
                4,
                describe_configs_body(BROKER, "$node_str", [listener_rate, rates[2]], synonyms=True),
                until_has="'20000'",
            ),
            req(A.DESCRIBE_CONFIGS, 4, describe_configs_body(BROKER, "", None, synonyms=True)),
            inc("$node_str", [(listener_rate, 0, "x")]),
            inc("$node_str", [(listener_rate, 1, None)]),
            inc("", [(listener_rate, 1, None)]),
            req(
                A.DESCRIBE_CONFIGS,
                4,
                describe_configs_body(BROKER, "$node_str", [listener_rate]),
                # Kafka applies the two deletions one after the other: wait until neither shows
                until_lacks=f"'{listener_rate}'",
            ),
        )
    )
    # connection limits: Kafka's checks (types, the per-IP zero requirement, a dynamic 0), then
    # limits far above what the run opens (127.0.0.1 has its own override), described and removed
    limits = [
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "listener.name.plaintext.max.connections",
    ]
    out.append(
        sc(
            "broker_dynamic_configs-connection-limits",
            node,
            *[
                inc("$node_str", ops)
                for ops in [
                    [("max.connections", 0, "0")],
                    [("max.connections", 0, "-1")],
                    [("max.connections.per.ip", 0, "0")],
                    [("max.connections.per.ip.overrides", 0, "abc")],
                    [("max.connections.per.ip.overrides", 0, "127.0.0.1:x")],
                    [("listener.name.plaintext.max.connections", 0, "0")],
                    [("max.connection.creation.rate", 0, "0")],
                ]
            ],
            inc(
                "$node_str",
                [
                    ("max.connections", 0, "100000"),
                    ("max.connections.per.ip", 0, "0"),
                    ("max.connections.per.ip.overrides", 0, "127.0.0.1:100000,127.0.0.9:5"),
                    ("listener.name.plaintext.max.connections", 0, "90000"),
                ],
            ),
            req(
                A.DESCRIBE_CONFIGS,
                4,
                describe_configs_body(BROKER, "$node_str", limits, synonyms=True),
                until_has="'90000'",
            ),
            inc("$node_str", [(k, 1, None) for k in limits]),
            req(
                A.DESCRIBE_CONFIGS,
                4,
                describe_configs_body(BROKER, "$node_str", limits, synonyms=True),
                until_lacks="'90000'",
            ),
        )
    )
    out.append(
        sc(
            "broker_dynamic_configs-errors",
            node,
            inc("$node_str", [("leader.replication.throttled.rate", 0, "abc")]),
            inc("$node_str", [("follower.replication.throttled.rate", 0, "-5")]),
            inc("$node_str", [("log.dirs", 0, "/tmp/elsewhere")]),
            inc("77", [("leader.replication.throttled.rate", 0, "1")]),
        )
    )
    out.append(
        sc(
            "topic_throttled_replicas",
            create_topic("{s}", 2),
            await_topic("{s}", 2),
            inc(
                "{s}",
                [
                    ("leader.replication.throttled.replicas", 0, "0:1,1:2"),
                    ("follower.replication.throttled.replicas", 0, "*"),
                ],
                rtype=TOPIC,
            ),
            describe_topic(
                "{s}",
                keys=["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"],
                has="'0:1,1:2'",
            ),
            inc("{s}", [("leader.replication.throttled.replicas", 0, "0-1")], rtype=TOPIC),
            inc("{s}", [("follower.replication.throttled.replicas", 0, "*,0:1")], rtype=TOPIC),
            inc(
                "{s}",
                [
                    ("leader.replication.throttled.replicas", 1, None),
                    ("follower.replication.throttled.replicas", 1, None),
                ],
                rtype=TOPIC,
            ),
            describe_topic(
                "{s}",
                keys=["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"],
                lacks="'0:1,1:2'",
            ),
        )
    )
    return out


def misc() -> list[Scenario]:
    out = []
    for v in versions(A.INIT_PRODUCER_ID):
        out.append(
            sc(
                f"init_producer_id-v{v}-idempotent",
                req(
                    A.INIT_PRODUCER_ID,
                    v,
                    {"transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1, "producer_epoch": -1},
                ),
            )
        )
    out.append(
        sc(
            "init_producer_id-v4-transactional",
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 1}),
            req(
                A.INIT_PRODUCER_ID,
                4,
                {"transactional_id": "{s}", "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
            ),
        )
    )
    out.append(
        sc(
            "init_producer_id-v4-bad-timeout",
            req(
                A.INIT_PRODUCER_ID,
                4,
                {"transactional_id": "{s}", "transaction_timeout_ms": 0, "producer_id": -1, "producer_epoch": -1},
            ),
        )
    )
    for v in versions(A.OFFSET_FOR_LEADER_EPOCH):

        def body(epoch: int, current: int = -1, topic: str = "w-one", part: int = 0) -> dict[str, Any]:
            return {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [{"partition": part, "current_leader_epoch": current, "leader_epoch": epoch}],
                    }
                ],
            }

        out.append(sc(f"offset_for_leader_epoch-v{v}-epoch-0", req(A.OFFSET_FOR_LEADER_EPOCH, v, body(0))))
        out.append(sc(f"offset_for_leader_epoch-v{v}-future-epoch", req(A.OFFSET_FOR_LEADER_EPOCH, v, body(4))))
        out.append(
            sc(
                f"offset_for_leader_epoch-v{v}-unknown-topic",
                req(A.OFFSET_FOR_LEADER_EPOCH, v, body(0, topic="no-such-topic-at-all")),
            )
        )
        out.append(
            sc(f"offset_for_leader_epoch-v{v}-unknown-partition", req(A.OFFSET_FOR_LEADER_EPOCH, v, body(0, part=5)))
        )
        if v >= 2:
            out.append(
                sc(
                    f"offset_for_leader_epoch-v{v}-fenced-current",
                    req(A.OFFSET_FOR_LEADER_EPOCH, v, body(0, current=6)),
                )
            )
        out.append(
            sc(f"offset_for_leader_epoch-v{v}-empty-topic", req(A.OFFSET_FOR_LEADER_EPOCH, v, body(0, topic="w-empty")))
        )
    for v in versions(A.DESCRIBE_CLUSTER):
        out.append(
            sc(
                f"describe_cluster-v{v}",
                req(A.DESCRIBE_CLUSTER, v, {"include_cluster_authorized_operations": False, "endpoint_type": 1}),
            )
        )
    out.append(
        sc(
            "describe_cluster-v0-authorized-operations",
            req(A.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": True}),
        )
    )
    for v in versions(A.DESCRIBE_CLUSTER):
        if v >= 1:
            out.append(
                sc(
                    f"describe_cluster-v{v}-controller-endpoints",
                    req(A.DESCRIBE_CLUSTER, v, {"include_cluster_authorized_operations": False, "endpoint_type": 2}),
                )
            )
        if v >= 2:  # KIP-1073: fenced brokers too (the reference's one broker, like Strom's, is unfenced)
            out.append(
                sc(
                    f"describe_cluster-v{v}-include-fenced-brokers",
                    req(
                        A.DESCRIBE_CLUSTER,
                        v,
                        {
                            "include_cluster_authorized_operations": True,
                            "endpoint_type": 1,
                            "include_fenced_brokers": True,
                        },
                    ),
                )
            )

    def delete(topic: str, offsets: dict[int, int], v: int = 2) -> Step:
        return req(
            A.DELETE_RECORDS,
            v,
            {
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": p, "offset": o} for p, o in offsets.items()]}
                ],
                "timeout_ms": 5000,
            },
        )

    for v in versions(A.DELETE_RECORDS):
        out.append(
            sc(
                f"delete_records-v{v}",
                create_topic("{s}", 2),
                await_topic("{s}", 2),
                produce("{s}", 0, batch(4)),
                produce("{s}", 1, batch(2)),
                delete("{s}", {0: 3, 1: -1}, v),
                req(
                    A.LIST_OFFSETS,
                    7,
                    {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [
                            {
                                "name": "{s}",
                                "partitions": [
                                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": -2} for p in (0, 1)
                                ],
                            }
                        ],
                    },
                ),
            )
        )
    out.append(
        sc(
            "delete_records-v2-errors",
            create_topic("{s}"),
            await_topic("{s}"),
            produce("{s}", 0, batch(2)),
            delete("{s}", {0: 5}),
            delete("{s}", {0: -2}),
            delete("{s}", {7: 0}),
            delete("no-such-topic-at-all", {0: 0}),
        )
    )
    out.append(sc("delete_records-v2-compacted-topic", delete("w-compact", {0: 1}), delete("w-compact", {0: 9})))
    out.append(
        sc(
            "delete_records-v2-compact-and-delete",
            create_topic("{s}", 1, {"cleanup.policy": "compact,delete"}),
            await_topic("{s}"),
            produce("{s}", 0, batch(3)),
            delete("{s}", {0: 2}),
        )
    )
    return out


# After a request a broker may close the connection for: is it still serving (on a new one)?
ALIVE = req(A.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})


def unsupported() -> list[Scenario]:
    """Versions past what Strom's schema knows and unknown API keys, as hand-made frames."""
    out = []
    for api, (_lo, hi) in sorted(STROM_RANGE.items()):
        if api == A.API_VERSIONS:
            continue
        v = hi + 1
        # header v1 (non-flexible style) plus a few zero bytes: a broker must not answer an unknown version
        raw = api.to_bytes(2, "big") + v.to_bytes(2, "big") + (77).to_bytes(4, "big") + b"\x00\x04diff" + b"\x00" * 8
        out.append(sc(f"unsupported-{ApiKey(api).name.lower()}-v{v}", Step(api, v, {}, raw=raw), ALIVE))
    for key in (999, 32_000):
        raw = key.to_bytes(2, "big") + b"\x00\x00" + (5).to_bytes(4, "big") + b"\x00\x04diff"
        out.append(sc(f"unknown-api-key-{key}", Step(key, 0, {}, raw=raw), ALIVE))
    return out


def security_and_transactions() -> list[Scenario]:
    """ACL, SCRAM, SASL, log-dir and transaction APIs on a broker without security configured."""
    out = []
    acl_filter = {
        "resource_type_filter": 2,
        "resource_name_filter": "w-one",
        "pattern_type_filter": 3,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    for v in versions(A.DESCRIBE_ACLS):
        out.append(sc(f"describe_acls-v{v}", req(A.DESCRIBE_ACLS, v, acl_filter)))
    for v in versions(A.CREATE_ACLS):
        out.append(
            sc(
                f"create_acls-v{v}",
                req(
                    A.CREATE_ACLS,
                    v,
                    {
                        "creations": [
                            {
                                "resource_type": 2,
                                "resource_name": "w-one",
                                "resource_pattern_type": 3,
                                "principal": "User:alice",
                                "host": "*",
                                "operation": 3,
                                "permission_type": 3,
                            }
                        ]
                    },
                ),
            )
        )
    for v in versions(A.DELETE_ACLS):
        out.append(
            sc(f"delete_acls-v{v}", req(A.DELETE_ACLS, v, {"filters": [{**acl_filter, "pattern_type_filter": 3}]}))
        )
    for v in versions(A.SASL_HANDSHAKE):
        out.append(sc(f"sasl_handshake-v{v}", req(A.SASL_HANDSHAKE, v, {"mechanism": "PLAIN"})))
    for v in versions(A.SASL_AUTHENTICATE):
        out.append(sc(f"sasl_authenticate-v{v}", req(A.SASL_AUTHENTICATE, v, {"auth_bytes": b"\x00u\x00p"}), ALIVE))
    for v in versions(A.DESCRIBE_USER_SCRAM_CREDENTIALS):
        out.append(
            sc(
                f"describe_user_scram_credentials-v{v}",
                req(A.DESCRIBE_USER_SCRAM_CREDENTIALS, v, {"users": [{"name": "alice"}]}),
            )
        )
        out.append(
            sc(f"describe_user_scram_credentials-v{v}-all", req(A.DESCRIBE_USER_SCRAM_CREDENTIALS, v, {"users": None}))
        )
    for v in versions(A.ALTER_USER_SCRAM_CREDENTIALS):
        out.append(
            sc(
                f"alter_user_scram_credentials-v{v}",
                req(
                    A.ALTER_USER_SCRAM_CREDENTIALS,
                    v,
                    {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []},
                ),
            )
        )
    for v in versions(A.DESCRIBE_LOG_DIRS):
        out.append(
            sc(
                f"describe_log_dirs-v{v}",
                req(A.DESCRIBE_LOG_DIRS, v, {"topics": [{"topic": "w-three", "partitions": [0, 1, 2]}]}),
            )
        )
    for v in versions(A.DESCRIBE_PRODUCERS):
        out.append(
            sc(
                f"describe_producers-v{v}",
                req(
                    A.DESCRIBE_PRODUCERS,
                    v,
                    {
                        "topics": [
                            {"name": "w-one", "partition_indexes": [0, 7]},
                            {"name": "no-such-topic-at-all", "partition_indexes": [0]},
                        ]
                    },
                ),
            )
        )
    for v in versions(A.DESCRIBE_TRANSACTIONS):
        out.append(
            sc(f"describe_transactions-v{v}", req(A.DESCRIBE_TRANSACTIONS, v, {"transactional_ids": ["no-such-txn"]}))
        )
    for v in versions(A.LIST_TRANSACTIONS):
        out.append(
            sc(
                f"list_transactions-v{v}",
                req(A.LIST_TRANSACTIONS, v, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}),
            )
        )
    for v in versions(A.DESCRIBE_TOPIC_PARTITIONS):
        out.append(
            sc(
                f"describe_topic_partitions-v{v}",
                req(
                    A.DESCRIBE_TOPIC_PARTITIONS,
                    v,
                    {
                        "topics": [{"name": "w-one"}, {"name": "w-empty"}, {"name": "no-such-topic-at-all"}],
                        "response_partition_limit": 2000,
                        "cursor": None,
                    },
                ),
            )
        )
        out.append(
            sc(
                f"describe_topic_partitions-v{v}-cursor",
                req(
                    A.DESCRIBE_TOPIC_PARTITIONS,
                    v,
                    {"topics": [{"name": "w-one"}, {"name": "w-empty"}], "response_partition_limit": 1, "cursor": None},
                ),
            )
        )
    txn = "{s}"
    # A transactional id never used, once its coordinator has loaded (DescribeTransactions answers
    # TRANSACTIONAL_ID_NOT_FOUND, 105, and no longer NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS).
    found = setup(A.FIND_COORDINATOR, 3, {"key": txn, "key_type": 1})
    loaded = Step(
        int(A.DESCRIBE_TRANSACTIONS), 0, {"transactional_ids": [txn]}, compare=False, until_has="'error_code': 105"
    )
    for v in versions(A.ADD_PARTITIONS_TO_TXN):
        body = {
            "transactional_id": txn,
            "producer_id": 4242,
            "producer_epoch": 0,
            "topics": [{"name": "w-one", "partitions": [0]}],
            "transactions": [
                {
                    "transactional_id": txn,
                    "producer_id": 4242,
                    "producer_epoch": 0,
                    "verify_only": False,
                    "topics": [{"name": "w-one", "partitions": [0]}],
                }
            ],
        }
        out.append(
            sc(f"add_partitions_to_txn-v{v}-unknown-producer", found, loaded, req(A.ADD_PARTITIONS_TO_TXN, v, body))
        )
    for v in versions(A.ADD_OFFSETS_TO_TXN):
        out.append(
            sc(
                f"add_offsets_to_txn-v{v}-unknown-producer",
                found,
                loaded,
                req(
                    A.ADD_OFFSETS_TO_TXN,
                    v,
                    {"transactional_id": txn, "producer_id": 4242, "producer_epoch": 0, "group_id": "w-group"},
                ),
            )
        )
    for v in versions(A.END_TXN):
        out.append(
            sc(
                f"end_txn-v{v}-unknown-producer",
                found,
                loaded,
                req(
                    A.END_TXN, v, {"transactional_id": txn, "producer_id": 4242, "producer_epoch": 0, "committed": True}
                ),
            )
        )

    def txn_commit(v: int, pid: Any = "$pid", epoch: Any = "$epoch", group: str = "w-group") -> Step:
        return req(
            A.TXN_OFFSET_COMMIT,
            v,
            {
                "transactional_id": txn,
                "group_id": group,
                "producer_id": pid,
                "producer_epoch": epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "w-one",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 1,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )

    for v in versions(A.TXN_OFFSET_COMMIT):
        out.append(sc(f"txn_offset_commit-v{v}-unknown-producer", found, loaded, txn_commit(v, 4242, 0)))
    init_txn = [
        setup(A.FIND_COORDINATOR, 3, {"key": txn, "key_type": 1}),
        req(
            A.INIT_PRODUCER_ID,
            4,
            {"transactional_id": txn, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
            capture={"pid": "producer_id", "epoch": "producer_epoch"},
            until_ok=True,
        ),
    ]
    out.append(sc("txn_offset_commit-v3-initialised-id-other-producer", *init_txn, txn_commit(3, 4242, 0)))
    out.append(sc("txn_offset_commit-v3-offsets-not-added", *init_txn, txn_commit(3)))
    out.append(
        sc(
            "txn_offset_commit-v3-other-epoch",
            *init_txn,
            req(
                A.ADD_OFFSETS_TO_TXN,
                3,
                {"transactional_id": txn, "producer_id": "$pid", "producer_epoch": "$epoch", "group_id": "w-group"},
            ),
            txn_commit(3, epoch=7),
        )
    )
    out.append(
        sc(
            "txn_offset_commit-v3-after-add-offsets",
            *init_txn,
            req(
                A.ADD_OFFSETS_TO_TXN,
                3,
                {"transactional_id": txn, "producer_id": "$pid", "producer_epoch": "$epoch", "group_id": "{s}"},
            ),
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            txn_commit(3, group="{s}"),
            req(
                A.END_TXN,
                3,
                {"transactional_id": txn, "producer_id": "$pid", "producer_epoch": "$epoch", "committed": False},
            ),
        )
    )
    for v in versions(A.WRITE_TXN_MARKERS):
        out.append(sc(f"write_txn_markers-v{v}", req(A.WRITE_TXN_MARKERS, v, {"markers": []})))
    return out


def transactions_v2() -> list[Scenario]:
    """Transaction version 2 (KIP-890 part 2), which Kafka 4.0 finalizes: EndTxn v5 bumps the epoch
    of every transaction (retries, fencing, aborts with nothing added), Produce v12 adds partitions
    itself, and TxnOffsetCommit v5 the group's offsets partition; older versions are verified."""
    tid = "{s}"
    init = [
        setup(A.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1}),
        req(
            A.INIT_PRODUCER_ID,
            4,
            {"transactional_id": tid, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
            capture={"pid": "producer_id", "epoch": "producer_epoch", "e0": "producer_epoch"},
            until_ok=True,
        ),
    ]

    def end(commit: bool, epoch: str = "$epoch", version: int = 5, **kw: Any) -> Step:
        return req(
            A.END_TXN,
            version,
            {"transactional_id": tid, "producer_id": "$pid", "producer_epoch": epoch, "committed": commit},
            **kw,
        )

    def txn_produce(seq: int, version: int = 12, txn: str = tid) -> Step:
        return req(A.PRODUCE, version, produce_body("{s}", 0, f"@txnbatch:{seq}", txn=txn))

    def describe(until: str | None = None) -> Step:
        return req(A.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}, until_has=until and f"'{until}'")

    producers = req(A.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "{s}", "partition_indexes": [0]}]})
    topic = [create_topic("{s}"), await_topic("{s}")]

    def offset_commit(version: int, pid: Any = "$pid", epoch: Any = "$epoch", txn: str = tid, **kw: Any) -> Step:
        return req(
            A.TXN_OFFSET_COMMIT,
            version,
            **kw,
            body={
                "transactional_id": txn,
                "group_id": "{s}",
                "producer_id": pid,
                "producer_epoch": epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "{s}",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 1,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )

    stable_fetch = req(A.OFFSET_FETCH, 8, {"groups": [{"group_id": "{s}", "topics": None}], "require_stable": True})
    out = [
        sc(
            "txn-v2-offsets-without-add-offsets",
            *topic,
            setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            setup(A.OFFSET_COMMIT, 8, commit_body("{s}", "{s}", 0, 0)),
            *init,
            offset_commit(5, 4242, 0, txn="{s}-other"),
            offset_commit(5, epoch=7),
            offset_commit(4, epoch=7),
            offset_commit(4),
            offset_commit(5),
            describe(),
            stable_fetch,
            end(True, capture={"epoch": "producer_epoch"}),
            describe("CompleteCommit"),
            stable_fetch,
            offset_commit(5, epoch="$e0"),
        ),
        sc(
            "txn-v2-commit-retry-fence-abort",
            *topic,
            *init,
            txn_produce(0),
            describe(),
            end(True, capture={"e1": "producer_epoch"}),
            describe("CompleteCommit"),
            producers,
            txn_produce(2),  # epoch 0 after the bump: fenced
            end(True, "$e0", capture={"epoch": "producer_epoch"}),  # a retry: answered with epoch 1
            end(True),
            end(False, "$e0"),
            end(True, "$e0", version=4),
            txn_produce(0),  # epoch 1 from sequence 0: a new transaction
            end(False, capture={"epoch": "producer_epoch"}),
            describe("CompleteAbort"),
            producers,
            req(A.FETCH, 12, fetch_body(12, "{s}", isolation=1)),
            req(A.FETCH, 12, fetch_body(12, "{s}", offset=3, isolation=1)),
            req(A.LIST_OFFSETS, 7, {**list_offsets_body("{s}", 0, -1), "isolation_level": 1}),
            end(True, version=4),
        ),
        sc(
            "txn-v2-abort-with-nothing-added",
            *init,
            end(True),
            end(False, capture={"epoch": "producer_epoch"}),
            describe("CompleteAbort"),
            end(False, "$e0"),
            end(True),
            end(False, "$e0", version=4),
            end(False),
        ),
        sc(
            "txn-v2-classic-produce-not-added",
            *topic,
            *init,
            txn_produce(0, 11),
            txn_produce(0, 10),
            txn_produce(0, 9),
            txn_produce(0, 12, txn="{s}-other"),
            txn_produce(0, 11, txn="{s}-other"),
            req(
                A.ADD_PARTITIONS_TO_TXN,
                3,
                {
                    "v3_and_below_transactional_id": tid,
                    "v3_and_below_producer_id": "$pid",
                    "v3_and_below_producer_epoch": "$epoch",
                    "v3_and_below_topics": [{"name": "{s}", "partitions": [0]}],
                },
            ),
            txn_produce(0, 11),
            end(True, version=4),
            describe("CompleteCommit"),
            producers,
        ),
    ]
    out.append(
        sc(
            "txn-v2-new-instance-fences-the-old",
            *topic,
            *init,
            txn_produce(0),
            req(
                A.INIT_PRODUCER_ID,
                4,
                {"transactional_id": tid, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
            ),
            describe("CompleteAbort"),
            req(
                A.INIT_PRODUCER_ID,
                4,
                {"transactional_id": tid, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
                until_ok=True,
            ),
            end(False, "$e0"),
            end(True, "$e0", version=4),
            txn_produce(2),
            producers,
            req(
                A.INIT_PRODUCER_ID,
                4,
                {
                    "transactional_id": tid,
                    "transaction_timeout_ms": 60_000,
                    "producer_id": "$pid",
                    "producer_epoch": "$e0",
                },
            ),
        )
    )
    for v in (4, 5):
        out.append(
            sc(
                f"txn-v2-add_partitions_to_txn-v{v}-from-a-broker",
                *topic,
                *init,
                *[
                    req(
                        A.ADD_PARTITIONS_TO_TXN,
                        v,
                        {
                            "transactions": [
                                {
                                    "transactional_id": tid,
                                    "producer_id": "$pid",
                                    "producer_epoch": "$epoch",
                                    "verify_only": verify,
                                    "topics": [{"name": "{s}", "partitions": [0]}],
                                }
                            ]
                        },
                    )
                    for verify in (True, False, True)
                ],
                describe(),
            )
        )
    return out


def defaults_for_the_rest(covered: set[tuple[int, int]]) -> list[Scenario]:
    """Every version Strom serves that no scenario above sends (an API added since): its request with
    every field at its default, so no served version goes unchecked."""
    return [
        sc(f"default-body-{ApiKey(api).name.lower()}-v{v}", req(api, v, {}), ALIVE)
        for api, (lo, hi) in sorted(SUPPORTED_RANGE.items())
        for v in range(lo, hi + 1)
        if (api, v) not in covered
    ]


def all_scenarios() -> list[Scenario]:
    out = [WORLD, STABLE]
    for part in (
        api_versions(),
        metadata(),
        produce_scenarios(),
        fetch_scenarios(),
        list_offsets(),
        offsets(),
        coordinator(),
        groups(),
        group_migration(),
        consumer_group_epochs(),
        topics_admin(),
        configs(),
        quotas_and_throttles(),
        misc(),
        security_and_transactions(),
        transactions_v2(),
        unsupported(),
    ):
        out.extend(part)
    out.extend(defaults_for_the_rest({(st.api, st.version) for s in out for st in s.steps if st.raw is None}))
    # Last, the scenarios that disturb the whole broker, so that none of the others runs in their
    # wake: deleting __consumer_offsets (both brokers do it; Kafka's group coordinators unload and
    # answer COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR until the topic is back), and an unknown
    # IncrementalAlterConfigs operation, which makes Kafka 4.0's controller fail (a
    # NullPointerException) and renounce its leadership for a moment.
    out.sort(
        key=lambda s: (
            s.name == "delete_topics-v6-internal-topic"
            or (s.name.startswith("incremental_alter_configs-") and s.name.endswith("-invalid-operation"))
        )
    )
    names = [s.name for s in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"scenario names must be unique: {sorted(dupes)}")
    return out
