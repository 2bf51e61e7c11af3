"""Online migration between the classic and the consumer (KIP-848) group protocol, as Kafka 4.0 does.

`group.consumer.migration.policy` (bidirectional, upgrade, downgrade, disabled) says which way a
group *with members* may convert (an empty group always converts):

* **Upgrade.** A ConsumerGroupHeartbeat joining a classic group that has members converts it when
  the policy allows upgrades, the group's protocol type is ``consumer`` and it has no more members
  than `group.consumer.max.size`. Every classic member is carried over with the subscription and
  the assignment decoded from its embedded ConsumerProtocol bytes (its member epoch is the classic
  generation, its target the assignment it has); waiting JoinGroup/SyncGroup calls are answered
  REBALANCE_IN_PROGRESS. Otherwise GROUP_ID_NOT_FOUND, with Kafka's message.
* **Classic members inside a consumer group** keep using JoinGroup/SyncGroup/Heartbeat/LeaveGroup:
  a JoinGroup reconciles the member towards its target (its owned partitions come from the
  subscription) and answers at once with the member epoch as generation; SyncGroup hands out the
  member's assigned partitions as a ConsumerProtocolAssignment; Heartbeat answers
  REBALANCE_IN_PROGRESS when the member must rejoin (group epoch ahead, partitions to revoke, or
  released partitions to collect). A classic member must rejoin within its rebalance timeout once
  told to, and sync within it after a join.
* **Downgrade.** When members leave a consumer group (leave, session or rebalance timeout) and only
  classic members would remain, the group converts back to a classic group when the policy allows
  downgrades (and `group.max.size` permits): Stable at the group epoch, each member holding its
  target assignment, then a rebalance so the members rejoin as a classic group.

This module holds the pure parts: the policy, the ConsumerProtocol (subscription and assignment)
codec, and building one group kind from the other. `consumer_groups.ConsumerGroups` applies them.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, overload

from strom.broker.coordinator.group.assignors import Assignment
from strom.broker.coordinator.group.consumer import ConsumerGroup, ConsumerGroupSettings, ConsumerMember, MemberState
from strom.broker.coordinator.group.state import CONSUMER_PROTOCOL_TYPE, Group, GroupSettings, GroupState, Member

SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3


class MigrationPolicy(enum.Enum):
    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        return cls(value.strip().lower())

    @property
    def upgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


class ProtocolError(ValueError):
    """Embedded ConsumerProtocol bytes that cannot be read."""


class CustomAssignorError(ValueError):
    """An assignment carrying user data: a custom assignor's state that a consumer group would lose."""


