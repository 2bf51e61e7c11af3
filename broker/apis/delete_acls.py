"""DeleteAcls: remove the ACL bindings matching each filter; SECURITY_DISABLED without an authorizer."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from ..request_context import RequestContext

API_KEY = ApiKey.DELETE_ACLS
VERSIONS = (1, 3)  # Kafka 4.0 removed v0


async def handle(ctx: RequestContext, request) -> dict:
    authorizer = ctx.authorizer
    if authorizer is None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": "No Authorizer is configured.",
             "matching_acls": []} for _ in request.body.filters]}
    return await authorizer.delete_acls_response(request)
