"""DescribeGroups: state, protocol and members; members' metadata only once Stable (their last
assignment always, as Kafka shows it).

A group that does not exist is described as Dead with no error, as Kafka does up to v5.
"""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed

from strom.broker.group.state import GroupState

from ._common import OPERATIONS_NOT_REQUESTED

API_KEY = ApiKey.DESCRIBE_GROUPS
VERSIONS = (0, 5)
# READ, DESCRIBE, DELETE: what a client may do to a group without authorization checks.
GROUP_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 6, 8))


def _describe(broker, group_id: str, with_operations: bool) -> dict:
    operations = GROUP_AUTHORIZED_OPERATIONS if with_operations else OPERATIONS_NOT_REQUESTED
    if with_operations and broker.authorizer is not None:
        operations = broker.authorizer.authorized_operations(ResourceType.GROUP, group_id)
    if not allowed(broker, Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group_id, "group_state": "",
                "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": operations}
    out = {"error_code": ErrorCode.NONE, "group_id": group_id, "group_state": GroupState.DEAD.value,
           "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": operations}
    error = broker.groups.group_error(group_id) if group_id else (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if broker.groups.loading else None)
    if error is not None:
        out["error_code"] = error
        return out
    group = broker.groups.get(group_id)
    if group is None or broker.groups.consumer.get(group_id) is not None:
        return out  # a KIP-848 consumer group is no classic group: Dead, as Kafka answers up to v5
    stable = group.state is GroupState.STABLE
    out.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
               protocol_data=(group.protocol_name or "") if stable else "")
    out["members"] = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                       "client_id": m.client_id, "client_host": m.client_host,
                       "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                       "member_assignment": m.assignment}
                      for m in group.members.values()]
    return out


async def handle(broker, request) -> dict:
    body = request.body
    return {"throttle_time_ms": 0,
            "groups": [_describe(broker, g, body.include_authorized_operations) for g in body.groups]}
