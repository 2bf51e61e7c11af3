"""Small pieces several API modules share."""
from __future__ import annotations

from protocol.errors import ErrorCode

# ACL operations a client without authorization checks may do: Kafka's AclOperation codes.
_TOPIC_OPERATIONS = (3, 4, 5, 6, 7, 8, 10, 11)  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
_CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in _TOPIC_OPERATIONS)
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in _CLUSTER_OPERATIONS)
OPERATIONS_NOT_REQUESTED = -2147483648

ZERO_UUID = bytes(16)
