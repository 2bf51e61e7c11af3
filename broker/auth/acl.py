"""ACL bindings and filters as Kafka defines them (org.apache.kafka.common.acl / resource):
the codes on the wire, matching of a binding against a filter, and of a resource against a
pattern. Pure code, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"

# Operations each resource type knows (Kafka's AclEntry.supportedOperations), for
# authorized-operations fields and for validating new bindings.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}

# An allowed operation that implies others (Kafka: READ/WRITE/DELETE/ALTER imply DESCRIBE,
# ALTER_CONFIGS implies DESCRIBE_CONFIGS).
IMPLIED_BY = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def to_json(self) -> list:
        return [
            self.resource_type,
            self.name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        ]

    @classmethod
    def from_json(cls, row: list) -> AclBinding:
        return cls(int(row[0]), str(row[1]), int(row[2]), str(row[3]), str(row[4]), int(row[5]), int(row[6]))


@dataclass(frozen=True)
class AclFilter:
    """None for name/principal/host means any; the codes may be ANY (and MATCH for the pattern)."""

    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Operation.ANY and self.operation != b.operation:
            return False
        if self.permission != Permission.ANY and self.permission != b.permission:
            return False
        if self.pattern_type == PatternType.MATCH:
            # bindings that would apply to the named resource: literal equal or wildcard, or prefixes of it
            if self.name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.name == self.name or b.name == WILDCARD
            return b.pattern_type == PatternType.PREFIXED and self.name.startswith(b.name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
            return False
        return self.name is None or self.name == b.name

    def unknown_codes(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN
            or self.pattern_type == PatternType.UNKNOWN
            or self.operation == Operation.UNKNOWN
            or self.permission == Permission.UNKNOWN
        )


def pattern_applies(binding: AclBinding, resource_type: int, name: str) -> bool:
    """Whether ``binding``'s resource pattern covers the resource (type, name)."""
    if binding.resource_type != resource_type:
        return False
    if binding.pattern_type == PatternType.LITERAL:
        return binding.name == name or binding.name == WILDCARD
    if binding.pattern_type == PatternType.PREFIXED:
        return name.startswith(binding.name)
    return False


def binding_error(b: AclBinding) -> str | None:
    """Why Kafka refuses to create ``b`` (None: valid)."""
    if (
        b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY)
        or b.resource_type not in ResourceType._value2member_map_
    ):
        return "Invalid resource type"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid pattern type"
    if b.operation in (Operation.UNKNOWN, Operation.ANY) or b.operation not in Operation._value2member_map_:
        return "Invalid operation"
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        return "Invalid permission type"
    if not b.name:
        return "Resource name must not be empty"
    if b.resource_type == ResourceType.CLUSTER and (b.name != CLUSTER_NAME or b.pattern_type != PatternType.LITERAL):
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if ":" not in b.principal:
        return (
            f"Could not parse principal from `{b.principal}` "
            "(no colon is present separating the principal type from the principal name)"
        )
    return None
