"""DescribeUserScramCredentials: each user's SCRAM mechanisms and iteration counts (never the
salts or keys), with Kafka 4.0's errors and messages."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.sasl import SCRAM_MECHANISM_TYPES
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
VERSIONS = (0, 0)
_TYPES = {name: code for code, name in SCRAM_MECHANISM_TYPES.items()}


def _infos(mechanisms: dict[str, int]) -> list[dict[str, Any]]:
    return [{"mechanism": _TYPES[m], "iterations": i} for m, i in sorted(mechanisms.items()) if m in _TYPES]


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    denied = ctx.authorizer is not None and not ctx.authorizer.authorize_cluster("DESCRIBE")
    known = {} if denied else await ctx.credentials.describe()
    results = []
    if denied:
        pass
    elif not request.body.users:
        results = [
            {"user": u, "error_code": ErrorCode.NONE, "error_message": "", "credential_infos": _infos(m)}
            for u, m in sorted(known.items())
        ]
    else:
        names = [u.name for u in request.body.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.DUPLICATE_RESOURCE,
                        "credential_infos": [],
                        "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                        f"single request: {name}",
                    }
                )
            elif name not in known:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                        "credential_infos": [],
                        "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                    }
                )
            else:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.NONE,
                        "error_message": "",
                        "credential_infos": _infos(known[name]),
                    }
                )
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED if denied else ErrorCode.NONE,
        "error_message": None if denied else "",
        "results": results,
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
