"""DescribeCluster: the cluster id, controller and live brokers (the admin client's view).

v2 (KIP-1073) can ask for fenced brokers too and marks each broker fenced or not. A KRaft broker
that stops heartbeating stays registered, fenced; a Strom broker is registered by its ephemeral
ZooKeeper node, which goes with its session, so every registered broker is live and unfenced,
and including fenced brokers lists the same brokers.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster, cluster_operations
from ..request_context import RequestContext
from ._common import CLUSTER_AUTHORIZED_OPERATIONS, OPERATIONS_NOT_REQUESTED

API_KEY = ApiKey.DESCRIBE_CLUSTER
VERSIONS = (0, 2)
BROKERS_ENDPOINT = 1
_ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}  # Kafka's EndpointType names, as its messages show them


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    if not allowed_cluster(ctx, Operation.DESCRIBE):
        return {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "endpoint_type": BROKERS_ENDPOINT,
            "cluster_id": ctx.metadata.cluster_id(),
            "controller_id": -1,
            "brokers": [],
            "cluster_authorized_operations": OPERATIONS_NOT_REQUESTED,
        }
    if request.header.api_version >= 1 and request.body.endpoint_type != BROKERS_ENDPOINT:
        # as Kafka's broker listener: the request wanted another endpoint type (controllers)
        wanted = _ENDPOINT_TYPES.get(request.body.endpoint_type, request.body.endpoint_type)
        return {
            "error_code": ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "error_message": "The request was sent to an endpoint of type BROKER, "
            f"but we wanted an endpoint of type {wanted}",
            "endpoint_type": BROKERS_ENDPOINT,
            "cluster_id": "",
        }
    return {
        "error_code": ErrorCode.NONE,
        "endpoint_type": BROKERS_ENDPOINT,
        "cluster_id": ctx.metadata.cluster_id(),
        "controller_id": ctx.metadata.controller_id(),
        "brokers": [
            {"broker_id": node, "host": host, "port": port, "rack": rack, "is_fenced": False}
            for node, host, port, rack in ctx.metadata.live_brokers()
        ],
        "cluster_authorized_operations": (
            cluster_operations(ctx, CLUSTER_AUTHORIZED_OPERATIONS)
            if request.body.include_cluster_authorized_operations
            else OPERATIONS_NOT_REQUESTED
        ),
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
