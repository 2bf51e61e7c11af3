"""Authorization: Kafka's ACL authorizer and the checks the API handlers make.

Handlers call ``allowed(broker, operation, resource_type, name)``; without an authorizer
(``authorizer.class.name`` unset) everything is allowed, as in Kafka."""

from __future__ import annotations

from .acl import CLUSTER_NAME, Operation, ResourceType
from .authorizer import AclAuthorizer, make_authorizer

__all__ = [
    "AclAuthorizer",
    "make_authorizer",
    "allowed",
    "allowed_cluster",
    "Operation",
    "ResourceType",
    "topic_operations",
    "cluster_operations",
]


def allowed(broker, operation: int, resource_type: int, name: str) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.allows(operation, resource_type, name)


def allowed_cluster(broker, operation: int) -> bool:
    return allowed(broker, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def topic_operations(broker, name: str, default: int) -> int:
    authorizer = broker.authorizer
    return default if authorizer is None else authorizer.authorized_operations(ResourceType.TOPIC, name)


def cluster_operations(broker, default: int) -> int:
    authorizer = broker.authorizer
    return default if authorizer is None else authorizer.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
