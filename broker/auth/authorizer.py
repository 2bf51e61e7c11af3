"""Kafka's ACL authorizer (AclAuthorizer / StandardAuthorizer semantics): super users, deny before
allow, implied DESCRIBE and DESCRIBE_CONFIGS, wildcard principals, hosts and resource names,
prefixed patterns, and ``allow.everyone.if.no.acl.found``.

The bindings live in a store with ``acls`` (rows as ``AclBinding.to_json``) and ``set_acls(rows)``:
standalone the broker's metadata file. The current connection's principal and host come from
``broker.context``."""

from __future__ import annotations

import logging

from strom.protocol.errors import ErrorCode

from .. import context
from ..config import BrokerConfig, ConfigError
from .acl import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_error,
    pattern_applies,
)

log = logging.getLogger("strom.auth")

AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
)


def make_authorizer(config: BrokerConfig) -> AclAuthorizer | None:
    name = (config["authorizer.class.name"] or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"authorizer.class.name={name}: Strom has Kafka's ACL authorizer; set one of "
            f"{', '.join(AUTHORIZER_CLASSES[:2])}"
        )
    super_users = {p.strip() for p in (config["super.users"] or "").split(";") if p.strip()}
    return AclAuthorizer(super_users, config["allow.everyone.if.no.acl.found"])


def current_principal_and_host() -> tuple[str, str]:
    return context.principal.get(), context.client_host.get().lstrip("/") or "127.0.0.1"


