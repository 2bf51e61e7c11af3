"""ACLs in ZooKeeper, in Kafka's ZooKeeper-mode layout, so Kafka's tools and a mixed reading of
the tree agree:

    /kafka-acl/<ResourceType>/<name>                        literal patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>      prefixed patterns
      {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                    "Topic:orders" (a literal resource changed)
    /kafka-acl-extended-changes/acl_changes_<seq>           a prefixed resource changed:
      {"version":1,"resourceType":"Topic","name":"pay-","patternType":"Prefixed"}

Every broker reloads the bindings when a change notification appears. Encoding and paths are
pure functions; the store does the ZooKeeper calls."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from urllib.parse import quote

from .acl import AclBinding, Operation, PatternType, Permission, ResourceType

log = logging.getLogger("strom.auth")

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"

_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
_TYPES = {v: k for k, v in _TYPE_NAMES.items()}
_OP_NAMES = {
    Operation.ALL: "All",
    Operation.READ: "Read",
    Operation.WRITE: "Write",
    Operation.CREATE: "Create",
    Operation.DELETE: "Delete",
    Operation.ALTER: "Alter",
    Operation.DESCRIBE: "Describe",
    Operation.CLUSTER_ACTION: "ClusterAction",
    Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
    Operation.ALTER_CONFIGS: "AlterConfigs",
    Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
    Operation.CREATE_TOKENS: "CreateTokens",
    Operation.DESCRIBE_TOKENS: "DescribeTokens",
}
_OPS = {v: k for k, v in _OP_NAMES.items()}
_PERMS = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}


def resource_path(resource_type: int, name: str, pattern_type: int) -> str:
    root = LITERAL_ROOT if pattern_type == PatternType.LITERAL else PREFIXED_ROOT
    # Kafka puts the name into the path as it is; a '/' would make another level, so escape it
    return f"{root}/{_TYPE_NAMES[ResourceType(resource_type)]}/{quote(name, safe='')}"


def encode_acls(bindings: list[AclBinding]) -> bytes:
    return json.dumps(
        {
            "version": 1,
            "acls": [
                {
                    "principal": b.principal,
                    "permissionType": _PERMS[Permission(b.permission)],
                    "operation": _OP_NAMES[Operation(b.operation)],
                    "host": b.host,
                }
                for b in bindings
            ],
        },
        separators=(",", ":"),
    ).encode()


def decode_acls(resource_type: int, name: str, pattern_type: int, data: bytes) -> list[AclBinding]:
    doc = json.loads(data)
    out = []
    for entry in doc.get("acls", []):
        perm = next(k for k, v in _PERMS.items() if v == entry["permissionType"])
        out.append(
            AclBinding(
                resource_type, name, pattern_type, entry["principal"], entry["host"], _OPS[entry["operation"]], perm
            )
        )
    return out


def change_notification(resource_type: int, name: str, pattern_type: int) -> tuple[str, bytes]:
    """(sequential path prefix, data) announcing a change of one resource's ACLs."""
    type_name = _TYPE_NAMES[ResourceType(resource_type)]
    if pattern_type == PatternType.LITERAL:
        return f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", f"{type_name}:{name}".encode()
    return f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", json.dumps(
        {"version": 1, "resourceType": type_name, "name": name, "patternType": "Prefixed"}, separators=(",", ":")
    ).encode()


class ZkAclStore:
    """The bindings in ZooKeeper (``zk``: strom.broker.zk.zkclient.KafkaZkClient)."""

    def __init__(self, zk):
        self.zk = zk

    async def load(self) -> list[AclBinding]:
        from urllib.parse import unquote

        out = []
        for root, pattern in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
            for type_name in await self.zk.children(root):
                if type_name not in _TYPES:
                    continue
                for quoted in await self.zk.children(f"{root}/{type_name}"):
                    data = await self.zk.data(f"{root}/{type_name}/{quoted}")
                    if not data:
                        continue
                    try:
                        out.extend(decode_acls(_TYPES[type_name], unquote(quoted), pattern, data))
                    except (ValueError, KeyError, StopIteration):
                        log.warning("ACL znode %s/%s/%s cannot be read; skipped", root, type_name, quoted)
        return out

    async def save(self, bindings: list[AclBinding], changed: set[tuple[int, str, int]]) -> None:
        for resource_type, name, pattern_type in changed:
            mine = [
                b for b in bindings if (b.resource_type, b.name, b.pattern_type) == (resource_type, name, pattern_type)
            ]
            path = resource_path(resource_type, name, pattern_type)
            if mine:
                await self.zk.put(path, encode_acls(mine))
            else:
                await self.zk.remove(path)
            prefix, data = change_notification(resource_type, name, pattern_type)
            await self.zk.append_sequential(prefix, data)

    async def watch(self, on_change: Callable[[], None]) -> None:
        await self.zk.watch_child_names(LITERAL_CHANGES, lambda _children: on_change())
        await self.zk.watch_child_names(EXTENDED_CHANGES, lambda _children: on_change())


class StandaloneAclStore:
    """The bindings in the broker's metadata file (``TopicStore.acls``)."""

    def __init__(self, topics):
        self.topics = topics

    async def load(self) -> list[AclBinding]:
        return [AclBinding.from_json(row) for row in self.topics.acls]

    async def save(self, bindings: list[AclBinding], changed) -> None:
        self.topics.set_acls([b.to_json() for b in bindings])
