"""FindCoordinator: the broker leading a group's `__consumer_offsets` partition coordinates it
(key type 0); the broker leading a transactional id's `__transaction_state` partition coordinates
that transaction (key type 1); the broker leading the `__share_group_state` partition of a
share-partition ``group:topicId:partition`` is its share coordinator (key type 2, v6+, asked by
share-partition leaders; INVALID_REQUEST in older versions and for a malformed key, as Kafka 4.3
answers). Standalone: this broker, always.

v0-3 ask for one key, v4+ for a batch. Asking creates the internal topic if it is missing, as
Kafka does.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..request_context import RequestContext
from ._common import INVALID_REQUEST_MESSAGE

API_KEY = ApiKey.FIND_COORDINATOR
VERSIONS = (0, 6)
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
log = logging.getLogger("strom.find_coordinator")
MESSAGES = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.INVALID_REQUEST: INVALID_REQUEST_MESSAGE,
    ErrorCode.INVALID_GROUP_ID: "The group id is empty.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
}


def _unavailable(key: str, code: ErrorCode) -> dict[str, Any]:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": MESSAGES.get(code)}


async def _coordinator(ctx: RequestContext, key: str, key_type: int, version: int) -> dict[str, Any]:
    if key_type == SHARE_KEY_TYPE and version >= 4:
        return await _share_coordinator(ctx, key, version)
    if key_type == TRANSACTION_KEY_TYPE and not allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return _unavailable(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if key_type == GROUP_KEY_TYPE and not allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, key):
        return _unavailable(key, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if key_type == TRANSACTION_KEY_TYPE:
        return await _transaction_coordinator(ctx, key)
    if key_type != GROUP_KEY_TYPE:
        return _unavailable(key, ErrorCode.INVALID_REQUEST)
    if not key:
        return _unavailable(key, ErrorCode.INVALID_GROUP_ID)
    return await _located(ctx, key, "__consumer_offsets", ctx.groups.ensure_topic, ctx.groups.coordinator_of)


async def _located(
    ctx: RequestContext,
    key: str,
    topic: str,
    ensure_topic: Callable[[], Awaitable[None]],
    coordinator_of: Callable[[str], int | None],
) -> dict[str, Any]:
    """The answer for ``key``: the leader of its partition of the internal ``topic`` (made first
    if missing), COORDINATOR_NOT_AVAILABLE while there is none."""
    try:
        await ensure_topic()
    except TopicError as exc:
        log.error("cannot create %s: %s", topic, exc.message)
        return _unavailable(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    leader = coordinator_of(key)
    address = ctx.metadata.broker_endpoint(leader) if leader is not None else None
    if address is None:
        return _unavailable(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return {
        "key": key,
        "node_id": leader,
        "host": address[0],
        "port": address[1],
        "error_code": ErrorCode.NONE,
        "error_message": None,
    }


def _valid_share_key(key: str) -> bool:
    """``group:topicId:partition`` as Kafka's SharePartitionKey parses it."""
    parts = key.split(":")
    if len(parts) != 3 or not parts[0]:
        return False
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "==")
        int(parts[2])  # any int: Kafka 4.3 leaves the partition unchecked
        return len(raw) == 16
    except ValueError:
        return False


async def _share_coordinator(ctx: RequestContext, key: str, version: int) -> dict[str, Any]:
    share = ctx.share_coordinator
    if version < 6 or share is None or not _valid_share_key(key):
        return {**_unavailable(key, ErrorCode.INVALID_REQUEST), "error_message": None}
    if not allowed_cluster(ctx, Operation.CLUSTER_ACTION):
        return _unavailable(key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return await _located(ctx, key, "__share_group_state", share.ensure_topic, share.coordinator_of)


async def _transaction_coordinator(ctx: RequestContext, key: str) -> dict[str, Any]:
    if not key:
        return _unavailable(key, ErrorCode.INVALID_REQUEST)
    return await _located(ctx, key, "__transaction_state", ctx.txn.state.ensure_topic, ctx.txn.state.coordinator_of)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if request.header.api_version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [
                await _coordinator(ctx, key, body.key_type, request.header.api_version) for key in body.coordinator_keys
            ],
        }
    found = await _coordinator(ctx, body.key, body.key_type, request.header.api_version)
    del found["key"]
    if found["error_code"] == ErrorCode.NONE:
        found["error_message"] = "NONE"  # as Kafka answers v1-3: the error's name
    return {"throttle_time_ms": 0, **found}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, top_level_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every key asked for (v4+), else at the top level with no coordinator."""
    if request.header.api_version >= 4:
        out = {
            "throttle_time_ms": 0,
            "coordinators": [
                {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}
                for k in request.body.get("coordinator_keys") or []
            ],
        }
    else:
        out = top_level_error_response(API_KEY, code, node_id=-1, host="", port=-1)
    return finish(API_KEY, request, out, code, message)
