"""DeleteShareGroupState (broker to broker, KIP-932): the group coordinator forgets a
share-partition's state (its group, or the group's offsets for a topic, are deleted). See
`_share_group_state` and `coordinator.share.coordinator`."""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.share.coordinator import ShareCoordinator, StateResult
from strom.broker.coordinator.share.persister import SharePartitionKey
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext
from ._error_response import finish
from ._share_group_state import answer, error_answer

API_KEY = ApiKey.DELETE_SHARE_GROUP_STATE
VERSIONS = (0, 0)


def _render(index: int, result: StateResult) -> dict[str, Any]:
    return {"partition": index, "error_code": result.error, "error_message": result.message}


async def _call(coordinator: ShareCoordinator, key: SharePartitionKey, data: Any) -> StateResult:
    return await coordinator.delete_state(key)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await answer(ctx, request, "delete share group state", _call, _render)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    return finish(API_KEY, request, error_answer(request, code, message, _render), code, message)
