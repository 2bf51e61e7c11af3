"""IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT single topic config keys; SET and
DELETE of a broker's dynamic configs (`strom.broker.dynamic_config`)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..config import INTERNAL_TOPIC_CONFIGS, TOPIC_CONFIGS
from ..request_context import RequestContext
from . import _group_configs as group_configs
from ._group_configs import GROUP_RESOURCE
from .alter_configs import apply
from .describe_configs import TOPIC

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER = 4


def _updated(ctx: RequestContext, resource: Any) -> tuple[dict[str, Any] | None, str | None]:
    info = ctx.metadata.topic(resource.resource_name)
    configs = dict(info.configs) if info is not None else {}
    for change in resource.configs:
        op, key, value = change.config_operation, change.name, change.value
        if key not in TOPIC_CONFIGS and key not in INTERNAL_TOPIC_CONFIGS:
            return None, f"Unknown topic config name: {key}"
        if op in (APPEND, SUBTRACT) and key in INTERNAL_TOPIC_CONFIGS:
            return None, f"Can't {'APPEND' if op == APPEND else 'SUBTRACT'} to key {key} because its type is not LIST."
        if op == SET:
            configs[key] = value
        elif op == DELETE:
            configs.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            if TOPIC_CONFIGS[key][2] != "list":
                return (
                    None,
                    f"Can't {'APPEND' if op == APPEND else 'SUBTRACT'} to key {key} because its type is not LIST.",
                )
            current = configs.get(key)  # set, even to "" (an empty list), or else the default
            if current is not None or info is None:
                raw = current
            else:
                raw = ctx.metadata.topic_config_value(info, key)[0]
            items = [v.strip() for v in (raw or "").split(",") if v.strip()]
            given = [v for v in (value or "").split(",") if v]
            items = (
                items + [v for v in given if v not in items] if op == APPEND else [v for v in items if v not in given]
            )
            configs[key] = ",".join(items)
        else:
            return None, ""  # Kafka: INVALID_CONFIG without a message
    return configs, None


def _updated_broker(ctx: RequestContext, resource: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A broker resource's dynamic configs after the operations (a wrong broker id is refused later)."""
    configs = ctx.dynamic_configs.overrides(resource.resource_name or "")
    for change in resource.configs:
        op, key = change.config_operation, change.name
        if op == SET:
            configs[key] = change.value
        elif op == DELETE:
            configs.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            return None, f"Config value {'append' if op == APPEND else 'subtract'} is not allowed for config key: {key}"
        else:
            return None, ""
    return configs, None


def _denied(ctx: RequestContext, resource: Any) -> ErrorCode | None:
    """The authorization error for altering ``resource``'s configs, or None."""
    if resource.resource_type == TOPIC:
        if not allowed(ctx, Operation.ALTER_CONFIGS, ResourceType.TOPIC, resource.resource_name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif not allowed_cluster(ctx, Operation.ALTER_CONFIGS):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    responses = []
    for resource in body.resources:
        if resource.resource_type == GROUP_RESOURCE:  # group configs (KIP-848, KIP-932)
            responses.append(await group_configs.alter(ctx, resource, body.validate_only))
            continue
        denied = _denied(ctx, resource)
        if denied is not None:
            responses.append(
                {
                    "error_code": denied,
                    "error_message": "Authorization failed.",
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                }
            )
            continue
        known_topic = resource.resource_type == TOPIC and ctx.metadata.topic(resource.resource_name) is not None
        if known_topic or resource.resource_type == BROKER:
            names = [c.name for c in resource.configs]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            updated = _updated if known_topic else _updated_broker
            configs, problem = updated(ctx, resource) if not duplicates else (None, None)
            if duplicates:  # as Kafka: the whole resource is refused
                responses.append(
                    {
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": "Error due to duplicate config keys",
                        "resource_type": resource.resource_type,
                        "resource_name": resource.resource_name,
                    }
                )
                continue
            if problem is not None or configs is None:  # configs: None only with a problem
                responses.append(
                    {
                        "error_code": ErrorCode.INVALID_CONFIG,
                        "error_message": problem or None,
                        "resource_type": resource.resource_type,
                        "resource_name": resource.resource_name,
                    }
                )
                continue
        else:
            configs = {}
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
