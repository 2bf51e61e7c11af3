"""What each console page and /api endpoint shows, as plain dicts (the pages render the same dicts
the JSON API returns, so both always agree)."""

from __future__ import annotations

import gc
import struct
import time
from contextlib import contextmanager

import trio
import trio.lowlevel

from .source import OFFSETS_TOPIC, BrokerSource, PartitionInfo

# Views over every partition give the event loop back after this many partitions, so that a
# page of a 10,000-partition broker never holds Kafka requests for more than a few milliseconds.
CHUNK = 200


_gc_holders = 0
_gc_was_enabled = False


@contextmanager
def gc_paused():
    """No cyclic garbage collection while a view is built. A view over 10,000 partitions makes
    tens of thousands of short-lived objects; with the collector on, gen-0 passes promote the
    live ones and soon trigger a full collection, which walks the broker's whole heap (200 ms
    with 10,000 partitions) and holds every Kafka request meanwhile. Paused, they are freed by
    reference counting when the answer is built, and nothing is promoted."""
    global _gc_holders, _gc_was_enabled
    if _gc_holders == 0:
        _gc_was_enabled = gc.isenabled()
        gc.disable()
    _gc_holders += 1
    try:
        yield
    finally:
        _gc_holders -= 1
        if _gc_holders == 0 and _gc_was_enabled:
            gc.enable()


class Pacer:
    """Counts work and yields to the event loop every ``CHUNK`` units."""

    def __init__(self, chunk: int = CHUNK):
        self.chunk, self.done = chunk, 0

    async def tick(self, units: int = 1) -> None:
        before = self.done
        self.done += units
        if before // self.chunk != self.done // self.chunk:
            await trio.lowlevel.checkpoint()


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """A ConsumerProtocolAssignment: int16 version, [topic: string, partitions: [int32]], user data."""
    out: dict[str, list[int]] = {}
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                return out
            topic = data[pos : pos + size].decode("utf-8")
            pos += size
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if n < 0 or pos + 4 * n > len(data):
                return out
            out[topic] = list(struct.unpack_from(f">{n}i", data, pos))
            pos += 4 * n
    except (struct.error, UnicodeDecodeError):
        pass
    return out


