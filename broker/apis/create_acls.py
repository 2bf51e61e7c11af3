"""CreateAcls: add ACL bindings; SECURITY_DISABLED for each without an authorizer."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from ..request_context import RequestContext

API_KEY = ApiKey.CREATE_ACLS
VERSIONS = (1, 3)  # Kafka 4.0 removed v0


async def handle(ctx: RequestContext, request) -> dict:
    authorizer = ctx.authorizer
    if authorizer is None:
        return {"throttle_time_ms": 0, "results": [
            {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": "No Authorizer is configured."}
            for _ in request.body.creations]}
    return await authorizer.create_acls_response(request)
