"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, reconcile and leave a consumer group
(`group.protocol=consumer`); the logic is in `strom.broker.group.consumer`."""
from __future__ import annotations

import contextlib

from strom.broker import context
from strom.broker.errors import TopicError
from strom.protocol.schema import ApiKey

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
VERSIONS = (0, 1)


async def handle(broker, request) -> dict:
    with contextlib.suppress(TopicError):  # offsets are committed to __consumer_offsets later
        await broker.groups.ensure_topic()
    header = request.header
    return broker.groups.consumer.heartbeat(header.api_version, request.body, header.client_id or "",
                                            context.client_host.get())
