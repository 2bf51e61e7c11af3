"""DescribeAcls: the ACL bindings matching a filter; SECURITY_DISABLED without an authorizer."""
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from ..request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_ACLS
VERSIONS = (1, 3)  # Kafka 4.0 removed v0


async def handle(ctx: RequestContext, request) -> dict:
    authorizer = ctx.authorizer
    if authorizer is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "No Authorizer is configured on the broker", "resources": []}
    return await authorizer.describe_acls_response(request)
