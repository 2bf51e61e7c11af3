"""TxnOffsetCommit is verified with the transaction coordinator before anything is written, as
Kafka 4.0's group coordinator verifies it (answers checked against the reference broker by
compat_tests/differential, scenarios txn_offset_commit-*): a producer the coordinator never gave
the transactional id, one with another epoch, or one whose transaction does not hold the group's
offsets partition is refused, and no offset becomes pending."""

from __future__ import annotations

import pytest

from strom.broker.coordinator.group.records import partition_for
from strom.broker.coordinator.txn.tests.test_coordinator import TID, init
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_apis import create


async def txn_commit(client, pid: int, epoch: int, group: str = "g", tid: str = TID, version: int = 3) -> ErrorCode:
    response = await client.request(
        ApiKey.TXN_OFFSET_COMMIT,
        version,
        {
            "transactional_id": tid,
            "group_id": group,
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 42,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    return ErrorCode(response.topics[0].partitions[0].error_code)


async def add_offsets(client, pid: int, epoch: int, group: str = "g") -> ErrorCode:
    response = await client.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
    )
    return ErrorCode(response.error_code)


async def nothing_pending(client, group: str = "g") -> bool:
    response = await client.request(
        ApiKey.OFFSET_FETCH,
        7,
        {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": True},
    )
    p = response.topics[0].partitions[0]
    return (p.error_code, p.committed_offset) == (ErrorCode.NONE, -1)


@pytest.mark.parametrize(
    "who, expected",
    [
        ("never initialised", ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("another producer id", ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("another epoch", ErrorCode.INVALID_PRODUCER_EPOCH),
        ("offsets not added", ErrorCode.INVALID_TXN_STATE),
    ],
)
async def test_an_unverified_producer_is_refused_and_nothing_is_pending(env, who, expected):
    _, client, _ = env
    await create(client, "t")
    if who == "never initialised":
        await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "never-used", "key_type": 1})
        assert await txn_commit(client, 4242, 0, tid="never-used") == expected
    else:
        pid = (await init(client)).producer_id
        if who != "offsets not added":
            assert await add_offsets(client, pid, 0) == ErrorCode.NONE
        pid, epoch = {"another producer id": (pid + 4242, 0), "another epoch": (pid, 7)}.get(who, (pid, 0))
        assert await txn_commit(client, pid, epoch) == expected
    assert await nothing_pending(client)


async def test_the_verified_producer_commits_after_add_offsets(env):
    _, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    assert await add_offsets(client, pid, 0) == ErrorCode.NONE
    assert await txn_commit(client, pid, 0) == ErrorCode.NONE
    # a group whose offsets live in another partition of __consumer_offsets (3 here) is not in the transaction
    other = next(g for g in (f"other-{i}" for i in range(100)) if partition_for(g, 3) != partition_for("g", 3))
    assert await txn_commit(client, pid, 0, group=other) == ErrorCode.INVALID_TXN_STATE
