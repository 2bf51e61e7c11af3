"""The KIP-848 consumer groups a coordinator keeps beside its classic groups: request checks,
Kafka's errors, the member timers, and what OffsetCommit/OffsetFetch must check for them.

A group id is either a classic group (JoinGroup/SyncGroup) or a consumer group
(ConsumerGroupHeartbeat), as in Kafka. A heartbeat joining a classic group that has members
converts it to a consumer group when `group.consumer.migration.policy` allows (else
GROUP_ID_NOT_FOUND); JoinGroup/SyncGroup/Heartbeat/LeaveGroup from classic members of a consumer
group are served here, and the group turns back into a classic group when only classic members
remain (see `migration`). Committed offsets of both kinds live in the coordinator's offset store
(`__consumer_offsets`), held by a member-less classic `Group` while the id is a consumer group.
"""

from __future__ import annotations

import base64
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import trio

from strom.broker.coordinator.group.assignors import TopicMeta
from strom.broker.coordinator.group.consumer import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    GroupError,
    HeartbeatRequest,
    MemberState,
    ResolvedRegex,
    assignment_list,
)
from strom.broker.coordinator.group.migration import (
    ClassicMeta,
    CustomAssignorError,
    ProtocolError,
    classic_group_from_consumer,
    consumer_group_from_classic,
    decode_subscription,
    encode_assignment,
    to_ids,
    to_names,
    upgrade_refusal,
)
from strom.broker.coordinator.group.records import (
    REGEX_KEY_VERSION,
    ConsumerGroupKey,
    GroupKey,
    GroupRecordError,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
    encode_group_key,
    encode_group_value,
)
from strom.broker.coordinator.group.state import Group, JoinRequest, JoinResult, SyncResult
from strom.broker.coordinator.group.store import GroupStore, Record
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.group.consumer")


# Kafka's MemberState codes in ConsumerGroupCurrentMemberAssignment records (as Kafka 4.0 writes
# them, read back with its kafka-dump-log: stable 0, unrevoked 1, unreleased 2)
STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}


def _loaded_state(code: int, pending_revocation: bool) -> MemberState:
    """A member's state from its record. Strom before 2026-11-23 wrote 1, 2, 3 for stable, unrevoked,
    unreleased; what the member holds tells them apart: partitions pending revocation mean
    unrevoked (1 in Kafka's codes, 2 in the old ones), none and 2 or 3 unreleased, else stable."""
    if pending_revocation:
        return MemberState.UNREVOKED_PARTITIONS
    return MemberState.UNRELEASED_PARTITIONS if code in (2, 3) else MemberState.STABLE


# the order Kafka writes a change in: subscriptions, resolved regexes, subscription metadata, group
# epoch, target assignment, current assignments
WRITE_ORDER = {5: 0, 16: 1, 4: 2, 3: 3, 7: 4, 6: 5, 8: 6}
UNSET = -1.0  # a loaded member's deadline: set from the trio clock when the timers start
# ConsumerGroupDescribe v1's MemberType (KIP-1099): a classic (JoinGroup) member or a consumer-protocol one
MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER = 0, 1


def _partitions(assignment: Mapping[bytes, set[int]]) -> list[dict[str, object]]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(assignment.items()) if p]


