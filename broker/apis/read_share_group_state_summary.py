"""ReadShareGroupStateSummary (broker to broker, KIP-932): a share-partition's epochs, start offset
and (v1, KIP-1226) delivery-complete count without its batches, for DescribeShareGroupOffsets.
See `_share_group_state` and `coordinator.share.coordinator`."""

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

API_KEY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY
VERSIONS = (0, 1)


def _render(index: int, result: StateResult) -> dict[str, Any]:
    return {
        "partition": index,
        "error_code": result.error,
        "error_message": result.message,
        "state_epoch": result.state_epoch,
        "leader_epoch": result.leader_epoch,
        "start_offset": result.start_offset,
        "delivery_complete_count": result.delivery_complete_count,
    }


async def _call(coordinator: ShareCoordinator, key: SharePartitionKey, data: Any) -> StateResult:
    return coordinator.read_state_summary(key)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await answer(ctx, request, "read share group state summary", _call, _render)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    return finish(API_KEY, request, error_answer(request, code, message, _render), code, message)
