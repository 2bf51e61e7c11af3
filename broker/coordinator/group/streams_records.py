"""The records of streams groups (KIP-1071) in `__consumer_offsets`, as Kafka 4.3 writes them.

Facts of Kafka 4.3.1's definitions (`common/message/StreamsGroup*.json` in
kafka-group-coordinator-4.3.1.jar; the protocol reference predates them): a key starts with its
record type (17 group metadata, 19 member metadata, 20 target assignment metadata, 21 a member's
target assignment, 22 a member's current assignment, 23 the topology), then the group id (and
member id); values are flexible version 0. Tombstones (null values) delete what a key names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strom.broker.coordinator.group.records import GroupRecordError
from strom.protocol.internal_records import RecordCodec, Schemas, field, version_of

_f = field
ALL = (0, None)


def _task_ids(name: str, tagged_epochs: bool = False) -> dict[str, Any]:
    fields = [_f("subtopology_id", "string", ALL), _f("partitions", "[]int32", ALL)]
    if tagged_epochs:  # Kafka 4.3: the epoch each active task was assigned in (tagged, optional)
        fields.append(_f("assignment_epochs", "[]int32", ALL, nullable=ALL, default=None, tag=0))
    return _f(name, "[]TaskIds", ALL, fields=fields)


def _topic_info(name: str) -> dict[str, Any]:
    return _f(
        name,
        "[]TopicInfo",
        ALL,
        fields=[
            _f("name", "string", ALL),
            _f("partitions", "int32", ALL),
            _f("replication_factor", "int16", ALL),
            _f("topic_configs", "[]TopicConfig", ALL, fields=[_f("key", "string", ALL), _f("value", "string", ALL)]),
        ],
    )


def _key(version: int, *names: str) -> tuple[tuple[int, int], None, list[dict[str, Any]]]:
    return ((version, version), None, [_f(n, "string", (version, version)) for n in names])


_SCHEMAS: Schemas = {
    "StreamsGroupMetadataKey": _key(17, "group_id"),
    "StreamsGroupMetadataValue": (
        (0, 0),
        0,
        [
            _f("epoch", "int32", ALL),
            _f("metadata_hash", "int64", ALL),
            _f("validated_topology_epoch", "int32", ALL, default=-1, tag=0),
            _f(
                "last_assignment_configs",
                "[]LastAssignmentConfig",
                ALL,
                nullable=ALL,
                default=None,
                tag=1,
                fields=[_f("key", "string", ALL), _f("value", "string", ALL)],
            ),
        ],
    ),
    "StreamsGroupMemberMetadataKey": _key(19, "group_id", "member_id"),
    "StreamsGroupMemberMetadataValue": (
        (0, 0),
        0,
        [
            _f("instance_id", "string", ALL, nullable=ALL),
            _f("rack_id", "string", ALL, nullable=ALL),
            _f("client_id", "string", ALL),
            _f("client_host", "string", ALL),
            _f("rebalance_timeout_ms", "int32", ALL, default=-1),
            _f("topology_epoch", "int32", ALL),
            _f("process_id", "string", ALL),
            _f(
                "user_endpoint",
                "Endpoint",
                ALL,
                nullable=ALL,
                default=None,
                fields=[_f("host", "string", ALL), _f("port", "uint16", ALL)],
            ),
            _f("client_tags", "[]KeyValue", ALL, fields=[_f("key", "string", ALL), _f("value", "string", ALL)]),
        ],
    ),
    "StreamsGroupTargetAssignmentMetadataKey": _key(20, "group_id"),
    "StreamsGroupTargetAssignmentMetadataValue": (
        (0, 0),
        0,
        [_f("assignment_epoch", "int32", ALL), _f("assignment_timestamp", "int64", ALL, default=0, tag=0)],
    ),
    "StreamsGroupTargetAssignmentMemberKey": _key(21, "group_id", "member_id"),
    "StreamsGroupTargetAssignmentMemberValue": (
        (0, 0),
        0,
        [_task_ids("active_tasks"), _task_ids("standby_tasks"), _task_ids("warmup_tasks")],
    ),
    "StreamsGroupCurrentMemberAssignmentKey": _key(22, "group_id", "member_id"),
    "StreamsGroupCurrentMemberAssignmentValue": (
        (0, 0),
        0,
        [
            _f("member_epoch", "int32", ALL),
            _f("previous_member_epoch", "int32", ALL),
            _f("state", "int8", ALL),
            _task_ids("active_tasks", tagged_epochs=True),
            _task_ids("standby_tasks", tagged_epochs=True),
            _task_ids("warmup_tasks", tagged_epochs=True),
            _task_ids("active_tasks_pending_revocation", tagged_epochs=True),
            _task_ids("standby_tasks_pending_revocation", tagged_epochs=True),
            _task_ids("warmup_tasks_pending_revocation", tagged_epochs=True),
        ],
    ),
    "StreamsGroupTopologyKey": _key(23, "group_id"),
    "StreamsGroupTopologyValue": (
        (0, 0),
        0,
        [
            _f("epoch", "int32", ALL),
            _f(
                "subtopologies",
                "[]Subtopology",
                ALL,
                fields=[
                    _f("subtopology_id", "string", ALL),
                    _f("source_topics", "[]string", ALL),
                    _f("source_topic_regex", "[]string", ALL),
                    _topic_info("state_changelog_topics"),
                    _f("repartition_sink_topics", "[]string", ALL),
                    _topic_info("repartition_source_topics"),
                    _f(
                        "copartition_groups",
                        "[]CopartitionGroup",
                        ALL,
                        fields=[
                            _f("source_topics", "[]int16", ALL),
                            _f("source_topic_regex", "[]int16", ALL),
                            _f("repartition_source_topics", "[]int16", ALL),
                        ],
                    ),
                ],
            ),
        ],
    ),
}

# key version (Kafka's record type) -> the record it names (its value type: the same name + "Value")
STREAMS_GROUP_KEYS = {
    17: "StreamsGroupMetadata",
    19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata",
    21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment",
    23: "StreamsGroupTopology",
}
METADATA, MEMBER, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, TOPOLOGY = 17, 19, 20, 21, 22, 23

_CODEC = RecordCodec(_SCHEMAS, GroupRecordError)


@dataclass(frozen=True)
class StreamsGroupKey:
    """A streams group record's key: its type (17-23) and group; member is "" for group-level ones."""

    version: int
    group: str
    member: str = ""

    @property
    def record_type(self) -> str:
        return STREAMS_GROUP_KEYS[self.version]


def is_streams_key(data: bytes | None) -> bool:
    return version_of(data) in STREAMS_GROUP_KEYS


def encode_streams_key(key: StreamsGroupKey) -> bytes:
    return _CODEC.encode(key.record_type + "Key", key.version, {"group_id": key.group, "member_id": key.member})


def decode_streams_key(data: bytes) -> StreamsGroupKey:
    version = version_of(data)
    if version not in STREAMS_GROUP_KEYS:
        raise GroupRecordError(f"not a streams group key (type {version})")
    _, body = _CODEC.decode(STREAMS_GROUP_KEYS[version] + "Key", data)
    return StreamsGroupKey(version, body.group_id, body.get("member_id") or "")


def encode_streams_value(key: StreamsGroupKey, body: dict[str, Any]) -> bytes:
    return _CODEC.encode(key.record_type + "Value", 0, body)


def decode_streams_value(key: StreamsGroupKey, data: bytes) -> Any:
    return _CODEC.decode(key.record_type + "Value", data)[1]
