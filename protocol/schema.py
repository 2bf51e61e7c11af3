"""Kafka message schema: facts loaded once from the generated ``schema_data.json``.

``schema_data.json`` is produced by ``tools/dev/gen_protocol_schema.py`` from Kafka's reference
definitions. This module turns it into typed, read-only objects and answers version questions
(flexible versions, header versions). It holds no wire layout itself: ``protocol.codec`` builds
the byte layouts from these facts.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("schema_data.json")

VersionRange = tuple[int, int | None] | None


def _range(raw: list[int | None] | None) -> VersionRange:
    if raw is None:
        return None
    low, high = raw[0], raw[1]
    if low is None:
        raise ValueError(f"version range {raw} has no lower bound")
    return int(low), high


def in_range(version: int, rng: VersionRange) -> bool:
    """True when ``version`` falls inside a ``(low, high-or-None)`` range."""
    if rng is None:
        return False
    low, high = rng
    return version >= low and (high is None or version <= high)


@dataclass(frozen=True)
class FieldSpec:
    """One field of a message, as the reference declares it (name already snake_case)."""

    name: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange
    tagged_versions: VersionRange
    tag: int | None
    has_default: bool
    default: Any
    flexible_versions: VersionRange
    has_own_flexible: bool
    fields: tuple[FieldSpec, ...]

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return bool(self.fields)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FieldSpec:
        return cls(
            name=raw["name"],
            type=raw["type"],
            versions=_range(raw["versions"]),
            nullable_versions=_range(raw.get("nullable_versions")),
            tagged_versions=_range(raw.get("tagged_versions")),
            tag=raw.get("tag"),
            has_default="default" in raw,
            default=raw.get("default"),
            flexible_versions=_range(raw.get("flexible_versions")),
            has_own_flexible="flexible_versions" in raw,
            fields=tuple(cls.from_json(f) for f in raw.get("fields", ())),
        )


@dataclass(frozen=True)
class MessageSpec:
    """A request, response or header: its version ranges and top-level fields."""

    valid_versions: VersionRange
    flexible_versions: VersionRange
    fields: tuple[FieldSpec, ...]
    latest_version_unstable: bool = False

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> MessageSpec:
        return cls(
            valid_versions=_range(raw["valid_versions"]),
            flexible_versions=_range(raw["flexible_versions"]),
            fields=tuple(FieldSpec.from_json(f) for f in raw["fields"]),
            latest_version_unstable=bool(raw.get("latest_version_unstable", False)),
        )

    @property
    def min_version(self) -> int:
        assert self.valid_versions is not None
        return self.valid_versions[0]

    @property
    def max_version(self) -> int:
        assert self.valid_versions is not None and self.valid_versions[1] is not None
        return self.valid_versions[1]


@dataclass(frozen=True)
class ApiSpec:
    """One Kafka API: key, reference name and its request/response messages."""

    api_key: int
    name: str
    request: MessageSpec
    response: MessageSpec
    listeners: tuple[str, ...]

    @property
    def min_version(self) -> int:
        return self.request.min_version

    @property
    def max_version(self) -> int:
        return self.request.max_version


@cache
def schema_document() -> dict[str, Any]:
    """The raw generated document (loaded once)."""
    with SCHEMA_PATH.open(encoding="utf-8") as fh:
        document: dict[str, Any] = json.load(fh)
    return document


@cache
def _raw_apis() -> dict[int, dict[str, Any]]:
    return {raw["api_key"]: raw for raw in schema_document()["apis"]}


@cache
def _spec(api_key: int) -> ApiSpec:
    # built on first use: the broker answers about 25 of the 88 APIs, and start-up need not pay
    # for the rest
    raw = _raw_apis()[api_key]
    return ApiSpec(
        api_key=api_key,
        name=raw["name"],
        request=MessageSpec.from_json(raw["request"]),
        response=MessageSpec.from_json(raw["response"]),
        listeners=tuple(raw["request"].get("listeners", ())),
    )


@cache
def header_spec(name: str) -> MessageSpec:
    """``header_spec("request_header")`` or ``header_spec("response_header")``."""
    return MessageSpec.from_json(schema_document()["headers"][name])


class ApiKey(enum.IntEnum):
    """Every Kafka API key, named as Kafka names it (Kafka's ApiKeys.java, UPPER_SNAKE).

    Written out so that a type checker knows every member; protocol/tests/test_schema.py checks
    that it is exactly the API list of ``schema_data.json``, in its order.
    """

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CLIENT_METRICS_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


def all_api_keys() -> list[int]:
    return sorted(_raw_apis())


def api_spec(api_key: int) -> ApiSpec:
    """The spec for ``api_key``; ``KeyError`` when Kafka defines no such API."""
    return _spec(int(api_key))


def is_known_api(api_key: int) -> bool:
    return int(api_key) in _raw_apis()


def is_supported_version(api_key: int, version: int) -> bool:
    key = int(api_key)
    return key in _raw_apis() and in_range(version, _spec(key).request.valid_versions)


def is_flexible(api_key: int, version: int) -> bool:
    """True when ``version`` of this API uses compact encodings and tagged fields."""
    return in_range(version, api_spec(api_key).request.flexible_versions)


# Quirks, kept in one place (as in Kafka's ApiMessageType).
_HEADER_V0_REQUESTS = frozenset({(7, 0)})  # ControlledShutdown v0 predates client_id
_RESPONSE_HEADER_V0_APIS = frozenset({18})  # ApiVersions responses always use header v0


def request_header_version(api_key: int, version: int) -> int:
    """0, 1 or 2: the request header layout a client uses for this API version."""
    if is_flexible(api_key, version):
        return 2
    return 0 if (int(api_key), version) in _HEADER_V0_REQUESTS else 1


def response_header_version(api_key: int, version: int) -> int:
    """0 or 1: the response header layout (tagged fields only in v1)."""
    if int(api_key) in _RESPONSE_HEADER_V0_APIS:
        return 0
    return 1 if is_flexible(api_key, version) else 0
