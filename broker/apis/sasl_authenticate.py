"""SaslAuthenticate outside of authentication (see ``sasl_handshake``): ILLEGAL_SASL_STATE."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext

API_KEY = ApiKey.SASL_AUTHENTICATE
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.ILLEGAL_SASL_STATE,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)
