"""AlterUserScramCredentials: add, replace and delete users' SCRAM credentials (what
`kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users` sends:
the client salts and hashes, the broker keeps stored and server keys). A user with any invalid
alteration keeps all of its credentials unchanged; errors and messages are Kafka 4.0's."""

from __future__ import annotations

from collections import Counter
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISM_TYPES, scram_credential_from_salted
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
VERSIONS = (0, 0)


def _error(
    change: Any, deletion: bool, counts: Counter[tuple[str, int]], existing: dict[str, Any]
) -> tuple[int, str] | None:
    if not change.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = SCRAM_MECHANISM_TYPES.get(change.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if counts[(change.name, change.mechanism)] > 1:
        return ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
    if deletion:
        if mechanism not in existing.get(change.name, {}):
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    elif change.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    elif change.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    changes = [(c, True) for c in body.deletions] + [(c, False) for c in body.upsertions]
    users = list(dict.fromkeys(c.name for c, _ in changes))
    if ctx.authorizer is not None and not ctx.authorizer.authorize_cluster("ALTER"):
        return {
            "throttle_time_ms": 0,
            "results": [
                {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None} for u in users
            ],
        }
    existing = await ctx.credentials.describe()
    counts = Counter((c.name, c.mechanism) for c, _ in changes)
    failed: dict[str, tuple[int, str]] = {}
    for change, deletion in changes:
        if change.name not in failed:
            error = _error(change, deletion, counts, existing)
            if error is not None:
                failed[change.name] = error
    upserts, deletions = {}, set()
    for change, deletion in changes:
        if change.name in failed:
            continue
        mechanism = SCRAM_MECHANISM_TYPES[change.mechanism]
        if deletion:
            deletions.add((change.name, mechanism))
        else:
            upserts[(change.name, mechanism)] = scram_credential_from_salted(
                mechanism, change.salted_password, change.salt, change.iterations
            )
    if upserts or deletions:
        await ctx.credentials.alter(upserts, deletions)
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "user": u,
                "error_code": failed[u][0] if u in failed else ErrorCode.NONE,
                "error_message": failed[u][1] if u in failed else None,
            }
            for u in users
        ],
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
