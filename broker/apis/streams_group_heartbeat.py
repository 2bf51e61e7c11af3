"""StreamsGroupHeartbeat (KIP-1071): join, heartbeat, reconcile and leave a streams group
(Kafka Streams with `group.protocol=streams`); the logic is in
`strom.broker.coordinator.group.streams_groups`.

As Kafka's KafkaApis: the group needs READ; a joining member's topology names its source and
internal topics, which need DESCRIBE; internal topics the coordinator reports missing are created
here when the member may CREATE them (else the status says why not), and the member is told by
the MISSING_INTERNAL_TOPICS status until they exist."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import trio

from strom.broker import context
from strom.broker.coordinator.group.streams_groups import MISSING_INTERNAL_TOPICS, TopicInfo, refused
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.STREAMS_GROUP_HEARTBEAT
VERSIONS = (0, 0)

log = logging.getLogger("strom.group.streams")


def _topology_topics(topology: Any) -> set[str]:
    names: set[str] = set()
    for sub in topology.subtopologies or ():
        names.update(sub.source_topics or ())
        names.update(sub.repartition_sink_topics or ())
        names.update(t.name for t in sub.state_changelog_topics or ())
        names.update(t.name for t in sub.repartition_source_topics or ())
    return names


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if body.topology is not None:
        denied = sorted(
            t for t in _topology_topics(body.topology) if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t)
        )
        if denied:
            return refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Unauthorized topics {', '.join(denied)}")
    with contextlib.suppress(TopicError):  # offsets are committed to __consumer_offsets later
        await ctx.groups.ensure_topic()
    header = request.header
    answer, missing = ctx.groups.streams.heartbeat(
        body, header.client_id or "", context.client_host.get(), trio.current_time()
    )
    if missing:
        refused_topics = await _create_internal_topics(ctx, missing)
        if refused_topics:
            answer["status"].append(
                {
                    "status_code": MISSING_INTERNAL_TOPICS,
                    "status_detail": f"Unauthorized to CREATE on topics {', '.join(refused_topics)}.",
                }
            )
    return answer


async def _create_internal_topics(ctx: RequestContext, missing: list[TopicInfo]) -> list[str]:
    """Create the internal topics a streams group lacks (their partitions and configs as
    configured, the broker's default replication factor where the topology asks for none);
    the names the client may not CREATE."""
    refused_topics: list[str] = []
    for info in missing:
        if not (
            allowed(ctx, Operation.CREATE, ResourceType.CLUSTER, "kafka-cluster")
            or allowed(ctx, Operation.CREATE, ResourceType.TOPIC, info.name)
        ):
            refused_topics.append(info.name)
            continue
        try:
            replication = info.replication_factor if info.replication_factor > 0 else -1
            await ctx.admin.create_topic(info.name, info.partitions, replication, dict(info.configs))
            log.info("created internal topic %s (%d partitions) of a streams group", info.name, info.partitions)
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("could not create internal topic %s: %s", info.name, exc)
    return refused_topics


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)