# --------------------------------------------------------------------------- ConsumerProtocol codec
@dataclass
class Subscription:
    version: int
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[tuple[str, list[int]]] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = bytes(data), 0

    def take(self, fmt: str) -> int:
        """One big-endian integer (`fmt` is a struct format of one integer field)."""
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ProtocolError(f"truncated at byte {self.pos}")
        value: int
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    @overload
    def string(self, nullable: Literal[False] = False) -> str: ...

    @overload
    def string(self, nullable: bool) -> str | None: ...

    def string(self, nullable: bool = False) -> str | None:
        size = self.take(">h")
        if size < 0:
            if nullable:
                return None
            raise ProtocolError("null string")
        if self.pos + size > len(self.data):
            raise ProtocolError(f"string of {size} bytes past the end")
        try:
            value = self.data[self.pos : self.pos + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(str(exc)) from None
        self.pos += size
        return value

    def bytes_(self) -> bytes | None:
        size = self.take(">i")
        if size < 0:
            return None
        if self.pos + size > len(self.data):
            raise ProtocolError(f"{size} bytes past the end")
        value = self.data[self.pos : self.pos + size]
        self.pos += size
        return value

    def count(self) -> int:
        n = self.take(">i")
        if n < 0:
            raise ProtocolError("null array")
        if n > len(self.data):
            raise ProtocolError(f"array of {n} elements in {len(self.data)} bytes")
        return n

    def topic_partitions(self) -> list[tuple[str, list[int]]]:
        out: list[tuple[str, list[int]]] = []
        for _ in range(self.count()):
            topic = self.string()
            out.append((topic, [self.take(">i") for _ in range(self.count())]))
        return out


def decode_subscription(data: bytes) -> Subscription:
    """A ConsumerProtocolSubscription (versions 0-3; newer ones read as 3, as Kafka does)."""
    r = _Reader(data)
    version = r.take(">h")
    if version < 0:
        raise ProtocolError(f"unsupported subscription version {version}")
    read_as = min(version, SUBSCRIPTION_MAX_VERSION)
    topics = [r.string() for _ in range(r.count())]
    sub = Subscription(version, topics, r.bytes_())
    if read_as >= 1:
        sub.owned_partitions = r.topic_partitions()
    if read_as >= 2:
        sub.generation_id = r.take(">i")
    if read_as >= 3:
        sub.rack_id = r.string(nullable=True)
    return sub


def subscription_version(data: bytes) -> int:
    if len(data) < 2:
        raise ProtocolError("no version")
    version: int = struct.unpack_from(">h", data)[0]
    return version


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """A ConsumerProtocolAssignment's partitions (empty bytes: nothing assigned).

    CustomAssignorError when it carries user data (Kafka refuses to upgrade such a group)."""
    if not data:
        return []
    r = _Reader(data)
    version = r.take(">h")
    if version < 0:
        raise ProtocolError(f"unsupported assignment version {version}")
    partitions = r.topic_partitions()
    user_data = r.bytes_() if r.pos < len(r.data) else None
    if user_data:
        raise CustomAssignorError("userData from a custom assignor would be lost")
    return partitions


def encode_assignment(partitions: Mapping[str, set[int] | list[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment (no user data) in the member's own protocol version."""
    version = max(0, min(version, ASSIGNMENT_MAX_VERSION))
    out = bytearray(struct.pack(">hi", version, len([t for t, p in partitions.items() if p])))
    for topic in sorted(partitions):
        parts = sorted(partitions[topic])
        if not parts:
            continue
        name = topic.encode("utf-8")
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">i", -1)
    return bytes(out)


def to_ids(partitions: list[tuple[str, list[int]]], ids_by_name: Mapping[str, bytes]) -> Assignment:
    """Topic names to topic ids (partitions of topics that no longer exist are dropped, as Kafka does)."""
    out: Assignment = {}
    for topic, parts in partitions:
        topic_id = ids_by_name.get(topic)
        if topic_id is not None and parts:
            out.setdefault(topic_id, set()).update(parts)
    return out


def to_names(assignment: Mapping[bytes, set[int]], names_by_id: Mapping[bytes, str]) -> dict[str, set[int]]:
    return {names_by_id[t]: set(p) for t, p in assignment.items() if p and t in names_by_id}


# --------------------------------------------------------------------------- conversions
@dataclass
class ClassicMeta:
    """What a member that joined with JoinGroup needs inside a consumer group."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]

    def version(self) -> int:
        return subscription_version(self.protocols[0][1])


def upgrade_refusal(classic: Group, policy: MigrationPolicy, max_size: int) -> str | None:
    """Why a classic group with members may not become a consumer group (Kafka's messages), or None."""
    g = classic.group_id
    if not policy.upgrade:
        return f"Cannot upgrade classic group {g} to consumer group because online upgrade is disabled."
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return (
            f"Cannot upgrade classic group {g} to consumer group because the group does not use the "
            "consumer embedded protocol."
        )
    if len(classic.members) > max_size:
        return (
            f"Cannot upgrade classic group {g} to consumer group because the group size exceeds the "
            "consumer group maximum size."
        )
    return None


def consumer_group_from_classic(
    classic: Group, settings: ConsumerGroupSettings, ids_by_name: Mapping[str, bytes], now: float
) -> ConsumerGroup:
    """Kafka's ConsumerGroup.fromClassicGroup: every member Stable at the classic generation, its
    target assignment the one it holds. Raises ProtocolError or CustomAssignorError."""
    group = ConsumerGroup(classic.group_id, settings)
    group.group_epoch = group.assignment_epoch = classic.generation
    for m in classic.members.values():
        assigned = to_ids(decode_assignment(m.assignment), ids_by_name)
        metadata = (
            m.metadata(classic.protocol_name) if classic.protocol_name else (m.protocols[0][1] if m.protocols else b"")
        )
        sub = decode_subscription(metadata)
        member = ConsumerMember(
            m.member_id,
            m.group_instance_id,
            sub.rack_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            subscribed_topic_names=list(sub.topics),
            member_epoch=classic.generation,
            previous_member_epoch=classic.generation,
            state=MemberState.STABLE,
            assigned=assigned,
        )
        member.classic = ClassicMeta(m.session_timeout_ms, list(m.protocols))
        member.session_deadline = now + m.session_timeout_ms / 1000
        group.members[m.member_id] = member
        group.target[m.member_id] = {t: set(p) for t, p in assigned.items()}
        if m.group_instance_id:
            group.static_members[m.group_instance_id] = m.member_id
    return group


def downgrade_allowed(group: ConsumerGroup, leaving: set[str], policy: MigrationPolicy, classic_max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMembers: the members left after `leaving` go are
    all classic ones, there is at least one, and the policy and `group.max.size` allow it."""
    remaining = [m for m in group.members.values() if m.member_id not in leaving]
    if not remaining or any(m.classic is None for m in remaining):
        return False
    return policy.downgrade and len(remaining) <= classic_max_size


def classic_group_from_consumer(
    group: ConsumerGroup,
    leaving: set[str],
    settings: GroupSettings,
    wall_ms: Callable[[], int],
    names_by_id: Mapping[bytes, str],
    now: float,
) -> Group:
    """Kafka's ClassicGroup.fromConsumerGroup: Stable at the group epoch, members holding their
    target assignment encoded in their own protocol version; the caller starts a rebalance."""
    classic = Group(group.group_id, settings, wall_ms)
    classic.state = GroupState.STABLE
    classic.generation = group.group_epoch
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    for m in group.members.values():
        if m.member_id in leaving:
            continue
        meta = m.classic
        assert meta is not None  # the caller converts a group whose remaining members are all classic
        member = Member(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            meta.session_timeout_ms,
            m.rebalance_timeout_ms,
            list(meta.protocols),
        )
        member.heartbeat(now)
        classic.members[m.member_id] = member
        if m.instance_id:
            classic.static_members[m.instance_id] = m.member_id
        if classic.leader_id is None:
            classic.leader_id = m.member_id
    classic.protocol_name = classic.select_protocol()
    for member in classic.members.values():
        target = to_names(group.target.get(member.member_id, {}), names_by_id)
        member.assignment = encode_assignment(target, subscription_version(member.metadata(classic.protocol_name)))
    return classic
