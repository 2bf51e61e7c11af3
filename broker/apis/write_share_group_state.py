"""WriteShareGroupState (broker to broker, KIP-932): a share-partition leader writes what changed
(acknowledgements, releases, a moved start offset) before it answers its consumers. Version 1
carries the delivery-complete count (KIP-1226). See `_share_group_state` and
`coordinator.share.coordinator`."""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.share.coordinator import ShareCoordinator, StateResult
from strom.broker.coordinator.share.persister import SharePartitionKey, StateBatch
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext
from ._error_response import finish
from ._share_group_state import answer, error_answer

API_KEY = ApiKey.WRITE_SHARE_GROUP_STATE
VERSIONS = (0, 1)


def _render(index: int, result: StateResult) -> dict[str, Any]:
    return {"partition": index, "error_code": result.error, "error_message": result.message}


async def _call(coordinator: ShareCoordinator, key: SharePartitionKey, data: Any) -> StateResult:
    batches = [
        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in data.state_batches or []
    ]
    return await coordinator.write_state(
        key,
        data.state_epoch,
        data.leader_epoch,
        data.start_offset,
        batches,
        getattr(data, "delivery_complete_count", -1),  # v1+
    )


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await answer(ctx, request, "write share group state", _call, _render)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    return finish(API_KEY, request, error_answer(request, code, message, _render), code, message)
