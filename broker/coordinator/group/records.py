"""Records of the internal topic `__consumer_offsets`, in Kafka's own formats.

Every record has a key and (unless it is a tombstone) a value; both start with a big-endian
int16 version and continue with a struct laid out by Kafka's protocol rules (see
`protocol.codec`: int16-length strings, int32-length bytes, int32-count arrays; flexible
versions use compact lengths and tagged fields):

* offset commit, key version 0 or 1: ``group string, topic string, partition int32``;
  value version 0-4: ``offset int64, [v3+ leader_epoch int32], metadata string,
  commit_timestamp int64, [v1 only: expire_timestamp int64]``; v4 is flexible.
* group metadata, key version 2: ``group string``;
  value version 0-4: ``protocol_type string, generation int32, protocol string?, leader string?,
  [v2+ current_state_timestamp int64], members [member_id string, [v3+ group_instance_id
  string?], client_id string, client_host string, [v1+ rebalance_timeout int32],
  session_timeout int32, subscription bytes, assignment bytes]``; v4 is flexible.

A null value is a tombstone: it deletes what its key names. Strom writes offset values v3 (v1 when
the commit carries an explicit retention, as Kafka does) and group values v3, so Kafka's own tools
read them. The field facts below are taken from Kafka's reference definitions (names, types and
version ranges only); the framing (version prefix, byte layouts) comes from
`protocol.internal_records`, shared with `__transaction_state`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.internal_records import InternalRecordError, RecordCodec, Schemas, version_of
from strom.protocol.internal_records import field as _f

# re-exported: where the group coordinator's callers and tests find a group's partition
from strom.protocol.internal_records import java_string_hashcode as java_string_hashcode
from strom.protocol.internal_records import partition_for as partition_for

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


class GroupRecordError(InternalRecordError):
    """A `__consumer_offsets` record this broker cannot read."""


# (versions valid, flexible-from or None, fields): facts of Kafka's internal/*.json.
_SCHEMAS: Schemas = {
    "OffsetCommitKey": (
        (0, 1),
        None,
        [_f("group", "string", (0, None)), _f("topic", "string", (0, None)), _f("partition", "int32", (0, None))],
    ),
    "OffsetCommitValue": (
        (0, 4),
        4,
        [
            _f("offset", "int64", (0, None)),
            _f("leader_epoch", "int32", (3, None), default=-1),
            _f("metadata", "string", (0, None)),
            _f("commit_timestamp", "int64", (0, None)),
            _f("expire_timestamp", "int64", (1, 1), default=-1),
        ],
    ),
    "GroupMetadataKey": ((2, 2), None, [_f("group", "string", (2, 2))]),
    "GroupMetadataValue": (
        (0, 4),
        4,
        [
            _f("protocol_type", "string", (0, None)),
            _f("generation", "int32", (0, None)),
            _f("protocol", "string", (0, None), nullable=(0, None)),
            _f("leader", "string", (0, None), nullable=(0, None)),
            _f("current_state_timestamp", "int64", (2, None), default=-1),
            _f(
                "members",
                "[]MemberMetadata",
                (0, None),
                fields=[
                    _f("member_id", "string", (0, None)),
                    _f("group_instance_id", "string", (3, None), nullable=(3, None), default=None),
                    _f("client_id", "string", (0, None)),
                    _f("client_host", "string", (0, None)),
                    _f("rebalance_timeout", "int32", (1, None), default=-1),
                    _f("session_timeout", "int32", (0, None)),
                    _f("subscription", "bytes", (0, None)),
                    _f("assignment", "bytes", (0, None)),
                ],
            ),
        ],
    ),
    # KIP-848 consumer groups (Kafka 4.0's record types, key versions 3-8)
    "ConsumerGroupMetadataKey": ((3, 3), None, [_f("group_id", "string", (3, 3))]),
    "ConsumerGroupMetadataValue": ((0, 0), 0, [_f("epoch", "int32", (0, None))]),
    "ConsumerGroupPartitionMetadataKey": ((4, 4), None, [_f("group_id", "string", (4, 4))]),
    "ConsumerGroupPartitionMetadataValue": (
        (0, 0),
        0,
        [
            _f(
                "topics",
                "[]TopicMetadata",
                (0, None),
                fields=[
                    _f("topic_id", "uuid", (0, None)),
                    _f("topic_name", "string", (0, None)),
                    _f("num_partitions", "int32", (0, None)),
                    _f(
                        "partition_metadata",
                        "[]PartitionMetadata",
                        (0, None),
                        fields=[_f("partition", "int32", (0, None)), _f("racks", "[]string", (0, None))],
                    ),
                ],
            )
        ],
    ),
    "ConsumerGroupMemberMetadataKey": (
        (5, 5),
        None,
        [_f("group_id", "string", (5, 5)), _f("member_id", "string", (5, 5))],
    ),
    "ConsumerGroupMemberMetadataValue": (
        (0, 0),
        0,
        [
            _f("instance_id", "string", (0, None), nullable=(0, None)),
            _f("rack_id", "string", (0, None), nullable=(0, None)),
            _f("client_id", "string", (0, None)),
            _f("client_host", "string", (0, None)),
            _f("subscribed_topic_names", "[]string", (0, None)),
            _f("subscribed_topic_regex", "string", (0, None), nullable=(0, None)),
            _f("rebalance_timeout_ms", "int32", (0, None), default=-1),
            _f("server_assignor", "string", (0, None), nullable=(0, None)),
            # a member that joined with the classic protocol (JoinGroup) inside a consumer group
            _f(
                "classic_member_metadata",
                "ClassicMemberMetadata",
                (0, None),
                nullable=(0, None),
                default=None,
                tag=0,
                fields=[
                    _f("session_timeout_ms", "int32", (0, None)),
                    _f(
                        "supported_protocols",
                        "[]ClassicProtocol",
                        (0, None),
                        fields=[_f("name", "string", (0, None)), _f("metadata", "bytes", (0, None))],
                    ),
                ],
            ),
        ],
    ),
    "ConsumerGroupTargetAssignmentMetadataKey": ((6, 6), None, [_f("group_id", "string", (6, 6))]),
    "ConsumerGroupTargetAssignmentMetadataValue": ((0, 0), 0, [_f("assignment_epoch", "int32", (0, None))]),
    "ConsumerGroupTargetAssignmentMemberKey": (
        (7, 7),
        None,
        [_f("group_id", "string", (7, 7)), _f("member_id", "string", (7, 7))],
    ),
    "ConsumerGroupTargetAssignmentMemberValue": (
        (0, 0),
        0,
        [
            _f(
                "topic_partitions",
                "[]TopicPartition",
                (0, None),
                fields=[_f("topic_id", "uuid", (0, None)), _f("partitions", "[]int32", (0, None))],
            )
        ],
    ),
    "ConsumerGroupCurrentMemberAssignmentKey": (
        (8, 8),
        None,
        [_f("group_id", "string", (8, 8)), _f("member_id", "string", (8, 8))],
    ),
    "ConsumerGroupCurrentMemberAssignmentValue": (
        (0, 0),
        0,
        [
            _f("member_epoch", "int32", (0, None)),
            _f("previous_member_epoch", "int32", (0, None)),
            _f("state", "int8", (0, None)),
            _f(
                "assigned_partitions",
                "[]TopicPartitions",
                (0, None),
                fields=[_f("topic_id", "uuid", (0, None)), _f("partitions", "[]int32", (0, None))],
            ),
            _f(
                "partitions_pending_revocation",
                "[]TopicPartitions",
                (0, None),
                fields=[_f("topic_id", "uuid", (0, None)), _f("partitions", "[]int32", (0, None))],
            ),
        ],
    ),
    # a regular expression members subscribe with, resolved to topic names (Kafka 4.0, key version
    # 16; the definitions ship in kafka-group-coordinator-4.0.0.jar, not in the protocol reference)
    "ConsumerGroupRegularExpressionKey": (
        (16, 16),
        None,
        [_f("group_id", "string", (16, 16)), _f("regular_expression", "string", (16, 16))],
    ),
    "ConsumerGroupRegularExpressionValue": (
        (0, 0),
        0,
        [_f("topics", "[]string", (0, None)), _f("version", "int64", (0, None)), _f("timestamp", "int64", (0, None))],
    ),
}

# key version -> the KIP-848 record type it names (its value type is the same name with "Value")
CONSUMER_GROUP_KEYS = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    16: "ConsumerGroupRegularExpression",
}
REGEX_KEY_VERSION = 16


_CODEC = RecordCodec(_SCHEMAS, GroupRecordError)
encode, _decode = _CODEC.encode, _CODEC.decode


# --------------------------------------------------------------------------- typed records


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


def encode_offset_key(key: OffsetKey) -> bytes:
    return encode("OffsetCommitKey", 1, {"group": key.group, "topic": key.topic, "partition": key.partition})


def encode_group_key(key: GroupKey) -> bytes:
    return encode("GroupMetadataKey", GROUP_METADATA_KEY_VERSION, {"group": key.group})


def encode_offset_value(value: CommittedOffset) -> bytes:
    version = OFFSET_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0 else OFFSET_VALUE_VERSION
    return encode(
        "OffsetCommitValue",
        version,
        {
            "offset": value.offset,
            "leader_epoch": value.leader_epoch,
            "metadata": value.metadata,
            "commit_timestamp": value.commit_timestamp,
            "expire_timestamp": value.expire_timestamp,
        },
    )


def encode_group_value(value: GroupRecord) -> bytes:
    return encode(
        "GroupMetadataValue",
        GROUP_VALUE_VERSION,
        {
            "protocol_type": value.protocol_type,
            "generation": value.generation,
            "protocol": value.protocol,
            "leader": value.leader,
            "current_state_timestamp": value.current_state_timestamp,
            "members": [vars(m) for m in value.members],
        },
    )


@dataclass(frozen=True)
class ConsumerGroupKey:
    """A KIP-848 record's key: its version (3-8, 16) names the record type; member is "" for
    group-level ones; regex names a ConsumerGroupRegularExpression record (version 16)."""

    version: int
    group: str
    member: str = ""
    regex: str = ""

    @property
    def record_type(self) -> str:
        return CONSUMER_GROUP_KEYS[self.version]


def encode_consumer_key(key: ConsumerGroupKey) -> bytes:
    body = {"group_id": key.group, "member_id": key.member, "regular_expression": key.regex}
    return encode(key.record_type + "Key", key.version, body)


def encode_consumer_value(record_type: str, body: dict[str, Any]) -> bytes:
    return encode(record_type + "Value", 0, body)


def decode_consumer_value(record_type: str, data: bytes) -> Any:
    return _decode(record_type + "Value", data)[1]


def decode_key(data: bytes | None) -> OffsetKey | GroupKey | ConsumerGroupKey:
    """The key of a `__consumer_offsets` record; GroupRecordError for other or malformed keys."""
    if data is None:
        raise GroupRecordError("a __consumer_offsets record has no key")
    version = version_of(data)
    if version == GROUP_METADATA_KEY_VERSION:
        _, body = _decode("GroupMetadataKey", data)
        return GroupKey(body.group)
    if version in CONSUMER_GROUP_KEYS:
        _, body = _decode(CONSUMER_GROUP_KEYS[version] + "Key", data)
        return ConsumerGroupKey(
            version, body.group_id, body.get("member_id") or "", body.get("regular_expression") or ""
        )
    _, body = _decode("OffsetCommitKey", data)
    return OffsetKey(body.group, body.topic, body.partition)


def decode_offset_value(data: bytes) -> CommittedOffset:
    version, body = _decode("OffsetCommitValue", data)
    return CommittedOffset(
        body.offset,
        body.leader_epoch if version >= 3 else -1,
        body.metadata or "",
        body.commit_timestamp,
        body.expire_timestamp if version == 1 else -1,
    )


def decode_group_value(data: bytes) -> GroupRecord:
    _, body = _decode("GroupMetadataValue", data)
    members = [
        MemberRecord(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout,
            m.session_timeout,
            bytes(m.subscription or b""),
            bytes(m.assignment or b""),
        )
        for m in body.members or []
    ]
    return GroupRecord(
        body.protocol_type or "", body.generation, body.protocol, body.leader, body.current_state_timestamp, members
    )


# --------------------------------------------------------------------------- consumer protocol


def subscribed_topics(metadata: bytes) -> set[str]:
    """Topics named in a ConsumerProtocolSubscription (int16 version, int32 count, int16-length
    strings); an empty set when the bytes are not one."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if size < 0 or pos + size > len(metadata):
                return set()
            topics.add(metadata[pos : pos + size].decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
