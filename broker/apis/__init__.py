"""Every API the broker answers, one module each, registered in one visible list.

A module has `API_KEY`, `VERSIONS` (the oldest and newest version its handler implements) and
`async def handle(ctx: RequestContext, request: Request) -> dict[str, Any] | None` (None: no
response, as for acks=0; `strom.broker.request_context`: the services a handler may use). What
ApiVersions advertises is computed from this list intersected with the protocol schema.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from strom.protocol.connection import BadRequest
from strom.protocol.errors import ErrorCode, UnsupportedVersion
from strom.protocol.schema import api_spec

from . import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    streams_group_describe,
    streams_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
)

MODULES: list[ModuleType] = [
    produce,
    fetch,
    list_offsets,
    metadata,
    api_versions,
    create_topics,
    delete_topics,
    init_producer_id,
    offset_for_leader_epoch,
    describe_configs,
    alter_configs,
    create_partitions,
    incremental_alter_configs,
    describe_cluster,
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    list_groups,
    describe_groups,
    delete_groups,
    offset_delete,
    sasl_handshake,
    sasl_authenticate,
    describe_acls,
    create_acls,
    delete_acls,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_log_dirs,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_producers,
    describe_transactions,
    list_transactions,
    delete_records,
    elect_leaders,
    describe_topic_partitions,
    consumer_group_heartbeat,
    consumer_group_describe,
    describe_client_quotas,
    alter_client_quotas,
    alter_partition_reassignments,
    list_partition_reassignments,
    streams_group_heartbeat,
    streams_group_describe,
    initialize_share_group_state,
    read_share_group_state,
    write_share_group_state,
    delete_share_group_state,
    read_share_group_state_summary,
    describe_share_group_offsets,
    alter_share_group_offsets,
    delete_share_group_offsets,
    # share groups (KIP-932)
    share_group_heartbeat,
    share_group_describe,
    share_fetch,
    share_acknowledge,
]

HANDLERS: dict[int, ModuleType] = {m.API_KEY: m for m in MODULES}


def _advertised(module: ModuleType) -> tuple[int, int, int]:
    spec = api_spec(module.API_KEY)
    low = max(module.VERSIONS[0], spec.min_version)
    high = min(module.VERSIONS[1], spec.max_version)
    if low > high:
        raise RuntimeError(f"{module.__name__}: versions {module.VERSIONS} outside the schema's")
    return module.API_KEY, low, high


SUPPORTED: list[tuple[int, int, int]] = sorted(_advertised(m) for m in MODULES)
SUPPORTED_RANGE: dict[int, tuple[int, int]] = {key: (lo, hi) for key, lo, hi in SUPPORTED}


def error_response(bad: BadRequest) -> dict[str, Any] | None:
    """The one malformed request Kafka still answers: ApiVersions in a version it doesn't know."""
    header = bad.header  # None: the header was unreadable (the connection handler answers none of those)
    if header is not None and header.api_key == api_versions.API_KEY and isinstance(bad.error, UnsupportedVersion):
        return api_versions.body(ErrorCode.UNSUPPORTED_VERSION)
    return None
