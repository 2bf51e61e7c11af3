"""Small pieces several API modules share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.codec import ZERO_UUID as ZERO_UUID  # re-exported for the API modules
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode

from ..request_context import RequestContext

if TYPE_CHECKING:
    from ..quotas import MutationQuota
    from ..replica.partition import Partition

# ACL operations a client without authorization checks may do: Kafka's AclOperation codes.
_TOPIC_OPERATIONS = (3, 4, 5, 6, 7, 8, 10, 11)  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
_CLUSTER_OPERATIONS = (
    5,
    7,
    8,
    9,
    10,
    11,
    12,
)  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in _TOPIC_OPERATIONS)
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in _CLUSTER_OPERATIONS)
OPERATIONS_NOT_REQUESTED = -2147483648


def leader_partition(
    ctx: RequestContext, topic: str, index: int, current_leader_epoch: int = -1, require_leader: bool = True
) -> tuple[Partition | None, ErrorCode]:
    """(partition, NONE) when this broker leads `topic`-`index` in the epoch the client knows, else
    (partition or None, the error Kafka answers with): `ReplicaManager.partition_or_error`."""
    return ctx.replica_manager.partition_or_error(topic, index, current_leader_epoch, require_leader)


def mutation_quota(ctx: RequestContext, request: Request, strict_since: int) -> MutationQuota | None:
    """The client's controller mutation quota for this request (None when no quota applies)."""
    from .. import context

    return ctx.quotas.mutation_quota(request, context.principal.get(), strict_since)


def mutation_refused(quota: MutationQuota | None, permits: int) -> bool:
    """Take `permits` from the quota; True when a strict quota refuses the mutation
    (THROTTLING_QUOTA_EXCEEDED)."""
    import trio

    return quota is not None and quota.record(permits, trio.current_time()) > 0


def throttled(quota: MutationQuota | None, body: dict[str, Any]) -> dict[str, Any]:
    """The answer with the quota's throttle_time_ms; the connection is muted that long, as Kafka does."""
    if quota is not None:
        import trio

        from .. import context

        now = trio.current_time()
        wait_ms = quota.throttle_ms(now)
        if wait_ms > 0:
            body["throttle_time_ms"] = max(body.get("throttle_time_ms") or 0, wait_ms)
            context.muted_until.set(max(context.muted_until.get(), now + wait_ms / 1000))
    return body


# Kafka answers THROTTLING_QUOTA_EXCEEDED with a null message
THROTTLED_MESSAGE = None
# Kafka's own message of INVALID_REQUEST (Errors.INVALID_REQUEST), which it sends where it has no better one
INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)
