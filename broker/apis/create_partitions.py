"""CreatePartitions: grow a topic's partition count."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..errors import TopicError

API_KEY = ApiKey.CREATE_PARTITIONS
VERSIONS = (0, 3)


async def _grow(broker, topic, validate_only: bool) -> dict:
    result = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None}
    try:
        if not allowed(broker, Operation.ALTER, ResourceType.TOPIC, topic.name):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if topic.assignments:
            brokers = {b for a in topic.assignments for b in a.broker_ids}
            if brokers - {broker.node_id}:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unknown broker ids in the assignment: {sorted(brokers - {broker.node_id})}")
        await broker.create_partitions(topic.name, topic.count, validate_only=validate_only)
    except TopicError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
    return result


async def handle(broker, request) -> dict:
    body = request.body
    return {"throttle_time_ms": 0, "results": [await _grow(broker, t, body.validate_only) for t in body.topics]}
