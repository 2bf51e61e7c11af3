"""DeleteAcls: remove the ACL bindings matching each filter; SECURITY_DISABLED without an authorizer."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext

API_KEY = ApiKey.DELETE_ACLS
VERSIONS = (1, 3)  # Kafka 4.0 removed v0


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    authorizer = ctx.authorizer
    if authorizer is None:
        return {
            "throttle_time_ms": 0,
            "filter_results": [
                {
                    "error_code": ErrorCode.SECURITY_DISABLED,
                    "error_message": "No Authorizer is configured.",
                    "matching_acls": [],
                }
                for _ in request.body.filters
            ],
        }
    return await authorizer.delete_acls_response(request)


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)
