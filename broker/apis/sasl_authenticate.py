"""SaslAuthenticate outside of authentication (see ``sasl_handshake``): ILLEGAL_SASL_STATE."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from ..request_context import RequestContext

API_KEY = ApiKey.SASL_AUTHENTICATE
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime_ms": 0}
