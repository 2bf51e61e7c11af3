"""Differential scenarios for the share coordinator (Kafka 4.3): FindCoordinator key type SHARE,
the five share-group state APIs (InitializeShareGroupState, ReadShareGroupState,
WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary) and the share admin APIs
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) as far as they do not
need a share group with members (that needs ShareGroupHeartbeat: the share groups' scenarios).

They run against the reference Kafka 4.3.1 only (Kafka 4.0 serves none of these):
`test_share_coordinator_differential.py`, or a 4.3 target of the differential run.
"""

from __future__ import annotations

from typing import Any

from compat_tests.differential.harness import Scenario, Step
from compat_tests.differential.scenarios import await_topic, commit_body, create_topic, req, sc, setup
from strom.protocol.schema import ApiKey as A

SOME_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # any topic id: a share key is only parsed and hashed


def _batch(first: int, last: int, state: int, count: int) -> dict[str, int]:
    return {"first_offset": first, "last_offset": last, "delivery_state": state, "delivery_count": count}


def _state(api: int, version: int, partition: int = 0, topic: str = "@tid:{s}", group: str = "{s}-g", **p: Any) -> Step:
    return req(
        api,
        version,
        {"group_id": group, "topics": [{"topic_id": topic, "partitions": [{"partition": partition, **p}]}]},
    )


def _init(state_epoch: int, start: int, **kw: Any) -> Step:
    return _state(A.INITIALIZE_SHARE_GROUP_STATE, 0, state_epoch=state_epoch, start_offset=start, **kw)


def _write(
    version: int, state_epoch: int, leader_epoch: int, start: int, batches: list[dict[str, int]], **kw: Any
) -> Step:
    return _state(
        A.WRITE_SHARE_GROUP_STATE,
        version,
        state_epoch=state_epoch,
        leader_epoch=leader_epoch,
        start_offset=start,
        state_batches=batches,
        **({"delivery_complete_count": kw.pop("dcc")} if "dcc" in kw else {}),
        **kw,
    )


def _read(leader_epoch: int, **kw: Any) -> Step:
    return _state(A.READ_SHARE_GROUP_STATE, 0, leader_epoch=leader_epoch, **kw)


def _summary(version: int = 1, **kw: Any) -> Step:
    return _state(A.READ_SHARE_GROUP_STATE_SUMMARY, version, leader_epoch=-1, **kw)


def _coordinator_ready() -> list[Step]:
    """The share coordinator's topic made and loaded (Kafka answers COORDINATOR_NOT_AVAILABLE while
    it creates `__share_group_state`), and the group coordinator's."""
    return [
        setup(A.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [f"{{s}}-g:{SOME_TOPIC_ID}:0"]}),
        Step(
            int(A.FIND_COORDINATOR),
            6,
            {"key_type": 2, "coordinator_keys": [f"{{s}}-g:{SOME_TOPIC_ID}:0"]},
            compare=False,
            until_lacks="'error_code': 15",
        ),
        setup(A.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["{s}-g"]}),
    ]


