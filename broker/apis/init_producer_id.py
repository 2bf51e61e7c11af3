"""InitProducerId: producer ids and epochs for idempotent producers.

Ids come from blocks reserved in the broker's metadata file, so a restart never hands out an id
twice. A producer that sends its current id and epoch (v3+, KIP-360) gets the epoch bumped.
Transactional producers are refused: this broker has no transaction coordinator.
"""
import logging

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..errors import TopicError

API_KEY = ApiKey.INIT_PRODUCER_ID
VERSIONS = (0, 5)
MAX_EPOCH = 32767
log = logging.getLogger("strom.producer_ids")


async def handle(broker, request) -> dict:
    body = request.body
    if body.transactional_id is not None:
        log.warning("refusing transactional.id=%s: transactions are not supported", body.transactional_id)
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    producer_id = body.get("producer_id", -1)
    epoch = body.get("producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
    try:
        producer_id = await broker.allocate_producer_id()
    except TopicError as exc:  # the id block could not be reserved on disk (full disk)
        log.warning("cannot allocate a producer id: %s", exc.message)
        # retriable for every client (KAFKA_STORAGE_ERROR is not among this API's errors)
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}
