"""ApiVersions: which APIs and versions this broker answers, computed from the registry."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

API_KEY = ApiKey.API_VERSIONS
VERSIONS = (0, 4)


def body(error: int = ErrorCode.NONE) -> dict:
    from . import SUPPORTED
    return {
        "error_code": error,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in SUPPORTED],
        "throttle_time_ms": 0,
    }


async def handle(broker, request) -> dict:
    return body()
