"""AlterClientQuotas: set or remove quota configs of users, client ids, IPs and their defaults
(`kafka-configs.sh --alter --entity-type users/clients --add-config producer_byte_rate=...`,
`--entity-type ips --add-config connection_creation_rate=N`).

Each entry is checked and applied on its own, as Kafka does. Standalone, the configs are kept in
the broker's metadata file; in a ZooKeeper cluster under /config/users and /config/clients, as
ZooKeeper-era Kafka keeps them, /config/ips for IPs (`strom.broker.zk.quotas_zk`)."""

from __future__ import annotations

import ipaddress
import math
from typing import Any

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..errors import TopicError
from ..quotas import CLIENT_ID, CONNECTION_CREATION_RATE, IP, KEYS, USER, Entity, entity_key
from ..request_context import RequestContext

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
VERSIONS = (0, 1)


async def _check(entry: Any) -> tuple[ErrorCode, str | None, Entity | None]:
    pairs = list(dict((e.entity_type, e.entity_name) for e in entry.entity).items())  # a type twice: the last counts
    if not pairs:
        return ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity", None
    types = {t for t, _ in pairs}
    for t in types:
        if t not in (USER, CLIENT_ID, IP):
            return ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {t}", None
    if IP in types and len(types) > 1:
        return (
            ErrorCode.INVALID_REQUEST,
            ("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
            None,
        )  # sic, Kafka's words
    allowed_keys = KEYS[IP] if IP in types else KEYS[USER]
    for op in entry.ops:
        if op.key not in allowed_keys:
            return ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}", None
        if not op.remove and (not math.isfinite(op.value) or op.value <= 0):
            return ErrorCode.INVALID_REQUEST, f"Quota {op.key} must be greater than 0", None
        if not op.remove and op.key == CONNECTION_CREATION_RATE and op.value != int(op.value):
            return ErrorCode.INVALID_REQUEST, f"{op.key} cannot be a fractional value.", None
    if IP in types:
        name = dict(pairs)[IP]
        if name is not None and not await _valid_host(name):
            return ErrorCode.INVALID_REQUEST, f"{name} is not a valid IP or resolvable host.", None
    return ErrorCode.NONE, None, entity_key(pairs)


async def _valid_host(name: str) -> bool:
    """An IP address, or a name that resolves (as Kafka's InetAddress.getByName)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        with trio.move_on_after(5):
            return bool(await trio.socket.getaddrinfo(name, None))
    except (OSError, UnicodeError):
        return False
    return False


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    results: list[dict[str, Any]] = []
    quotas = {e: dict(v) for e, v in ctx.quotas.entries.items()}
    changed = False
    for entry in body.entries:
        entity = [
            {"entity_type": t, "entity_name": n}
            for t, n in sorted(dict((e.entity_type, e.entity_name) for e in entry.entity).items())
        ]
        if not allowed_cluster(ctx, Operation.ALTER_CONFIGS):
            results.append(
                {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "entity": entity}
            )
            continue
        code, message, key = await _check(entry)
        if code == ErrorCode.NONE and key is not None and not body.validate_only:  # key: None on an error
            values = quotas.setdefault(key, {})
            for op in entry.ops:
                if op.remove:
                    values.pop(op.key, None)
                else:
                    values[op.key] = op.value
            changed = True
        results.append({"error_code": code, "error_message": message, "entity": entity})
    if changed:
        try:
            await ctx.admin.alter_client_quotas(quotas)
        except TopicError as exc:
            for r in results:
                if r["error_code"] == ErrorCode.NONE:
                    r["error_code"], r["error_message"] = exc.code, str(exc)
    return {"throttle_time_ms": 0, "entries": results}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)
