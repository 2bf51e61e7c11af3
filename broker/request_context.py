"""What an API handler may use: the broker's services, built once by the composition root
(`strom.broker.server.root.BrokerServer`) and handed to every `handle(ctx, request)`.

A handler reaches the cluster only through these ports, so it never asks whether the broker is
standalone or a ZooKeeper cluster member: `metadata` and `admin` answer for either. Facts of the
connection a request came on (principal, listener name, client host) are not here but in the
context variables of `strom.broker.context`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from strom.broker.auth.authorizer import AclAuthorizer
    from strom.broker.config import BrokerConfig
    from strom.broker.coordinator.group.coordinator import GroupCoordinator
    from strom.broker.coordinator.share.coordinator import ShareCoordinator
    from strom.broker.coordinator.share.persister import Persister
    from strom.broker.coordinator.txn.coordinator import TransactionCoordinator
    from strom.broker.dynamic_config import DynamicConfigs
    from strom.broker.fetch_session import FetchManager
    from strom.broker.metadata.admin import AdminManager
    from strom.broker.metadata.cache import MetadataCache
    from strom.broker.quotas import QuotaManager
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.replica.share_manager import SharePartitionManager
    from strom.broker.replication_quota import ReplicationQuota
    from strom.broker.security import ListenerSecurity
    from strom.broker.security.credentials import StandaloneCredentials, ZkCredentials
    from strom.broker.stats import BrokerStats
    from strom.storage.log_manager import LogManager


class ApiVersions(Protocol):
    """What ApiVersions advertises (`strom.broker.server.dispatch.ApiVersionManager`: the registry's
    versions, under a test's version cap when one is set)."""

    def advertised(self) -> Sequence[tuple[int, int, int]]: ...


@dataclass(frozen=True)
class RequestContext:
    config: BrokerConfig
    node_id: int
    replica_manager: ReplicaManager
    metadata: MetadataCache
    admin: AdminManager
    groups: GroupCoordinator
    txn: TransactionCoordinator
    authorizer: AclAuthorizer | None  # None: authorization is off (everything allowed)
    quotas: QuotaManager
    fetch_sessions: FetchManager
    api_versions: ApiVersions  # (api key, min, max) of what ApiVersions advertises
    logs: LogManager
    dynamic_configs: DynamicConfigs
    leader_quota: ReplicationQuota
    follower_quota: ReplicationQuota
    credentials: StandaloneCredentials | ZkCredentials  # the SCRAM store
    security: Mapping[str, ListenerSecurity]  # per listener name: TLS and SASL
    stats: BrokerStats
    share_coordinator: ShareCoordinator | None = None  # the share-partition state in __share_group_state
    share_persister: Persister | None = None  # how share-partition leaders reach it (local or remote)
    share: SharePartitionManager | None = None  # share partitions and sessions (KIP-932)
