"""The standalone broker's topic metadata: names, ids, partition counts and config overrides.

Kept in `<first log dir>/strom-metadata.json`:

    {"version": 1, "cluster_id": "...", "next_producer_id": 1000,
     "topics": {"<name>": {"id": "<32 hex>", "partitions": 6, "configs": {"retention.ms": "1000"}}}}

Every change is written to a temporary file, fsynced and renamed over the old one, so after a
crash the file is either the old or the new version, never a mix. A change that cannot be written
(full disk, I/O error) is undone in memory and raises TopicError(KAFKA_STORAGE_ERROR): the file
keeps its last good version and the request that asked for the change gets the error. Partitions whose directory is
missing are created empty on start; a directory with no topic entry is left alone and logged.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strom.protocol.errors import ErrorCode
from strom.storage.checkpoint import atomic_write
from strom.storage.config import LogConfig
from strom.storage.faults import storage_error

from .config import TOPIC_CONFIGS, BrokerConfig, format_value
from .errors import TopicError

log = logging.getLogger("strom.topics")

METADATA_FILE = "strom-metadata.json"
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
PRODUCER_ID_BLOCK = 1000


def topic_name_error(name: str | None) -> str | None:
    """Why `name` is not a legal topic name (Kafka's rules), or None when it is."""
    if not name:
        return "Topic name is invalid: the empty string is not allowed"
    if name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"Topic name is invalid: the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if not _LEGAL.fullmatch(name):
        return (
            f"Topic name is invalid: '{name}' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def log_config(config: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
    """A partition log's config: the broker's topic defaults with the topic's ``overrides``."""
    props = {key: format_value(config.topic_default(key)) for key in TOPIC_CONFIGS}
    props.update(overrides)
    return LogConfig.from_properties({k: v for k, v in props.items() if v is not None})


def new_cluster_id() -> str:
    """Kafka's format: a random UUID as 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# Kafka's Topic.INTERNAL_TOPICS: written by their coordinators only (Produce refuses clients other
# than Kafka's AdminUtils.ADMIN_CLIENT_ID; DeleteRecords and AddPartitionsToTxn v0-3 refuse them).
# TopicInfo.internal (Metadata's is_internal) still counts every "__" name, as Strom always has.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ADMIN_CLIENT_ID = "__admin_client"


@dataclass
class TopicInfo:
    name: str
    topic_id: bytes
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


class TopicStore:
    def __init__(self, path: Path, cluster_id: str | None = None):
        self.path = path
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[bytes, TopicInfo] = {}
        self.cluster_id = cluster_id or new_cluster_id()
        self.next_producer_id = 0
        self.producer_id_limit = 0
        self.users: dict[str, dict[str, str]] = {}  # SCRAM credentials as Kafka's /config/users/<user>
        self.acls: list[list] = []  # ACL bindings (broker.auth.acl.AclBinding.to_json rows)
        self.quotas: dict[tuple, dict[str, float]] = {}  # client quotas: entity -> {key: value}
        # dynamic broker configs (AlterConfigs on a broker resource): "" (the cluster default) or a node id
        self.broker_configs: dict[str, dict[str, str]] = {}
        # group configs (IncrementalAlterConfigs on a GROUP resource): group id -> {key: value as given}
        self.group_configs: dict[str, dict[str, str]] = {}
        if path.exists():
            self._load()
        else:
            self._save()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RuntimeError(
                f"{self.path} cannot be read ({exc}); restore it from a backup or move it away to start with no topics"
            ) from None
        self.cluster_id = data["cluster_id"]
        self.producer_id_limit = data.get("next_producer_id", 0)
        self.next_producer_id = self.producer_id_limit
        self.users = data.get("users", {})
        self.acls = data.get("acls", [])
        self.quotas = {tuple((t, n) for t, n in q["entity"]): dict(q["values"]) for q in data.get("quotas", [])}
        self.broker_configs = {k: dict(v) for k, v in data.get("broker_configs", {}).items()}
        self.group_configs = {k: dict(v) for k, v in data.get("group_configs", {}).items()}
        for name, entry in data.get("topics", {}).items():
            info = TopicInfo(name, bytes.fromhex(entry["id"]), entry["partitions"], entry.get("configs", {}))
            self.topics[name] = info
            self.by_id[info.topic_id] = info

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self.producer_id_limit,
            "topics": {
                t.name: {"id": t.topic_id.hex(), "partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            },
        }
        if self.users:
            data["users"] = self.users
        if self.acls:
            data["acls"] = self.acls
        if self.quotas:
            data["quotas"] = [
                {"entity": [list(e) for e in entity], "values": values}
                for entity, values in sorted(self.quotas.items(), key=lambda kv: repr(kv[0]))
            ]
        if self.broker_configs:
            data["broker_configs"] = self.broker_configs
        if self.group_configs:
            data["group_configs"] = self.group_configs
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(data, indent=1, sort_keys=True)
        atomic_write(self.path, text.encode())

    def _save_or_undo(self, undo) -> None:
        """Write the file; if that fails, run ``undo`` (restore memory) and raise TopicError."""
        try:
            self._save()
        except OSError as exc:
            undo()
            error = storage_error(exc, "write", str(self.path), str(self.path.parent))
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, str(error)) from None

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        topic_id = uuid.uuid4().bytes
        info = TopicInfo(name, topic_id, partitions, dict(configs))
        self.topics[name] = info
        self.by_id[topic_id] = info

        def undo() -> None:
            self.topics.pop(name, None)
            self.by_id.pop(topic_id, None)

        self._save_or_undo(undo)
        return info

    def delete(self, name: str) -> None:
        info = self.topics.pop(name)
        self.by_id.pop(info.topic_id, None)

        def undo() -> None:
            self.topics[name] = info
            self.by_id[info.topic_id] = info

        self._save_or_undo(undo)

    def set_partitions(self, name: str, count: int) -> None:
        info = self.topics[name]
        old, info.partitions = info.partitions, count
        self._save_or_undo(lambda: setattr(info, "partitions", old))

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        info = self.topics[name]
        old, info.configs = info.configs, dict(configs)
        self._save_or_undo(lambda: setattr(info, "configs", old))

    def set_user_configs(self, user: str, configs: dict[str, str]) -> None:
        if configs:
            self.users[user] = dict(configs)
        else:
            self.users.pop(user, None)
        self._save()

    def set_quotas(self, quotas: dict[tuple, dict[str, float]]) -> None:
        old = self.quotas
        self.quotas = {e: dict(v) for e, v in quotas.items() if v}
        self._save_or_undo(lambda: setattr(self, "quotas", old))

    def set_broker_configs(self, name: str, configs: dict[str, str]) -> None:
        """The dynamic configs of broker `name` ("" for the cluster-wide default)."""
        old = dict(self.broker_configs)
        if configs:
            self.broker_configs[name] = dict(configs)
        else:
            self.broker_configs.pop(name, None)
        self._save_or_undo(lambda: setattr(self, "broker_configs", old))

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """The configs of group `group_id` replaced (empty: it has none of its own)."""
        old = dict(self.group_configs)
        if configs:
            self.group_configs[group_id] = dict(configs)
        else:
            self.group_configs.pop(group_id, None)
        self._save_or_undo(lambda: setattr(self, "group_configs", old))

    def set_acls(self, rows: list[list]) -> None:
        self.acls = [list(r) for r in rows]
        self._save()

    def allocate_producer_id(self) -> int:
        """Producer ids come from blocks reserved on disk, so a restart never reuses one."""
        if self.next_producer_id >= self.producer_id_limit:
            old = self.producer_id_limit
            self.producer_id_limit = self.next_producer_id + PRODUCER_ID_BLOCK
            self._save_or_undo(lambda: setattr(self, "producer_id_limit", old))
        pid = self.next_producer_id
        self.next_producer_id += 1
        return pid