class Views:
    def __init__(self, source: BrokerSource, history=None):
        self.source = source
        self.history = history

    # ------------------------------------------------------------------ brokers and overview
    def brokers(self) -> list[dict]:
        s = self.source
        live = {b[0]: b for b in s.live_brokers()}
        controller = s.controller_id()
        out = []
        registered = s.registrations()
        now = time.time()
        for broker_id in sorted(s.known_broker_ids() | set(live)):
            entry = live.get(broker_id)
            listeners, since_ms = registered.get(
                broker_id, ([f"PLAINTEXT://{entry[1]}:{entry[2]}"] if entry else [], 0)
            )
            uptime = round(now - since_ms / 1000, 1) if entry and since_ms > 0 else None
            version = None
            if broker_id == s.node_id:
                listeners, uptime, version = s.listeners(), round(s.uptime_s(), 1), s.version
            out.append(
                {
                    "id": broker_id,
                    "up": entry is not None,
                    "host": entry[1] if entry else None,
                    "port": entry[2] if entry else None,
                    "rack": entry[3] if entry else None,
                    "listeners": listeners,
                    "controller": broker_id == controller,
                    "this": broker_id == s.node_id,
                    "version": version,
                    "uptime_s": uptime,
                }
            )  # other brokers: since their ZooKeeper registration
        return out

    async def overview(self) -> dict:
        s = self.source
        total = led = under = offline = 0
        pacer = Pacer()
        for name in s.topic_names():
            for p in s.partitions(name):
                total += 1
                led += p.leader == s.node_id
                under += p.under_replicated
                offline += p.offline
            await pacer.tick(s.topic(name).partitions if s.topic(name) else 1)
        brokers = self.brokers()
        rates = self.history.rates() if self.history is not None else {}
        return {
            "cluster_id": s.cluster_id(),
            "node_id": s.node_id,
            "controller": s.controller_id(),
            "version": s.version,
            "uptime_s": round(s.uptime_s(), 1),
            "mode": "zookeeper" if s.clustered else "standalone",
            "brokers": brokers,
            "brokers_up": sum(b["up"] for b in brokers),
            "brokers_down": sum(not b["up"] for b in brokers),
            "topics": len(s.topic_names()),
            "partitions": total,
            "partitions_led": led,
            "under_replicated_partitions": under,
            "offline_partitions": offline,
            "connections": len(s.stats.connections),
            "groups": len(s.groups()),
            "bytes_in_per_s": rates.get("bytes_in", 0.0),
            "bytes_out_per_s": rates.get("bytes_out", 0.0),
            "records_in_per_s": rates.get("messages_in", 0.0),
            "records_out_per_s": rates.get("messages_out", 0.0),
        }

    # ------------------------------------------------------------------ topics
    def topic_names(self, query: str | None = None) -> list[str]:
        names = self.source.topic_names()
        return [n for n in names if query.lower() in n.lower()] if query else names

    async def topics(self, names: list[str] | None = None) -> list[dict]:
        out = []
        pacer = Pacer()
        for name in self.source.topic_names() if names is None else names:
            parts = list(self.source.partitions(name))
            out.append(self._topic_summary(name, parts))
            await pacer.tick(len(parts))
        return out

    def _topic_summary(self, name: str, parts: list[PartitionInfo]) -> dict:
        local = [p for p in parts if p.local]
        rates = self.history.topic_rates(name) if self.history is not None else {}
        return {
            "name": name,
            "internal": name.startswith("__"),
            "partitions": len(parts),
            "replication_factor": max((len(p.replicas) for p in parts), default=0),
            "records": sum(max(0, p.high_watermark - p.log_start_offset) for p in local),
            "log_end_offset": sum(p.log_end_offset for p in local),
            "size": sum(p.size for p in local),
            "segments": sum(p.segments for p in local),
            "under_replicated_partitions": sum(p.under_replicated for p in parts),
            "offline_partitions": sum(p.offline for p in parts),
            "bytes_in_per_s": rates.get("bytes_in", 0.0),
            "bytes_out_per_s": rates.get("bytes_out", 0.0),
            "records_in_per_s": rates.get("messages_in", 0.0),
            "records_out_per_s": rates.get("messages_out", 0.0),
        }

    def topic(self, name: str) -> dict | None:
        info = self.source.topic(name)
        if info is None:
            return None
        parts = list(self.source.partitions(name))
        out = self._topic_summary(name, parts)
        out["topic_id"] = info.topic_id.hex()
        out["partition_details"] = [
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
                "offline_replicas": p.offline_replicas,
                "under_replicated": p.under_replicated,
                "local": p.local,
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "high_watermark": p.high_watermark,
                "segments": p.segments,
                "size": p.size,
            }
            for p in parts
        ]
        out["configs"] = self.source.topic_configs(name)
        return out

    # ------------------------------------------------------------------ groups
    def _group_ids(self) -> list[str]:
        ids = {g.group_id for g in self.source.groups()} | {g.group_id for g in self.source.consumer_groups()}
        return sorted(ids)

    def _kind(self, group_id: str):
        """(classic group or None, KIP-848 group or None, which one describes the members)."""
        classic = self.source.group(group_id)
        kip848 = self.source.consumer_group(group_id)
        use_kip848 = kip848 is not None and (bool(kip848.members) or classic is None or not classic.members)
        return classic, kip848, use_kip848

    async def share_groups(self) -> list[dict]:
        """Share groups (KIP-932): members and assignments (where coordinated here), and the share
        partitions this broker leads for them: start offset, in flight by state, delivery counts."""
        s = self.source
        names = {}
        groups = {g.group_id: g for g in s.share_groups()}
        partitions: dict[str, list[dict]] = {}
        pacer = Pacer()
        for group_id, topic, index, sp in s.share_partitions():
            await pacer.tick(sp.in_flight() + 1)
            counts = sp.counts()
            deliveries = [r.delivery_count for r in sp.records.values()]
            partitions.setdefault(group_id, []).append(
                {
                    "topic": topic,
                    "partition": index,
                    "start_offset": sp.start_offset,
                    "end_offset": sp.end_offset,
                    "in_flight": sp.in_flight(),
                    **counts,
                    "max_delivery_count": max(deliveries, default=0),
                    "redelivered": sum(1 for d in deliveries if d > 1),
                }
            )
        out = []
        for group_id in sorted(set(groups) | set(partitions)):
            group = groups.get(group_id)
            members = []
            if group is not None:
                for m in group.members.values():
                    assigned = []
                    for topic_id, parts in sorted(m.assignment.items()):
                        if topic_id not in names:
                            names[topic_id] = s.topic_name_by_id(topic_id) or topic_id.hex()
                        assigned.append(f"{names[topic_id]}: {', '.join(map(str, sorted(parts)))}")
                    members.append(
                        {
                            "member_id": m.member_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_epoch": m.member_epoch,
                            "subscribed": sorted(m.subscribed),
                            "assignment": assigned,
                        }
                    )
            out.append(
                {
                    "group_id": group_id,
                    "state": group.state if group is not None else "-",
                    "group_epoch": group.group_epoch if group is not None else None,
                    "assignment_epoch": group.assignment_epoch if group is not None else None,
                    "members": members,
                    "partitions": partitions.get(group_id, []),
                }
            )
        return out

    async def groups(self) -> list[dict]:
        out = []
        pacer = Pacer()
        for group_id in self._group_ids():
            classic, kip848, use_kip848 = self._kind(group_id)
            owners: dict = {}  # the assigned partitions count, committed or not
            if use_kip848:
                self._kip848_members(kip848, 0.0, owners)
            elif classic is not None:
                self._classic_members(classic, 0.0, owners)
            detail = self._offsets(classic, owners)
            await pacer.tick(len(detail) + 1)
            if use_kip848:
                state, protocol_type, protocol, members = (
                    kip848.state,
                    "consumer",
                    kip848.assignor_name,
                    len(kip848.members),
                )
            else:
                state, protocol_type, protocol, members = (
                    classic.state.value,
                    classic.protocol_type,
                    classic.protocol_name,
                    len(classic.members),
                )
            out.append(
                {
                    "group_id": group_id,
                    "state": state,
                    "protocol_type": protocol_type,
                    "protocol": protocol,
                    "group_protocol": "consumer" if use_kip848 else "classic",
                    "members": members,
                    "coordinator": self.source.node_id,
                    "partitions": len(detail),
                    "total_lag": sum(o["lag"] for o in detail),
                    "total_lag_bytes": sum(o["lag_bytes"] for o in detail),
                }
            )
        return out

    def _offsets(self, group, owners: dict | None = None) -> list[dict]:
        """Every partition with a committed offset, and (as kafka-consumer-groups.sh --describe) every
        assigned one without: no committed offset yet, its whole log (log start to end) as lag."""
        owners = owners or {}
        committed_offsets = dict(group.offsets) if group is not None else {}
        out = []
        for topic, index in sorted(set(committed_offsets) | set(owners)):
            committed = committed_offsets.get((topic, index))
            partition = self.source.local_partition(topic, index)
            entry = {
                "topic": topic,
                "partition": index,
                "committed_offset": committed.offset if committed is not None else None,
                "log_end_offset": None,
                "log_start_offset": None,
                "lag": 0,
                "lag_bytes": 0,
                "member": owners.get((topic, index)),
                "metadata": committed.metadata if committed is not None else None,
                "commit_timestamp": committed.commit_timestamp if committed is not None else None,
            }
            if partition is not None and partition.is_leader:
                end = partition.high_watermark
                start = partition.log.log_start_offset
                position = committed.offset if committed is not None else start
                entry["log_end_offset"] = end
                entry["log_start_offset"] = start
                entry["lag"] = max(0, end - position)
                entry["lag_bytes"] = self.source.bytes_between(partition, position, end)
            out.append(entry)
        return out

    def _classic_members(self, group, now: float, owners: dict) -> list[dict]:
        members = []
        for m in group.members.values():
            assignment = decode_assignment(m.assignment) if group.protocol_type == "consumer" else {}
            for topic, parts in assignment.items():
                for p in parts:
                    owners[(topic, p)] = m.member_id
            since = None
            if m.heartbeat_deadline is not None:
                since = max(0, int((now - (m.heartbeat_deadline - m.session_timeout_ms / 1000)) * 1000))
            members.append(
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "instance_id": m.group_instance_id,
                    "session_timeout_ms": m.session_timeout_ms,
                    "since_heartbeat_ms": since,
                    "leader": m.member_id == group.leader_id,
                    "assignment": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items())],
                }
            )
        return members

    def _kip848_members(self, group, now: float, owners: dict) -> list[dict]:
        members = []
        timeout_ms = self.source.consumer_session_timeout_ms()
        for m in group.members.values():
            assignment: dict[str, list[int]] = {}
            for topic_id, parts in m.assigned.items():
                name = self.source.topic_name_by_id(topic_id) or topic_id.hex()
                assignment[name] = sorted(parts)
                for p in parts:
                    owners[(name, p)] = m.member_id
            since = max(0, int((now - (m.session_deadline - timeout_ms / 1000)) * 1000)) if m.session_deadline else None
            members.append(
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "instance_id": m.instance_id,
                    "session_timeout_ms": timeout_ms,
                    "since_heartbeat_ms": since,
                    "leader": False,
                    "member_epoch": m.member_epoch,
                    "assignment": [{"topic": t, "partitions": ps} for t, ps in sorted(assignment.items())],
                }
            )
        return members

    def group(self, group_id: str) -> dict | None:
        classic, kip848, use_kip848 = self._kind(group_id)
        if classic is None and kip848 is None:
            return None
        now = self.source.now()
        owners: dict = {}
        if use_kip848:
            members = self._kip848_members(kip848, now, owners)
            head = {
                "state": kip848.state,
                "protocol_type": "consumer",
                "protocol": kip848.assignor_name,
                "group_protocol": "consumer",
                "generation": kip848.group_epoch,
                "leader": None,
            }
        else:
            members = self._classic_members(classic, now, owners)
            head = {
                "state": classic.state.value,
                "protocol_type": classic.protocol_type,
                "protocol": classic.protocol_name,
                "group_protocol": "classic",
                "generation": classic.generation,
                "leader": classic.leader_id,
            }
        offsets = self._offsets(classic, owners)
        return {
            "group_id": group_id,
            **head,
            "coordinator": self.source.node_id,
            "members": members,
            "offsets": offsets,
            "total_lag": sum(o["lag"] for o in offsets),
            "total_lag_bytes": sum(o["lag_bytes"] for o in offsets),
        }

    # ------------------------------------------------------------------ clients
    def clients(self) -> list[dict]:
        now_mono, now = time.monotonic(), time.time()
        out = []
        for c in sorted(self.source.stats.connections.values(), key=lambda c: c.id):
            roles = []
            if c.produces:
                roles.append("produces")
            if c.fetches:
                roles.append("replicates" if c.replica_id >= 0 else "fetches")
            if c.coordinates:
                roles.append("coordinates")
            out.append(
                {
                    "id": c.id,
                    "client_id": c.client_id,
                    "software_name": c.software_name,
                    "software_version": c.software_version,
                    "host": c.host,
                    "port": c.port,
                    "roles": roles,
                    "produce_requests": c.produces,
                    "fetch_requests": c.fetches,
                    "coordinator_requests": c.coordinates,
                    "producer_ids": sorted(c.producer_ids),
                    "groups": sorted(c.groups),
                    "requests": c.requests,
                    "bytes_in": c.bytes_in,
                    "bytes_out": c.bytes_out,
                    "idle_ms": int((now_mono - c.last_active) * 1000),
                    "connected_s": round(now - c.opened, 1),
                }
            )
        return out


def is_internal(topic: str) -> bool:
    return topic == OFFSETS_TOPIC or topic.startswith("__")
