"""DescribeConfigs: topic configs (override or inherited default) and the broker's own configs."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..config import BROKER_CONFIGS, TOPIC_CONFIGS, format_value
from ..dynamic_config import DYNAMIC
from ..request_context import RequestContext
from ..topics import TopicInfo
from . import _group_configs as group_configs
from ._common import INVALID_REQUEST_MESSAGE
from ._group_configs import GROUP_RESOURCE

API_KEY = ApiKey.DESCRIBE_CONFIGS
VERSIONS = (0, 4)

TOPIC = 2
BROKER = 4
# Kafka's ConfigSource codes
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# Kafka's ConfigType codes
CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}


def _entry(
    name: str, value: str | None, source: int, typ: str, synonyms: list[dict[str, Any]], doc: str | None
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "is_default": source == DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": CONFIG_TYPES.get(typ, 0),
        "documentation": doc,
    }


def topic_entries(
    ctx: RequestContext, info: TopicInfo, keys: list[str] | None, synonyms: bool = False, docs: bool = False
) -> list[dict[str, Any]]:
    out = []
    for key, (_, broker_key, typ, _) in TOPIC_CONFIGS.items():
        if keys is not None and key not in keys:
            continue
        value, is_default = ctx.metadata.topic_config_value(info, key)
        static = broker_key is not None and broker_key in ctx.config.originals
        source = (DEFAULT_CONFIG if not static else STATIC_BROKER_CONFIG) if is_default else DYNAMIC_TOPIC_CONFIG
        syn = []
        if synonyms:
            if not is_default:
                syn.append({"name": key, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
            if broker_key is not None:
                syn.append(
                    {
                        "name": broker_key,
                        "value": format_value(ctx.config.topic_default(key)),
                        "source": STATIC_BROKER_CONFIG if static else DEFAULT_CONFIG,
                    }
                )
        doc = f"Topic config; inherits {broker_key}." if docs and broker_key else None
        out.append(_entry(key, value, source, typ, syn, doc))
    return out


def broker_entries(
    ctx: RequestContext, keys: list[str] | None, docs: bool = False, synonyms: bool = False
) -> list[dict[str, Any]]:
    out = []
    for name, definition in BROKER_CONFIGS.items():
        if keys is not None and name not in keys:
            continue
        value = format_value(ctx.config[name])
        source = STATIC_BROKER_CONFIG if name in ctx.config.originals else DEFAULT_CONFIG
        syn = []
        if synonyms and definition.type != "password":  # as Kafka: the static value, then the default
            if source == STATIC_BROKER_CONFIG:
                syn.append({"name": name, "value": value, "source": STATIC_BROKER_CONFIG})
            syn.append({"name": name, "value": format_value(definition.default), "source": DEFAULT_CONFIG})
        entry = _entry(name, value, source, definition.type, syn, definition.doc if docs else None)
        entry["read_only"] = name not in DYNAMIC  # only the dynamic broker configs change at run time
        if definition.type == "password":  # as Kafka: a secret's value is never sent
            entry["value"], entry["is_sensitive"] = None, True
        out.append(entry)
    return out


def dynamic_entries(
    ctx: RequestContext, keys: list[str] | None, default_only: bool, out: list[dict[str, Any]], synonyms: bool = False
) -> list[dict[str, Any]]:
    """Dynamic broker configs that are set: this broker's own (source DYNAMIC_BROKER_CONFIG) or the
    cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG), replacing the static entry of a key that
    also has one. Kafka shows a throttle rate only while one is set, read-only as it is there."""
    from ..dynamic_config import CONFIG_TYPE, DEFAULT, DYNAMIC, DYNAMIC_DEFAULT_BROKER_CONFIG, definition

    by_name = {e["name"]: i for i, e in enumerate(out)}
    for key in [*DYNAMIC, *ctx.dynamic_configs.listener_keys(default_only)]:
        spec = definition(key)
        if spec is None:  # not reached: DYNAMIC's keys and the listener keys set all have one
            raise KeyError(key)
        typ = spec[0]
        if keys is not None and key not in keys:
            continue
        if default_only:
            value = ctx.dynamic_configs.overrides(DEFAULT).get(key)
            source = DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            value, lookup_source = ctx.dynamic_configs.lookup(key)
            if lookup_source is None:  # (None, None): not set
                continue
            source = lookup_source
        if value is None:
            continue
        entry = _entry(key, value, source, "", _dynamic_synonyms(ctx, key, default_only) if synonyms else [], None)
        entry["config_type"] = CONFIG_TYPE[typ]
        entry["read_only"] = key not in BROKER_CONFIGS
        if key in by_name:
            out[by_name[key]] = entry
        else:
            out.append(entry)
    return out


def _dynamic_synonyms(ctx: RequestContext, key: str, default_only: bool) -> list[dict[str, Any]]:
    """Kafka's synonyms of a dynamic broker config, most specific first: this broker's value, the
    cluster default, then (for a key server.properties also has, or a listener's key, whose
    broker-wide key it is) the static value or the built-in default."""
    from ..dynamic_config import DEFAULT, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, base_key

    dynamic = ctx.dynamic_configs
    out = []
    if not default_only:
        own = dynamic.overrides(str(ctx.node_id)).get(key)
        if own is not None:
            out.append({"name": key, "value": own, "source": DYNAMIC_BROKER_CONFIG})
    default = dynamic.overrides(DEFAULT).get(key)
    if default is not None:
        out.append({"name": key, "value": default, "source": DYNAMIC_DEFAULT_BROKER_CONFIG})
    if default_only:
        return out
    base = base_key(key)
    if base != key:  # a listener's key: then the broker-wide key's dynamic values, as Kafka lists them
        own = dynamic.overrides(str(ctx.node_id)).get(base)
        if own is not None:
            out.append({"name": base, "value": own, "source": DYNAMIC_BROKER_CONFIG})
        default = dynamic.overrides(DEFAULT).get(base)
        if default is not None:
            out.append({"name": base, "value": default, "source": DYNAMIC_DEFAULT_BROKER_CONFIG})
    if base in BROKER_CONFIGS:
        if base in ctx.config.originals:
            out.append({"name": base, "value": format_value(ctx.config[base]), "source": STATIC_BROKER_CONFIG})
        out.append({"name": base, "value": format_value(BROKER_CONFIGS[base].default), "source": DEFAULT_CONFIG})
    return out


def _describe(ctx: RequestContext, resource: Any, synonyms: bool, docs: bool) -> dict[str, Any]:
    result = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "configs": [],
    }
    keys = resource.configuration_keys
    if resource.resource_type == TOPIC and not allowed(
        ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, resource.resource_name
    ):
        result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
    elif resource.resource_type == BROKER and not allowed_cluster(ctx, Operation.DESCRIBE_CONFIGS):
        result.update(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Authorization failed.")
    elif resource.resource_type == TOPIC:
        info = ctx.metadata.topic(resource.resource_name)
        if info is None:
            result.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # Kafka: no message
        else:
            result["configs"] = topic_entries(ctx, info, keys, synonyms, docs)
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(ctx.node_id)):
            name = resource.resource_name
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=(
                    f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {name}"
                    if name.lstrip("-").isdigit()
                    else f"Broker id must be an integer, but it is: {name}"
                ),
            )
        elif resource.resource_name == "":  # the cluster-wide default: its dynamic configs only, as Kafka
            result["configs"] = dynamic_entries(ctx, keys, True, [], synonyms)
        else:
            result["configs"] = dynamic_entries(ctx, keys, False, broker_entries(ctx, keys, docs, synonyms), synonyms)
    elif resource.resource_type == GROUP_RESOURCE:
        return group_configs.describe(ctx, resource, synonyms, docs)
    else:
        result.update(error_code=ErrorCode.INVALID_REQUEST, error_message=INVALID_REQUEST_MESSAGE)
    return result


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    synonyms = body.get("include_synonyms", False)
    docs = body.get("include_documentation", False)
    return {"throttle_time_ms": 0, "results": [_describe(ctx, r, synonyms, docs) for r in body.resources]}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, resource_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every resource."""
    out = resource_error_response(request, code, "results", with_configs=True)
    return finish(API_KEY, request, out, code, message)
