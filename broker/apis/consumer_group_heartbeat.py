"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, reconcile and leave a consumer group
(`group.protocol=consumer`); the logic is in `strom.broker.group.consumer`."""
from __future__ import annotations

import contextlib

from strom.broker import context
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
VERSIONS = (0, 1)


async def handle(broker, request) -> dict:
    if not allowed(broker, Operation.READ, ResourceType.GROUP, request.body.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}
    with contextlib.suppress(TopicError):  # offsets are committed to __consumer_offsets later
        await broker.groups.ensure_topic()
    header = request.header
    return broker.groups.consumer.heartbeat(header.api_version, request.body, header.client_id or "",
                                            context.client_host.get())