class AclAuthorizer:
    def __init__(self, super_users: set[str], allow_if_no_acl: bool):
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.store = None  # attached when the broker's metadata is open (auth.zkstore)
        self._bindings: list[AclBinding] = []
        self._changed = None

    def attach(self, store, bindings: list[AclBinding]) -> None:
        self.store = store
        self._bindings = list(bindings)

    def changed_elsewhere(self) -> None:
        """Another broker changed ACLs (a ZooKeeper change notification): reload them."""
        if self._changed is not None:
            self._changed.set()

    async def follow(self) -> None:
        """Cluster: reload the bindings whenever ``changed_elsewhere`` is called, until cancelled."""
        import trio

        while True:
            self._changed = trio.Event()
            await self._changed.wait()
            try:
                self._bindings = await self.store.load()
            except Exception:
                log.exception("reloading ACLs from ZooKeeper failed; will try on the next change")

    @property
    def bindings(self) -> list[AclBinding]:
        return self._bindings

    # ------------------------------------------------------------------ decisions
    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [b for b in self._bindings if pattern_applies(b, resource_type, name)]
        if not matching:
            return self.allow_if_no_acl
        principals = (principal, principal.split(":", 1)[0] + ":" + WILDCARD)
        applicable = [b for b in matching if b.principal in principals and b.host in (host, WILDCARD)]
        if any(b.permission == Permission.DENY and b.operation in (operation, Operation.ALL) for b in applicable):
            return False
        allowing = (operation, Operation.ALL, *IMPLIED_BY.get(operation, ()))
        return any(b.permission == Permission.ALLOW and b.operation in allowing for b in applicable)

    def allows(self, operation: int, resource_type: int, name: str) -> bool:
        """The current connection's principal may do ``operation`` on the resource."""
        principal, host = current_principal_and_host()
        allowed = self.authorize(principal, host, operation, resource_type, name)
        if not allowed:
            log.debug(
                "denied principal=%s host=%s operation=%s resource=%s:%s",
                principal,
                host,
                Operation(operation).name,
                ResourceType(resource_type).name,
                name,
            )
        return allowed

    def authorize_cluster(self, operation: str | int) -> bool:
        op = Operation[operation] if isinstance(operation, str) else operation
        from .acl import CLUSTER_NAME

        return self.allows(op, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized_operations(self, resource_type: int, name: str) -> int:
        """Kafka's authorized-operations bit field for the current principal."""
        principal, host = current_principal_and_host()
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def any_topic_allows(self, operation: int) -> bool:
        """Whether some topic allows ``operation`` (Kafka's InitProducerId idempotent fallback)."""
        principal, host = current_principal_and_host()
        if principal in self.super_users:
            return True
        principals = (principal, principal.split(":", 1)[0] + ":" + WILDCARD)
        allowing = (operation, Operation.ALL)
        return any(
            b.resource_type == ResourceType.TOPIC
            and b.permission == Permission.ALLOW
            and b.operation in allowing
            and b.principal in principals
            and b.host in (host, WILDCARD)
            for b in self._bindings
        )

    # ------------------------------------------------------------------ ACL APIs
    async def _save(self, changed: set[tuple[int, str, int]]) -> None:
        await self.store.save(self._bindings, changed)

    async def describe_acls_response(self, request) -> dict:
        body = request.body
        if not self.authorize_cluster(Operation.DESCRIBE):
            return {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None,
                "resources": [],
            }
        flt = AclFilter(
            body.resource_type_filter,
            body.resource_name_filter,
            body.get("pattern_type_filter", PatternType.LITERAL),
            body.principal_filter,
            body.host_filter,
            body.operation,
            body.permission_type,
        )
        if flt.unknown_codes():
            return {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": "The request contains an invalid filter.",
                "resources": [],
            }
        groups: dict[tuple, list] = {}
        for b in self._bindings:
            if flt.matches(b):
                groups.setdefault((b.resource_type, b.name, b.pattern_type), []).append(
                    {
                        "principal": b.principal,
                        "host": b.host,
                        "operation": b.operation,
                        "permission_type": b.permission,
                    }
                )
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resources": [
                {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                for (t, n, p), acls in groups.items()
            ],
        }

    async def create_acls_response(self, request) -> dict:
        creations = request.body.creations
        if not self.authorize_cluster(Operation.ALTER):
            return {
                "throttle_time_ms": 0,
                "results": [
                    {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None} for _ in creations
                ],
            }
        results = []
        changed = set()
        for c in creations:
            binding = AclBinding(
                c.resource_type,
                c.resource_name,
                c.get("resource_pattern_type", PatternType.LITERAL),
                c.principal,
                c.host,
                c.operation,
                c.permission_type,
            )
            error = binding_error(binding)
            if error is not None:
                results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": error})
                continue
            if binding not in self._bindings:
                self._bindings.append(binding)
                changed.add((binding.resource_type, binding.name, binding.pattern_type))
            results.append({"error_code": ErrorCode.NONE, "error_message": None})
            log.info("ACL added %s", _describe(binding))
        await self._save(changed)
        return {"throttle_time_ms": 0, "results": results}

    async def delete_acls_response(self, request) -> dict:
        filters = request.body.filters
        if not self.authorize_cluster(Operation.ALTER):
            return {
                "throttle_time_ms": 0,
                "filter_results": [
                    {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "matching_acls": []}
                    for _ in filters
                ],
            }
        results = []
        changed = set()
        for f in filters:
            flt = AclFilter(
                f.resource_type_filter,
                f.resource_name_filter,
                f.get("pattern_type_filter", PatternType.LITERAL),
                f.principal_filter,
                f.host_filter,
                f.operation,
                f.permission_type,
            )
            if flt.unknown_codes():
                results.append(
                    {
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": "The request contains an invalid filter.",
                        "matching_acls": [],
                    }
                )
                continue
            removed = [b for b in self._bindings if flt.matches(b)]
            self._bindings = [b for b in self._bindings if b not in removed]
            for b in removed:
                log.info("ACL removed %s", _describe(b))
                changed.add((b.resource_type, b.name, b.pattern_type))
            results.append(
                {
                    "error_code": ErrorCode.NONE,
                    "error_message": None,
                    "matching_acls": [
                        {
                            "error_code": ErrorCode.NONE,
                            "error_message": None,
                            "resource_type": b.resource_type,
                            "resource_name": b.name,
                            "pattern_type": b.pattern_type,
                            "principal": b.principal,
                            "host": b.host,
                            "operation": b.operation,
                            "permission_type": b.permission,
                        }
                        for b in removed
                    ],
                }
            )
        await self._save(changed)
        return {"throttle_time_ms": 0, "filter_results": results}


def _describe(b: AclBinding) -> str:
    return (
        f"{Permission(b.permission).name} {b.principal} host={b.host} {Operation(b.operation).name} "
        f"{ResourceType(b.resource_type).name}:{PatternType(b.pattern_type).name}:{b.name}"
    )
