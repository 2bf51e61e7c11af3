"""SaslHandshake outside of authentication: on a listener without SASL, or after it succeeded.

On a SASL listener the connection's SASL state (``broker.security.sasl``) answers the handshake
before anything is dispatched; a handshake that reaches this handler comes either on a PLAINTEXT or
SSL listener or after authentication, and Kafka answers both with ILLEGAL_SASL_STATE and no
mechanisms.
"""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from ..request_context import RequestContext

API_KEY = ApiKey.SASL_HANDSHAKE
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
