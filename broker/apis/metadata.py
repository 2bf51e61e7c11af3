"""Metadata: brokers, cluster id, controller, and topics with their partitions' leaders and ISRs.

Requested topics that do not exist are created when `auto.create.topics.enable` is on and the
request allows it (v4+), as Kafka does.

v13 (KIP-1102) adds a top-level error code. Kafka 4.0 sets it only in the answer to a request that
failed as a whole; REBOOTSTRAP_REQUIRED, which tells a client to bootstrap again, no 4.0 broker
sends. Strom answers every Metadata request it can parse in full (a handler failure closes the
connection), so the top-level code is NONE.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..auth.acl import CLUSTER_NAME
from ..request_context import RequestContext
from ..topics import TopicInfo, topic_name_error
from ._common import CLUSTER_AUTHORIZED_OPERATIONS, OPERATIONS_NOT_REQUESTED, TOPIC_AUTHORIZED_OPERATIONS, ZERO_UUID

API_KEY = ApiKey.METADATA
VERSIONS = (0, 13)


def _partitions(ctx: RequestContext, info: TopicInfo) -> list[dict[str, Any]]:
    out = []
    for index in range(ctx.metadata.listed_partitions(info)):
        view = ctx.metadata.partition_view(info.name, index)
        if view is None:
            out.append(
                {
                    "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition_index": index,
                    "leader_id": -1,
                    "replica_nodes": [],
                    "isr_nodes": [],
                    "offline_replicas": [],
                }
            )
            continue
        leader, epoch, replicas, isr, offline = view
        out.append(
            {
                "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": epoch,
                "replica_nodes": replicas,
                "isr_nodes": isr,
                "offline_replicas": offline,
            }
        )
    return out


def _topic(ctx: RequestContext, info: TopicInfo, operations: int) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.internal,
        "partitions": _partitions(ctx, info),
        "topic_authorized_operations": operations,
    }


def _ready(ctx: RequestContext, info: TopicInfo) -> bool:
    """Whether the topic is listed: in a cluster, once the controller wrote its first partition's
    state (before, a ZooKeeper-mode Kafka broker does not know the topic yet)."""
    return info.partitions == 0 or ctx.metadata.listed_partitions(info) > 0


def _missing(name: str | None, topic_id: bytes | None, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id or ZERO_UUID, "partitions": []}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    body = request.body
    operations = (
        TOPIC_AUTHORIZED_OPERATIONS
        if version >= 8 and body.include_topic_authorized_operations
        else OPERATIONS_NOT_REQUESTED
    )
    allow_create = body.allow_auto_topic_creation if version >= 4 else True
    requested = body.topics
    if version < 12 and requested and any(t.name is None for t in requested):
        return _unnamed_topics(requested)
    topics = []
    if requested is None or (version == 0 and not requested):
        # with an authorizer, only the topics the principal may describe
        topics = [
            _topic(ctx, info, operations)
            for info in ctx.metadata.all_topics()
            if _ready(ctx, info) and allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, info.name)
        ]
    else:
        for wanted in requested:
            topics.append(await _lookup(ctx, wanted, allow_create, operations))
    if ctx.authorizer is not None and operations != OPERATIONS_NOT_REQUESTED:
        for topic in topics:
            if topic["error_code"] == ErrorCode.NONE:
                topic["topic_authorized_operations"] = ctx.authorizer.authorized_operations(
                    ResourceType.TOPIC, topic["name"]
                )
    cluster_operations = (
        CLUSTER_AUTHORIZED_OPERATIONS
        if 8 <= version <= 10 and body.include_cluster_authorized_operations
        else OPERATIONS_NOT_REQUESTED
    )
    if ctx.authorizer is not None and cluster_operations != OPERATIONS_NOT_REQUESTED:
        cluster_operations = ctx.authorizer.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": node, "host": host, "port": port, "rack": rack}
            for node, host, port, rack in ctx.metadata.live_brokers()
        ],
        "cluster_id": ctx.metadata.cluster_id(),
        "controller_id": ctx.metadata.controller_id(),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
        "error_code": ErrorCode.NONE,
    }


def _unnamed_topics(requested: Any) -> dict[str, Any]:
    """v10-11 carry topic ids but a topic must be named (its name is not nullable in the answer):
    as Kafka 4.0, every topic INVALID_REQUEST with an empty name, and no brokers."""
    return {
        "throttle_time_ms": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": [_missing("", t.topic_id, ErrorCode.INVALID_REQUEST) for t in requested],
        "cluster_authorized_operations": OPERATIONS_NOT_REQUESTED,
        "error_code": ErrorCode.NONE,
    }


async def _lookup(ctx: RequestContext, wanted: Any, allow_create: bool, operations: int) -> dict[str, Any]:
    name = wanted.name
    topic_id = wanted.get("topic_id")
    if name is None:
        info = ctx.metadata.topic_by_id(topic_id)
        if info is None or not _ready(ctx, info):
            return _missing(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID)
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, info.name):
            return _missing(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return _topic(ctx, info, operations)
    if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
        return _missing(name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    info = ctx.metadata.topic(name)
    if info is not None and not _ready(ctx, info):  # being created: the client asks again
        return _missing(
            name, None, ErrorCode.LEADER_NOT_AVAILABLE if allow_create else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    if info is None:
        if topic_name_error(name):
            return _missing(name, None, ErrorCode.INVALID_TOPIC_EXCEPTION)
        if (
            allow_create
            and ctx.authorizer is not None
            and not (allowed_cluster(ctx, Operation.CREATE) or allowed(ctx, Operation.CREATE, ResourceType.TOPIC, name))
        ):
            return _missing(name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if allow_create:
            info = await ctx.admin.auto_create(name)
        if info is None:
            return _missing(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return _topic(ctx, info, operations)


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)
