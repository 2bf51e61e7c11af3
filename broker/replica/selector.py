"""Fetch from follower (KIP-392): which replica a consumer should read a partition from.

`replica.selector.class` names Kafka's selector; unset (Kafka's default) every consumer reads from
the leader. With `org.apache.kafka.common.replica.RackAwareReplicaSelector`, a leader answers a
consumer's Fetch (v11+, which carries the consumer's `client.rack` as `rack_id`) with
`preferred_read_replica` set to a replica in the consumer's rack, and no records, when the leader is
not in that rack itself: the client then fetches from that replica. `LeaderSelector` always picks
the leader.

As Kafka's leader does (`ReplicaManager.findPreferredReadReplica`), only replicas that may serve
the fetch offset are candidates: in the ISR, alive with an endpoint on the client's listener, and
whose log (as the leader last saw it from their fetches) spans the offset. Among those in the
consumer's rack the selector prefers the leader, then the replica with the highest log end offset,
then the one caught up most recently. A replica that leaves the ISR or the cluster is no longer
picked; a client told to read elsewhere asks the leader again when that replica fails it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .partition import Partition

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER = "org.apache.kafka.common.replica.LeaderSelector"
SELECTORS = (RACK_AWARE, LEADER)


@dataclass(frozen=True)
class ReplicaView:
    """One replica as the selector sees it (Kafka's ReplicaView)."""

    node_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


def select(
    selector: str | None, client_rack: str | None, leader: ReplicaView, replicas: Iterable[ReplicaView]
) -> ReplicaView | None:
    """The replica `selector` picks for a consumer in `client_rack` (None: no selector configured).
    `replicas` are the candidates besides the leader."""
    if selector is None:
        return None
    if selector == LEADER or not client_rack:
        return leader
    same_rack = [r for r in [leader, *replicas] if r.rack == client_rack]
    if not same_rack:
        return leader
    if leader in same_rack:
        return leader
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


class _Settings(Protocol):
    def __getitem__(self, key: str) -> Any: ...


class _LiveBrokers(Protocol):
    def live_brokers(self, listener_name: str | None = None) -> list[tuple[int, str, int, str | None]]: ...


def preferred_read_replica(
    config: _Settings,
    metadata: _LiveBrokers,
    partition: Partition,
    client_rack: str | None,
    fetch_offset: int,
    now_ms: int,
) -> int:
    """The replica id a leader points a consumer at instead of answering it, or -1 (read here)."""
    selector = config["replica.selector.class"]
    if selector != RACK_AWARE or not client_rack or not partition.is_leader:
        return -1  # no selector, or one that picks the leader: read here (nothing to look up)
    live = {node: rack for node, _host, _port, rack in metadata.live_brokers()}
    leader = ReplicaView(
        partition.local_id, live.get(partition.local_id, config["broker.rack"]), partition.log.log_end_offset, 0
    )
    candidates = []
    for replica in partition.replicas:
        state = partition.followers.get(replica)
        if replica == partition.local_id or state is None or replica not in partition.isr or replica not in live:
            continue
        if state.log_end_offset >= fetch_offset and state.log_start_offset <= fetch_offset:
            candidates.append(
                ReplicaView(replica, live[replica], state.log_end_offset, now_ms - state.last_caught_up_ms)
            )
    chosen = select(selector, client_rack, leader, candidates)
    return -1 if chosen is None or chosen.node_id == partition.local_id else chosen.node_id
