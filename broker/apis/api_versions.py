"""ApiVersions: which APIs and versions this broker answers, computed from the registry."""
import re

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

API_KEY = ApiKey.API_VERSIONS
VERSIONS = (0, 4)


# Finalized feature levels (v3+, tagged): transaction.version 1, the transaction protocol Strom
# implements (Kafka 4.0 clusters running it answer the same; clients take >= 2 to mean KIP-890
# part 2, which Strom does not offer). Features with a minimum of 0 are not listed as supported,
# as Kafka 4.0 leaves them out of ApiVersions. group.version 1: the KIP-848 consumer group protocol
# (ConsumerGroupHeartbeat) is on, as in Kafka 4.0.
FINALIZED_FEATURES = [{"name": "group.version", "min_version_level": 1, "max_version_level": 1},
                      {"name": "transaction.version", "min_version_level": 1, "max_version_level": 1}]
FINALIZED_FEATURES_EPOCH = 1


def body(error: int = ErrorCode.NONE) -> dict:
    from . import SUPPORTED
    out = {
        "error_code": error,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in SUPPORTED],
        "throttle_time_ms": 0,
    }
    if error == ErrorCode.NONE:
        out.update(finalized_features_epoch=FINALIZED_FEATURES_EPOCH, finalized_features=FINALIZED_FEATURES)
    return out


# KIP-511: from v3 the client names its software; Kafka refuses names outside this pattern.
SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle(broker, request) -> dict:
    if request.header.api_version >= 3:
        b = request.body
        if not (SOFTWARE_NAME.fullmatch(b.client_software_name or "")
                and SOFTWARE_NAME.fullmatch(b.client_software_version or "")):
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time_ms": 0}
    return body()