def new_member_id() -> str:
    """A member id as Kafka's Uuid.toString(): 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerGroups:
    """The consumer groups of a group store: their requests, records and timers."""

    def __init__(self, store: GroupStore) -> None:
        self.store = store
        self.policy = store.config.migration_policy
        self.settings = store.config.consumer
        self.groups = store.consumer  # the store's: never rebound
        self.persisted = store.consumer_records  # what __consumer_offsets holds, per group
        self._changed = trio.Event()

    # ------------------------------------------------------------------ helpers
    def topics(self) -> dict[str, TopicMeta]:
        return self.store.topics()

    def names_by_id(self) -> dict[bytes, str]:
        return {meta.topic_id: name for name, meta in self.store.topics().items()}

    def ids_by_name(self) -> dict[str, bytes]:
        return {name: meta.topic_id for name, meta in self.store.topics().items()}

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def _validate(self, version: int, body: HeartbeatRequest) -> None:
        if not body.group_id:
            raise GroupError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if body.instance_id is not None and not body.instance_id:
            raise GroupError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        if body.rack_id is not None and not body.rack_id:
            raise GroupError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        epoch = body.member_epoch
        if epoch == JOIN_EPOCH:
            if version >= 1 and not body.member_id:
                raise GroupError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
            if body.rebalance_timeout_ms == -1:
                raise GroupError(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if body.topic_partitions is None or any(tp.partitions for tp in body.topic_partitions):
                raise GroupError(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            regex = getattr(body, "subscribed_topic_regex", None) if version >= 1 else None
            if body.subscribed_topic_names is None and regex is None:
                raise GroupError(
                    ErrorCode.INVALID_REQUEST,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                    if version >= 1
                    else "SubscribedTopicNames must be set in first request.",
                )
        elif epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH) or epoch > 0:
            if not body.member_id:
                raise GroupError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
            if epoch == STATIC_LEAVE_EPOCH and body.instance_id is None:
                raise GroupError(ErrorCode.INVALID_REQUEST, "InstanceId can't be null when MemberEpoch is -2.")
        else:
            raise GroupError(ErrorCode.INVALID_REQUEST, f"MemberEpoch is invalid: {epoch}.")
        if body.server_assignor is not None and body.server_assignor not in self.settings.assignors:
            raise GroupError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {body.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.settings.assignors)}.",
            )
        regex = getattr(body, "subscribed_topic_regex", None) if version >= 1 else None
        if regex:
            try:
                re.compile(regex)
            except re.error as exc:
                raise GroupError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
                ) from exc

    # ------------------------------------------------------------------ requests
    def heartbeat(self, version: int, body: HeartbeatRequest, client_id: str, client_host: str) -> dict[str, Any]:
        try:
            self._validate(version, body)
            error = self.store.group_error(body.group_id)
            if error is not None:
                raise GroupError(error)
            classic = self.store.classic_group(body.group_id)
            if classic is not None and classic.members and body.group_id not in self.groups:
                if body.member_epoch != JOIN_EPOCH:
                    raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {body.group_id} is not a consumer group.")
                self._upgrade(classic)
            group = self.groups.get(body.group_id)
            if group is None:
                if body.member_epoch != JOIN_EPOCH:
                    raise GroupError(
                        ErrorCode.UNKNOWN_MEMBER_ID
                        if body.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH)
                        else ErrorCode.GROUP_ID_NOT_FOUND,
                        f"Group {body.group_id} not found.",
                    )
                group = self.groups[body.group_id] = ConsumerGroup(body.group_id, self.settings)
            if body.member_epoch == JOIN_EPOCH and not body.member_id:
                body.member_id = new_member_id()  # v0: the coordinator names the member
            member, send_assignment = group.heartbeat(body, trio.current_time(), self.topics(), client_id, client_host)
        except GroupError as exc:
            return {
                "throttle_time_ms": 0,
                "error_code": exc.code,
                "error_message": exc.message,
                "member_id": None,
                "member_epoch": 0,
                "heartbeat_interval_ms": 0,
                "assignment": None,
            }
        finally:
            self._settle(body.group_id)
        if body.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "member_id": body.member_id,
                "member_epoch": body.member_epoch,
                "heartbeat_interval_ms": 0,
                "assignment": None,
            }
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.settings.heartbeat_interval_ms,
            "assignment": {"topic_partitions": assignment_list(member.assigned)} if send_assignment else None,
        }

    # ------------------------------------------------------------------ migration
    def _settle(self, group_id: str) -> None:
        """After a change: convert the group to a classic one if a fencing asked for it, persist,
        wake the timers."""
        group = self.groups.get(group_id)
        if group is not None and group.downgrade_pending is not None:
            self._downgrade(group)
        else:
            if group is not None and group.subscriptions_changed:
                group.settle(self.topics(), self.store.wall_ms())
            self.persist(group_id)
        self._changed.set()
        self.store.changed()

    def _upgrade(self, classic: Group) -> None:
        """A classic group with members becomes a consumer group (GroupError when Kafka refuses)."""
        g = classic.group_id
        refusal = upgrade_refusal(classic, self.policy, self.settings.max_size)
        if refusal is not None:
            log.info("%s", refusal)
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, refusal)
        try:
            group = consumer_group_from_classic(classic, self.settings, self.ids_by_name(), trio.current_time())
        except ProtocolError as exc:
            log.warning("cannot upgrade classic group %s: its embedded consumer protocol is malformed (%s)", g, exc)
            raise GroupError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {g} to consumer group "
                "because the embedded consumer protocol is malformed.",
            ) from None
        except CustomAssignorError:
            log.warning("cannot upgrade classic group %s: a custom assignor's user data would be lost", g)
            raise GroupError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {g} to consumer group "
                "because an unsupported custom assignor is in use. Please refer to the documentation "
                "or switch to a default assignor before re-attempting the upgrade.",
            ) from None
        for member in classic.members.values():  # those waiting in a rebalance rejoin the new group
            member.answer_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
            member.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        holder = Group(g, self.store.config.classic, classic.wall_ms)  # keeps the committed offsets
        holder.offsets = classic.offsets
        self.store.classic[g] = holder
        self.groups[g] = group
        self.persist(g, first=[(encode_group_key(GroupKey(g)), None)])
        log.info(
            "classic group %s with %d members converted to a consumer group (epoch %d)",
            g,
            len(group.members),
            group.group_epoch,
        )

    def _downgrade(self, group: ConsumerGroup) -> None:
        """Only classic members remain: the group becomes a classic group again and rebalances."""
        g = group.group_id
        leaving = group.downgrade_pending or set()
        group.downgrade_pending = None
        now = trio.current_time()
        try:
            classic = classic_group_from_consumer(
                group, leaving, self.store.config.classic, self.store.wall_ms, self.names_by_id(), now
            )
        except ProtocolError as exc:  # Kafka refuses the downgrade too; the leavers just go
            log.warning(
                "cannot downgrade consumer group %s: a member's embedded consumer protocol is malformed "
                "(%s); it stays a consumer group",
                g,
                exc,
            )
            members = [group.members[m] for m in leaving if m in group.members]
            for i, member in enumerate(members):
                group.remove(member, "left", bump=i == len(members) - 1)
            self.persist(g)
            return
        holder = self.store.classic.get(g)
        if holder is not None:
            classic.offsets = holder.offsets
        del self.groups[g]
        self.persist(g, last=[(encode_group_key(GroupKey(g)), encode_group_value(classic.to_record()))])
        self.store.classic[g] = classic
        if group.downgrade_rebalance:
            classic.prepare_rebalance(now)
        self.store.wake_timers()
        log.info(
            "consumer group %s converted to a classic group (generation %d, %d members)%s",
            g,
            classic.generation,
            len(classic.members),
            "; rebalancing" if group.downgrade_rebalance else "",
        )

    # ------------------------------------------------------------------ classic members of consumer groups
    def classic_join(self, group_id: str, req: JoinRequest) -> JoinResult:
        """JoinGroup to a consumer group with members (Kafka's classicGroupJoinToConsumerGroup)."""
        group = self.groups[group_id]
        member_id = req.member_id or new_member_id()
        try:
            if len(group.members) >= self.settings.max_size and member_id not in group.members:
                raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED)
            if not group.supports_classic(req.protocol_type, {name for name, _ in req.protocols}):
                raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if req.require_known_member_id and not req.member_id and req.group_instance_id is None:
                log.info("consumer group %s: a classic member without id joins; it rejoins as %s", group_id, member_id)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
            if req.group_instance_id is not None and req.member_id:
                existing = group.members.get(group.static_members.get(req.group_instance_id, ""))
                if existing is None:
                    raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                if existing.member_id != member_id:
                    raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
            try:
                sub = decode_subscription(req.protocols[0][1])
            except ProtocolError as exc:
                log.warning("consumer group %s: malformed subscription from %s: %s", group_id, member_id, exc)
                raise GroupError(ErrorCode.UNKNOWN_SERVER_ERROR) from None
            classic = ClassicMeta(req.session_timeout_ms, list(req.protocols))
            member = group.classic_join(
                member_id,
                req.group_instance_id,
                classic,
                sub,
                to_ids(sub.owned_partitions, self.ids_by_name()),
                req.rebalance_timeout_ms,
                req.client_id,
                req.client_host,
                trio.current_time(),
                self.topics(),
            )
        except GroupError as exc:
            return JoinResult(exc.code, member_id="")
        finally:
            self._settle(group_id)
        return JoinResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            generation=member.member_epoch,
            protocol_type="consumer",
            protocol_name=classic.protocol_name,
        )

    def classic_sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        group = self.groups[group_id]
        if not group.members:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        try:
            member = group.classic_sync(
                member_id, instance_id, generation, protocol_type, protocol_name, trio.current_time()
            )
        except GroupError as exc:
            return SyncResult(exc.code)
        finally:
            self._changed.set()
        assert member.classic is not None  # ConsumerGroup.classic_sync answers classic members only
        assignment = encode_assignment(to_names(member.assigned, self.names_by_id()), member.classic.version())
        return SyncResult(ErrorCode.NONE, protocol_type, protocol_name, assignment)

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        try:
            return self.groups[group_id].classic_heartbeat(member_id, instance_id, generation, trio.current_time())
        except GroupError as exc:
            return exc.code
        finally:
            self._changed.set()

    def classic_leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        try:
            return self.groups[group_id].classic_leave(members)
        finally:
            self._settle(group_id)

    def describe(self, group_id: str, operations: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
            "authorized_operations": operations,
        }
        error = self.store.group_error(group_id)
        group = self.groups.get(group_id)
        if error is None and group is None:
            classic = self.store.classic_group(group_id)
            error = ErrorCode.GROUP_ID_NOT_FOUND
            out["error_message"] = (
                f"Group {group_id} is not a consumer group." if classic is not None else f"Group {group_id} not found."
            )
        if error is not None:
            out["error_code"] = error
            return out
        assert group is not None  # no group and no error is GROUP_ID_NOT_FOUND above
        names = self.names_by_id()

        def listed(assignment: Mapping[bytes, set[int]]) -> dict[str, object]:
            return {
                "topic_partitions": [
                    {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(p)}
                    for t, p in sorted(assignment.items())
                    if p
                ]
            }

        out.update(
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor_name,
        )
        out["members"] = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex or "",  # Kafka: "" when unset
                "assignment": listed(m.assigned),
                "target_assignment": listed(group.target.get(m.member_id, {})),
                "member_type": MEMBER_TYPE_CLASSIC if m.classic is not None else MEMBER_TYPE_CONSUMER,
            }
            for m in group.members.values()
        ]
        return out

    def commit_error(self, group_id: str, member_id: str, epoch: int, api_version: int) -> ErrorCode | None:
        """OffsetCommit to a consumer group: members commit with their current epoch (v9+);
        anyone else (epoch -1, no member) only while the group has no members."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:  # a classic member commits with its member epoch as generation
            return ErrorCode.ILLEGAL_GENERATION if epoch != member.member_epoch else None
        if api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if epoch != member.member_epoch:  # Kafka 4.0: STALE_MEMBER_EPOCH either way (not FENCED)
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def txn_commit_error(self, group_id: str, member_id: str, epoch: int) -> ErrorCode | None:
        """TxnOffsetCommit with a member's id and epoch (a transactional consumer's group
        metadata): Kafka answers a wrong epoch ILLEGAL_GENERATION for both kinds of member; a
        group without members takes commits without a member epoch."""
        group = self.groups[group_id]
        if epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.ILLEGAL_GENERATION if epoch != member.member_epoch else None

    def fetch_error(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode | None:
        group = self.groups.get(group_id)
        if group is None or (epoch < 0 and not member_id):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return None

    def delete(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups: None if `group_id` is no consumer group, else its answer."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self.persist(group_id)
        return ErrorCode.NONE

    def expire(self, group_id: str, offset_tombstones: list[Record]) -> bool:
        """An empty consumer group whose offsets all expired (or that has none) is deleted, as Kafka's
        offset expiry does: the offsets' tombstones, then the group's, in one batch. False (the group
        kept) if that cannot be written."""
        group = self.groups.pop(group_id)
        if not self.persist(group_id, first=offset_tombstones):
            self.groups[group_id] = group
            return False
        log.info("consumer group %s is empty and has no offsets left: deleted", group_id)
        return True

    def drop_unled(self, is_coordinator: Callable[[str], bool]) -> None:
        for group_id in [g for g in self.groups if not is_coordinator(g)]:
            del self.groups[group_id]
            self.persisted.pop(group_id, None)

    # ------------------------------------------------------------------ __consumer_offsets
    def _records(self, group: ConsumerGroup) -> dict[ConsumerGroupKey, bytes]:
        g = group.group_id
        out = {
            ConsumerGroupKey(3, g): encode_consumer_value("ConsumerGroupMetadata", {"epoch": group.group_epoch}),
            ConsumerGroupKey(4, g): encode_consumer_value(
                "ConsumerGroupPartitionMetadata",
                {
                    "topics": [
                        {"topic_id": tid, "topic_name": name, "num_partitions": n, "partition_metadata": []}
                        for name, tid, n in group.subscribed_signature
                    ]
                },
            ),
            ConsumerGroupKey(6, g): encode_consumer_value(
                "ConsumerGroupTargetAssignmentMetadata", {"assignment_epoch": group.assignment_epoch}
            ),
        }
        for m in group.members.values():
            out[ConsumerGroupKey(5, g, m.member_id)] = encode_consumer_value(
                "ConsumerGroupMemberMetadata",
                {
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "server_assignor": m.server_assignor,
                    "classic_member_metadata": None
                    if m.classic is None
                    else {
                        "session_timeout_ms": m.classic.session_timeout_ms,
                        "supported_protocols": [{"name": n, "metadata": meta} for n, meta in m.classic.protocols],
                    },
                },
            )
            out[ConsumerGroupKey(7, g, m.member_id)] = encode_consumer_value(
                "ConsumerGroupTargetAssignmentMember",
                {"topic_partitions": _partitions(group.target.get(m.member_id, {}))},
            )
            out[ConsumerGroupKey(8, g, m.member_id)] = encode_consumer_value(
                "ConsumerGroupCurrentMemberAssignment",
                {
                    "member_epoch": STATIC_LEAVE_EPOCH if m.left_static else m.member_epoch,
                    "previous_member_epoch": m.previous_member_epoch,
                    "state": STATE_CODES[m.state],
                    "assigned_partitions": _partitions(m.assigned),
                    "partitions_pending_revocation": _partitions(m.pending_revocation),
                },
            )
        for regex, resolved in group.resolved_regexes.items():
            out[ConsumerGroupKey(REGEX_KEY_VERSION, g, regex=regex)] = encode_consumer_value(
                "ConsumerGroupRegularExpression",
                {"topics": list(resolved.topics), "version": resolved.version, "timestamp": resolved.timestamp_ms},
            )
        return out

    def persist(self, group_id: str, first: list[Record] | None = None, last: list[Record] | None = None) -> bool:
        """Append what changed in a group since the last write (tombstones for what went), in one
        batch with the `first` and `last` records of a conversion or an expiry; False if that
        could not be written (logged)."""
        group = self.groups.get(group_id)
        current = self._records(group) if group is not None else {}
        before = self.persisted.get(group_id, {})
        metadata_key = ConsumerGroupKey(4, group_id)
        if group is not None and not group.subscribed_signature and metadata_key not in before:
            del current[metadata_key]  # Kafka writes subscription metadata only once it is not empty
        gone = sorted((k for k in before if k not in current), key=lambda k: (k.member == "", -k.version))
        changed = sorted((k for k, v in current.items() if before.get(k) != v), key=lambda k: WRITE_ORDER[k.version])
        if not gone and not changed and not first and not last:
            return True
        records = (
            (first or [])
            + [(encode_consumer_key(k), None) for k in gone]
            + [(encode_consumer_key(k), current[k]) for k in changed]
            + (last or [])
        )
        return self.store.append_changes("consumer", group_id, records, self.persisted, current)

    def replay(self, key: ConsumerGroupKey, value: bytes | None) -> None:
        """Loading `__consumer_offsets`: one KIP-848 record (None: a tombstone)."""
        group = self.groups.get(key.group)
        if value is None:
            self.persisted.get(key.group, {}).pop(key, None)
            if group is None:
                return
            if key.version == 5:
                member = group.members.pop(key.member, None)
                if member is not None and member.instance_id:
                    group.static_members.pop(member.instance_id, None)
            elif key.version == 7:
                group.target.pop(key.member, None)
            elif key.version == REGEX_KEY_VERSION:
                group.resolved_regexes.pop(key.regex, None)
            elif key.version == 3:
                del self.groups[key.group]
                self.persisted.pop(key.group, None)
            return
        try:
            body = decode_consumer_value(key.record_type, value)
        except GroupRecordError as exc:
            log.warning("skipping an unreadable consumer group record of %s: %s", key.group, exc)
            return
        if group is None:
            group = self.groups[key.group] = ConsumerGroup(key.group, self.settings)
        v = key.version
        if v == 3:
            group.group_epoch = body.epoch
        elif v == 4:
            group.subscribed_signature = tuple((t.topic_name, bytes(t.topic_id), t.num_partitions) for t in body.topics)
        elif v == 6:
            group.assignment_epoch = body.assignment_epoch
        elif v == 7:
            group.target[key.member] = {bytes(tp.topic_id): set(tp.partitions) for tp in body.topic_partitions}
        elif v == REGEX_KEY_VERSION:
            group.resolved_regexes[key.regex] = ResolvedRegex(
                tuple(sorted(body.topics or [])), body.version, body.timestamp
            )
            group.regex_version = max(group.regex_version, body.version)
        else:
            member = group.members.get(key.member)
            if member is None:
                member = group.members[key.member] = ConsumerMember(key.member, session_deadline=UNSET)
            if v == 5:
                member.instance_id, member.rack_id = body.instance_id, body.rack_id
                member.client_id, member.client_host = body.client_id, body.client_host
                member.subscribed_topic_names = list(body.subscribed_topic_names or [])
                member.subscribed_topic_regex = body.subscribed_topic_regex
                member.rebalance_timeout_ms, member.server_assignor = body.rebalance_timeout_ms, body.server_assignor
                meta = body.get("classic_member_metadata")
                member.classic = (
                    None
                    if meta is None
                    else ClassicMeta(
                        meta.session_timeout_ms, [(p.name, bytes(p.metadata)) for p in meta.supported_protocols]
                    )
                )
                if member.instance_id:
                    group.static_members[member.instance_id] = member.member_id
            else:
                member.left_static = body.member_epoch == STATIC_LEAVE_EPOCH
                member.member_epoch, member.previous_member_epoch = body.member_epoch, body.previous_member_epoch
                member.assigned = {bytes(tp.topic_id): set(tp.partitions) for tp in body.assigned_partitions}
                member.pending_revocation = {
                    bytes(tp.topic_id): set(tp.partitions) for tp in body.partitions_pending_revocation if tp.partitions
                }
                member.state = _loaded_state(body.state, bool(member.pending_revocation))
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    member.revocation_deadline = UNSET
        self.persisted.setdefault(key.group, {})[key] = bytes(value)

    def _start_loaded_timers(self, now: float) -> None:
        for group in self.groups.values():
            for m in group.members.values():
                if m.session_deadline == UNSET:
                    timeout = (
                        m.classic.session_timeout_ms if m.classic is not None else self.settings.session_timeout_ms
                    )
                    m.session_deadline = now + timeout / 1000
                if m.revocation_deadline == UNSET:
                    m.revocation_deadline = None if m.classic is not None else now + m.rebalance_timeout_ms / 1000

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        while True:
            self._changed = trio.Event()
            self._start_loaded_timers(trio.current_time())
            deadline = min((g.next_deadline() for g in self.groups.values()), default=float("inf"))
            with trio.move_on_at(deadline):
                await self._changed.wait()
            now = trio.current_time()
            for group in list(self.groups.values()):
                try:
                    if group.expire(now):
                        self._settle(group.group_id)
                except Exception:
                    log.exception("expiring members of consumer group %s failed", group.group_id)
