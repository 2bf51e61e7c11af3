"""AlterConfigs: replace a topic's whole set of config overrides, or a broker's dynamic configs
(the legacy, non-incremental API)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..config import BROKER_CONFIGS
from ..dynamic_config import DEFAULT, check_per_ip, check_positive, check_value, not_dynamic
from ..errors import TopicError
from ..request_context import RequestContext
from .describe_configs import BROKER, TOPIC

API_KEY = ApiKey.ALTER_CONFIGS
VERSIONS = (0, 2)


async def apply_broker(
    ctx: RequestContext, resource: Any, new_configs: dict[str, Any], validate_only: bool
) -> dict[str, Any]:
    """A broker resource (this broker's id, or "" for the cluster default): replace its dynamic
    configs (`strom.broker.dynamic_config`), refusing keys that cannot change at run time."""
    result = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }
    name = resource.resource_name or ""
    try:
        if not allowed_cluster(ctx, Operation.ALTER_CONFIGS):
            raise TopicError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        if name != DEFAULT:
            try:
                node = int(name)
            except ValueError:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
                ) from None
            if node != ctx.node_id:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.node_id}, but received {name}"
                )
        fixed = not_dynamic(new_configs, BROKER_CONFIGS)
        if fixed:
            raise TopicError(
                ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({', '.join(fixed)})"
            )
        for key, value in new_configs.items():
            problem = check_value(key, value)
            if problem:
                raise TopicError(ErrorCode.INVALID_REQUEST, problem)
        # then, as Kafka: the configs as a whole, then each reconfigurable part
        problem = check_per_ip(ctx.dynamic_configs, name, new_configs) or next(
            (p for p in (check_positive(k, v) for k, v in new_configs.items()) if p), None
        )
        if problem:
            raise TopicError(ErrorCode.INVALID_REQUEST, problem)
        if not validate_only:
            await ctx.admin.set_broker_configs(name, {k: v for k, v in new_configs.items() if v is not None})
    except TopicError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
    return result


async def apply(ctx: RequestContext, resource: Any, new_configs: dict[str, Any], validate_only: bool) -> dict[str, Any]:
    """Shared with IncrementalAlterConfigs: check the resource, validate, store."""
    if resource.resource_type == BROKER:
        return await apply_broker(ctx, resource, new_configs, validate_only)
    result = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }
    try:
        if resource.resource_type == TOPIC and not allowed(
            ctx, Operation.ALTER_CONFIGS, ResourceType.TOPIC, resource.resource_name
        ):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if resource.resource_type != TOPIC and not allowed_cluster(ctx, Operation.ALTER_CONFIGS):
            raise TopicError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        if resource.resource_type != TOPIC:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
        if ctx.metadata.topic(resource.resource_name) is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource.resource_name}' does not exist."
            )
        ctx.admin.validate_topic_configs(new_configs)
        if not validate_only:
            await ctx.admin.set_topic_configs(resource.resource_name, new_configs)
    except TopicError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
    return result


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    responses = []
    for resource in body.resources:
        configs = {c.name: c.value for c in resource.configs if c.value is not None}
        responses.append(await apply(ctx, resource, configs, body.validate_only))
    return {"throttle_time_ms": 0, "responses": responses}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, resource_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every resource."""
    return finish(API_KEY, request, resource_error_response(request, code, "responses"), code, message)
