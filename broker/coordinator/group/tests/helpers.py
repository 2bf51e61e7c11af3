"""Request builders for group tests."""

from __future__ import annotations

from strom.protocol.schema import ApiKey

SUBSCRIPTION = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # consumer protocol v1: topic "t"


async def join(
    client,
    group: str = "g",
    member_id: str = "",
    *,
    version: int = 5,
    instance: str | None = None,
    session_ms: int = 10_000,
    rebalance_ms: int = 20_000,
    protocols=(("range", SUBSCRIPTION),),
    protocol_type: str = "consumer",
):
    return await client.request(
        ApiKey.JOIN_GROUP,
        version,
        {
            "group_id": group,
            "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols],
        },
    )


async def join_fully(client, group: str = "g", **kw):
    """JoinGroup as a v4+ client does it: ask for a member id, then join with it."""
    first = await join(client, group, **kw)
    if first.error_code != 79:  # MEMBER_ID_REQUIRED
        return first
    return await join(client, group, first.member_id, **kw)


async def sync(
    client,
    group: str,
    member_id: str,
    generation: int,
    assignments: dict[str, bytes] | None = None,
    version: int = 3,
    instance: str | None = None,
):
    return await client.request(
        ApiKey.SYNC_GROUP,
        version,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        },
    )


async def heartbeat(client, group: str, member_id: str, generation: int, version: int = 3, instance: str | None = None):
    response = await client.request(
        ApiKey.HEARTBEAT,
        version,
        {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance},
    )
    return response.error_code


async def commit(
    client,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    version: int = 8,
    metadata: str | None = "meta",
):
    topics: dict[str, list[dict[str, object]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {"partition_index": partition, "committed_offset": offset, "committed_metadata": metadata}
        )
    response = await client.request(
        ApiKey.OFFSET_COMMIT,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        },
    )
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def fetch_offsets(client, group: str, topics: dict[str, list[int]] | None, version: int = 7):
    body_topics = None if topics is None else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    if version >= 8:
        response = await client.request(
            ApiKey.OFFSET_FETCH, version, {"groups": [{"group_id": group, "topics": body_topics}]}
        )
        topics_out = response.groups[0].topics
    else:
        response = await client.request(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": body_topics})
        topics_out = response.topics
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in topics_out
        for p in t.partitions
    }


async def create_topic(client, name: str, partitions: int = 3):
    response = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 1000,
        },
    )
    assert response.topics[0].error_code == 0
