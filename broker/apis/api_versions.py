"""ApiVersions: which APIs and versions this broker answers, computed from the registry."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..request_context import RequestContext

API_KEY = ApiKey.API_VERSIONS
VERSIONS = (0, 5)
ROUTING_VERSION = 5  # KIP-1242 (Kafka 4.4): the client says which cluster and node it means to reach


# Finalized feature levels (v3+, tagged), as a Kafka 4.0 cluster answers. transaction.version 2:
# KIP-890 part 2 (EndTxn v5 bumps the epoch of every transaction, Produce v12 and TxnOffsetCommit
# v5 add partitions to it), which clients that read this (the Java client 4.0) then use; clients
# that do not (librdkafka, kafka-python, aiokafka, kafkajs) keep the classic requests, which Strom
# still serves. Features with a minimum of 0 (transaction.version supports 0-2) are not listed as
# supported, as Kafka 4.0 leaves them out of ApiVersions. group.version 1: the KIP-848 consumer
# group protocol (ConsumerGroupHeartbeat) is on, as in Kafka 4.0.
FINALIZED_FEATURES = [
    {"name": "group.version", "min_version_level": 1, "max_version_level": 1},
    {"name": "transaction.version", "min_version_level": 2, "max_version_level": 2},
]
FINALIZED_FEATURES_EPOCH = 1
# What transaction.version 2 needs a broker to serve (api key: lowest max version): a client that
# reads the feature sends these versions.
TV2_REQUESTS = {ApiKey.END_TXN: 5, ApiKey.PRODUCE: 12, ApiKey.TXN_OFFSET_COMMIT: 5}


def features_for(api_keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The finalized features an ApiVersions answer listing ``api_keys`` may carry (a version cap
    that hides what transaction version 2 needs also hides the feature, as older Kafka answered)."""
    highest = {a["api_key"]: a["max_version"] for a in api_keys}
    tv2 = all(highest.get(k, -1) >= v for k, v in TV2_REQUESTS.items())
    return [f for f in FINALIZED_FEATURES if tv2 or f["name"] != "transaction.version"]


def body(error: int = ErrorCode.NONE, supported: Sequence[tuple[int, int, int]] | None = None) -> dict[str, Any]:
    """The answer with ``error``: every API of ``supported`` (default: the registry's) when none.
    As Kafka (KIP-511): to a version it does not know (UNSUPPORTED_VERSION), only ApiVersions' own
    range, from which the client picks the version to ask again with; to any other error, no API."""
    if supported is None:
        from . import SUPPORTED

        supported = SUPPORTED
    listed = [
        (k, lo, hi)
        for k, lo, hi in supported
        if error == ErrorCode.NONE or (error == ErrorCode.UNSUPPORTED_VERSION and k == API_KEY)
    ]
    out: dict[str, Any] = {
        "error_code": error,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in listed],
        "throttle_time_ms": 0,
    }
    if error == ErrorCode.NONE:
        out.update(finalized_features_epoch=FINALIZED_FEATURES_EPOCH, finalized_features=features_for(out["api_keys"]))
    return out


# KIP-511: from v3 the client names its software; Kafka refuses names outside this pattern.
SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    if request.header.api_version >= 3:
        b = request.body
        if not (
            SOFTWARE_NAME.fullmatch(b.client_software_name or "")
            and SOFTWARE_NAME.fullmatch(b.client_software_version or "")
        ):
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time_ms": 0}
    if request.header.api_version >= ROUTING_VERSION:
        b = request.body
        if (b.cluster_id is None) != (b.node_id < 0):  # both or neither, as Kafka's isValid
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time_ms": 0}
        if b.cluster_id is not None and (b.cluster_id != ctx.metadata.cluster_id() or b.node_id != ctx.node_id):
            # a connection that reached another broker than the client meant (a reused address):
            # the client bootstraps again
            return {"error_code": ErrorCode.REBOOTSTRAP_REQUIRED, "api_keys": [], "throttle_time_ms": 0}
    return body(supported=ctx.api_versions.advertised())  # the ApiVersionManager (server/dispatch.py)


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    with this broker's versions (as Kafka, so the client can pick one)."""
    return finish(API_KEY, request, body(code), code, message)