def find_coordinator_share() -> list[Scenario]:
    keys = [
        f"{{s}}-g:{SOME_TOPIC_ID}:0",
        "{s}-g",
        f"{{s}}-g:{SOME_TOPIC_ID}:-1",
        "{s}-g:not-a-uuid:0",
        f":{SOME_TOPIC_ID}:0",
    ]
    out = [
        sc(
            "share-find-coordinator-v6",
            *_coordinator_ready(),
            req(A.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": keys}),
        )
    ]
    for v in (4, 5):
        out.append(
            sc(
                f"share-find-coordinator-v{v}",
                req(A.FIND_COORDINATOR, v, {"key_type": 2, "coordinator_keys": keys[:2]}),
            )
        )
    out.append(sc("share-find-coordinator-v3", req(A.FIND_COORDINATOR, 3, {"key_type": 2, "key": keys[0]})))
    return out


def share_state_lifecycle() -> Scenario:
    return sc(
        "share-state-lifecycle",
        create_topic("{s}", 2),
        await_topic("{s}", 2),
        *_coordinator_ready(),
        _summary(),  # uninitialized
        _read(0),  # INVALID_REQUEST: uninitialized
        _write(1, 0, 0, 0, [_batch(0, 2, 2, 1)]),  # INVALID_REQUEST: uninitialized
        _state(A.DELETE_SHARE_GROUP_STATE, 0),  # nothing to delete
        _init(0, 0),
        _summary(0),
        _summary(1),
        _read(-1),
        _write(1, 0, 2, 0, [_batch(0, 9, 0, 1)], dcc=0),
        _write(1, 0, 2, -1, [_batch(3, 4, 2, 1)], dcc=2),
        _write(0, 0, 2, -1, [_batch(2, 6, 0, 2), _batch(5, 5, 4, 1)]),  # higher delivery count wins
        _read(2),
        _summary(),
        _read(5),  # a new leader: recorded
        _summary(),
        _write(1, 0, 4, -1, []),  # FENCED_LEADER_EPOCH
        _read(4),  # FENCED_LEADER_EPOCH
        _write(1, 0, -1, -1, []),
        _write(1, 0, 5, 4, []),  # the start offset moves, the batches below it go
        _read(5),
        _init(1, 20),
        _summary(0),
        _write(1, 0, 5, -1, []),  # FENCED_STATE_EPOCH
        _write(1, 3, 5, -1, []),  # a newer state epoch: written, not recorded
        _summary(),
        _init(0, 7),  # FENCED_STATE_EPOCH
        _init(3, 30),
        _summary(),
        _init(3, -1),  # an unknown start: an unknown delivered count
        _summary(),
        _state(A.DELETE_SHARE_GROUP_STATE, 0),
        _summary(),
        _read(0),
    )


def share_state_errors() -> Scenario:
    return sc(
        "share-state-errors",
        create_topic("{s}", 2),
        await_topic("{s}", 2),
        *_coordinator_ready(),
        _init(0, 0, topic="@tid:no-such-topic"),  # zero id: UNKNOWN_TOPIC_OR_PARTITION
        _init(0, 0, partition=5),
        _init(0, 0, partition=-1),
        _summary(partition=5),
        _summary(topic="@tid:no-such-topic"),
        _read(0, partition=-1),
        _read(0, partition=5),  # uninitialized comes first
        _state(A.DELETE_SHARE_GROUP_STATE, 0, partition=5),
        _read(0, group=""),  # an empty group id: no results
        _summary(group=""),
        req(A.READ_SHARE_GROUP_STATE, 0, {"group_id": "{s}-g", "topics": []}),
        req(
            A.READ_SHARE_GROUP_STATE,
            0,
            {
                "group_id": "{s}-g",
                "topics": [
                    {
                        "topic_id": "@tid:{s}",
                        "partitions": [{"partition": 0, "leader_epoch": 0}, {"partition": 1, "leader_epoch": 0}],
                    }
                ],
            },
        ),
    )


def _describe(version: int, *groups: tuple[str, list[tuple[str, list[int]]] | None]) -> Step:
    body = {
        "groups": [
            {
                "group_id": g,
                "topics": None if topics is None else [{"topic_name": t, "partitions": p} for t, p in topics],
            }
            for g, topics in groups
        ]
    }
    return req(A.DESCRIBE_SHARE_GROUP_OFFSETS, version, body)


def _alter(group: str, *topics: tuple[str, list[tuple[int, int]]]) -> Step:
    body = {
        "group_id": group,
        "topics": [
            {"topic_name": t, "partitions": [{"partition_index": i, "start_offset": o} for i, o in parts]}
            for t, parts in topics
        ],
    }
    return req(A.ALTER_SHARE_GROUP_OFFSETS, 0, body)


def _delete(group: str, *topics: str) -> Step:
    return req(A.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": t} for t in topics]})


MEMBER_ID = "AAAAAAAAAAAAAAAAAAAAAg"  # a share consumer's own member id (KIP-1082)


def _heartbeat(epoch: Any, topics: list[str] | None) -> dict[str, Any]:
    return {
        "group_id": "{s}-g",
        "member_id": MEMBER_ID,
        "member_epoch": epoch,
        "rack_id": None,
        "subscribed_topic_names": topics,
    }


def share_offsets_admin() -> list[Scenario]:
    ready = [create_topic("{s}", 2), await_topic("{s}", 2), *_coordinator_ready()]
    return [
        sc(
            "share-offsets-no-group",
            *ready,
            *[_describe(v, ("{s}-g", None), ("{s}-g", [("{s}", [0, 1]), ("no-such-topic", [0])])) for v in (0, 1)],
            _delete("{s}-g", "{s}"),  # GROUP_ID_NOT_FOUND
            _describe(1, ("", None)),
            _alter("", ("{s}", [(0, 0)])),  # INVALID_GROUP_ID
            _delete("", "{s}"),
        ),
        sc(
            "share-offsets-alter-creates-the-group",
            *ready,
            _alter("{s}-g", ("{s}", [(0, 0), (9, 0)]), ("no-such-topic", [(0, 0)])),
            _describe(1, ("{s}-g", None)),
            _alter("{s}-g", ("{s}", [(1, 5)])),
            _describe(0, ("{s}-g", None)),
            _describe(1, ("{s}-g", [("{s}", [0, 1])]), ("{s}-other", None)),
            _alter("{s}-g", ("{s}", [(0, -5)])),  # no bounds check
            _alter("{s}-g", ("{s}", [(0, 500)])),
            _describe(1, ("{s}-g", None)),
            _alter("{s}-g"),
            _delete("{s}-g", "{s}", "no-such-topic"),
            _describe(1, ("{s}-g", None)),
            _delete("{s}-g", "{s}"),  # no offset information left
            _delete("{s}-g"),
        ),
        sc(
            "share-offsets-group-with-a-member",
            *ready,
            Step(
                int(A.SHARE_GROUP_HEARTBEAT),
                1,
                _heartbeat(0, ["{s}"]),
                compare=False,
                capture={"epoch": "member_epoch"},
            ),
            Step(
                int(A.SHARE_GROUP_HEARTBEAT),
                1,
                _heartbeat("$epoch", None),
                compare=False,
                until_has="'partitions': [0, 1]",
                capture={"epoch": "member_epoch"},
            ),
            _describe(1, ("{s}-g", None)),
            _alter("{s}-g", ("{s}", [(0, 0)])),  # NON_EMPTY_GROUP
            _delete("{s}-g", "{s}"),  # NON_EMPTY_GROUP
            Step(int(A.SHARE_GROUP_HEARTBEAT), 1, _heartbeat(-1, None), compare=False),
            _alter("{s}-g", ("{s}", [(1, 1)])),
            _describe(1, ("{s}-g", None)),
        ),
        sc(
            "share-offsets-classic-group",
            *ready,
            setup(A.OFFSET_COMMIT, 8, commit_body("{s}-classic", "{s}", 0, 1)),
            _describe(1, ("{s}-classic", None)),
            _alter("{s}-classic", ("{s}", [(0, 0)])),  # GROUP_ID_NOT_FOUND: not a share group
            _delete("{s}-classic", "{s}"),
        ),
    ]


def share_coordinator_scenarios() -> list[Scenario]:
    return [
        *find_coordinator_share(),
        share_state_lifecycle(),
        share_state_errors(),
        *share_offsets_admin(),
    ]
