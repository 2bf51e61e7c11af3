"""AlterConfigs: replace a topic's whole set of config overrides (the legacy, non-incremental API)."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..errors import TopicError
from .describe_configs import TOPIC

API_KEY = ApiKey.ALTER_CONFIGS
VERSIONS = (0, 2)


async def apply(broker, resource, new_configs: dict, validate_only: bool) -> dict:
    """Shared with IncrementalAlterConfigs: check the resource, validate, store."""
    result = {"error_code": ErrorCode.NONE, "error_message": None,
              "resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        if resource.resource_type == TOPIC and not allowed(broker, Operation.ALTER_CONFIGS, ResourceType.TOPIC,
                                                           resource.resource_name):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if resource.resource_type != TOPIC and not allowed_cluster(broker, Operation.ALTER_CONFIGS):
            raise TopicError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        if resource.resource_type != TOPIC:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             "Only topic configs can be altered; broker configs are static (server.properties).")
        if resource.resource_name not in broker.topics.topics:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource.resource_name} does not exist.")
        broker.validate_topic_configs(new_configs)
        if not validate_only:
            await broker.set_topic_configs(resource.resource_name, new_configs)
    except TopicError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
    return result


async def handle(broker, request) -> dict:
    body = request.body
    responses = []
    for resource in body.resources:
        configs = {c.name: c.value for c in resource.configs if c.value is not None}
        responses.append(await apply(broker, resource, configs, body.validate_only))
    return {"throttle_time_ms": 0, "responses": responses}
