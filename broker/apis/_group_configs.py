"""GROUP config resources (resource type 32) in DescribeConfigs and IncrementalAlterConfigs: the
group configs of `strom.broker.coordinator.group.group_configs`, as Kafka answers them."""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.group.group_configs import GROUP_CONFIGS, GroupConfigError
from strom.protocol.errors import ErrorCode

from ..auth import Operation, ResourceType, allowed
from ..config import format_value
from ..errors import TopicError
from ..request_context import RequestContext

GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE = 8  # Kafka's ConfigSource.GROUP_CONFIG
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
SET, DELETE = 0, 1


def _broker_source(ctx: RequestContext, key: str) -> int:
    return STATIC_BROKER_CONFIG if key in ctx.config.originals else DEFAULT_CONFIG


def describe(ctx: RequestContext, resource: Any, synonyms: bool, docs: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "configs": [],
    }
    if not allowed(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.GROUP, resource.resource_name):
        out.update(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Authorization failed.")
        return out
    from .describe_configs import _entry  # (describe_configs imports this module)

    configs = ctx.groups.group_configs
    for name, value, own, typ in configs.describe(resource.resource_name, resource.configuration_keys):
        definition = GROUP_CONFIGS[name]
        broker_key = definition.broker_key
        source = GROUP_CONFIG_SOURCE if own else DEFAULT_CONFIG
        if not own and broker_key is not None:
            source = _broker_source(ctx, broker_key)
        syn: list[dict[str, Any]] = []
        if synonyms:
            if own:
                syn.append({"name": name, "value": value, "source": GROUP_CONFIG_SOURCE})
            if broker_key is not None:
                syn.append(
                    {
                        "name": broker_key,
                        "value": format_value(configs.default(name)),
                        "source": _broker_source(ctx, broker_key),
                    }
                )
            else:
                syn.append({"name": name, "value": format_value(configs.default(name)), "source": DEFAULT_CONFIG})
        out["configs"].append(_entry(name, value, source, typ, syn, (definition.doc or None) if docs else None))
    return out


async def alter(ctx: RequestContext, resource: Any, validate_only: bool) -> dict[str, Any]:
    """IncrementalAlterConfigs of one GROUP resource (SET and DELETE; APPEND/SUBTRACT refused)."""
    out: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }
    if not allowed(ctx, Operation.ALTER_CONFIGS, ResourceType.GROUP, resource.resource_name):
        out.update(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Authorization failed.")
        return out
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        out.update(error_code=ErrorCode.INVALID_REQUEST, error_message="Error due to duplicate config keys")
        return out
    changes: list[tuple[str, str | None, bool]] = []
    for change in resource.configs:
        op = change.config_operation
        if op not in (SET, DELETE):
            verb = "append" if op == 2 else "subtract"
            out.update(
                error_code=ErrorCode.INVALID_CONFIG,
                error_message=f"Config value {verb} is not allowed for config key: {change.name}",
            )
            return out
        changes.append((change.name, change.value, op == DELETE))
    try:
        updated = ctx.groups.group_configs.altered(resource.resource_name, changes)
    except GroupConfigError as exc:
        out.update(error_code=ErrorCode.INVALID_CONFIG, error_message=str(exc))
        return out
    if not validate_only:
        try:  # with the metadata: every broker of a cluster follows them, and they survive restarts
            await ctx.admin.set_group_configs(resource.resource_name, updated)
        except TopicError as exc:
            out.update(error_code=exc.code, error_message=exc.message)
    return out
