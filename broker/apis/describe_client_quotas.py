"""DescribeClientQuotas: the quota configs of users and client ids (`kafka-configs.sh --describe
--entity-type users/clients`), filtered by components: EXACT name, DEFAULT entity, or ANY name
of an entity type; `strict` keeps only entities with exactly the filtered types."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..quotas import CLIENT_ID, IP, USER
from ..request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
VERSIONS = (0, 1)
EXACT, DEFAULT, ANY = 0, 1, 2


def _error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed_cluster(ctx, Operation.DESCRIBE_CONFIGS):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    filters: dict[str, tuple[int, str | None]] = {}
    for c in body.components:
        if c.entity_type in filters:
            return _error(
                ErrorCode.INVALID_REQUEST, f"Entity type {c.entity_type} cannot appear more than once in the filter."
            )
        if c.entity_type not in (USER, CLIENT_ID, IP):
            return _error(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}")
        if c.match_type not in (EXACT, DEFAULT, ANY):
            return _error(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
        if c.match_type == EXACT and c.match is None:
            return _error(
                ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
            )
        filters[c.entity_type] = (c.match_type, c.match)
    if IP in filters and len(filters) > 1:
        return _error(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component "
            "should not be used with user or clientId filter component.",
        )
    entries = []
    for entity, values in ctx.quotas.entries.items():
        names = dict(entity)
        if body.strict and set(names) != set(filters):
            continue
        ok = True
        for etype, (match_type, match) in filters.items():
            if etype not in names:
                ok = False
            elif match_type == EXACT and names[etype] != match:
                ok = False
            elif match_type == DEFAULT and names[etype] is not None:
                ok = False
        if ok and values:
            entries.append(
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())],
                }
            )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": "", "entries": entries}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)
