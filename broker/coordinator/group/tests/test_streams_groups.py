"""Streams groups (KIP-1071): the sticky task assignor, the topology's configuration, and the member
lifecycle (join, revoke-then-assign, epochs, fencing, leaving, session expiry, offsets checks), with
Kafka 4.3's answers and messages (read from the reference broker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker.coordinator.group.config import GroupCoordinatorConfig, StreamsGroupSettings
from strom.broker.coordinator.group.coordinator import GroupCoordinator
from strom.broker.coordinator.group.streams_assignor import AssignorMember, all_tasks, sticky_assign
from strom.broker.coordinator.group.streams_groups import (
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    SHUTDOWN_APPLICATION,
    StreamsGroups,
    configure,
    topology_from_request,
)
from strom.broker.coordinator.tests.memory_runtime import MemoryPartition, MemoryRuntime
from strom.protocol.errors import ErrorCode

T0 = [("0", p) for p in range(4)]


def tasks(*names: str) -> frozenset[tuple[str, int]]:
    """ "0_1" -> ("0", 1)."""
    return frozenset((n.split("_")[0], int(n.split("_")[1])) for n in names)


def member(
    process: str, active: frozenset[tuple[str, int]] = frozenset(), standby: frozenset[tuple[str, int]] = frozenset()
) -> AssignorMember:
    return AssignorMember(process, active, standby)


# ---------------------------------------------------------------------- the assignor
@pytest.mark.parametrize(
    ("members", "standbys", "expected_active", "expected_standby"),
    [
        # one member: everything
        ({"a": member("p1")}, 0, {"a": tasks("0_0", "0_1", "0_2", "0_3")}, {"a": set()}),
        # two fresh members: two each
        ({"a": member("p1"), "b": member("p2")}, 0, {"a": tasks("0_0", "0_2"), "b": tasks("0_1", "0_3")}, None),
        # sticky: each keeps what it had while that is balanced
        (
            {"a": member("p1", tasks("0_1", "0_3")), "b": member("p2", tasks("0_0", "0_2"))},
            0,
            {"a": tasks("0_1", "0_3"), "b": tasks("0_0", "0_2")},
            None,
        ),
        # a new member takes from the one that had everything, which gives up only what it must
        (
            {"a": member("p1", tasks("0_0", "0_1", "0_2", "0_3")), "b": member("p2")},
            0,
            {"a": tasks("0_0", "0_1"), "b": tasks("0_2", "0_3")},
            None,
        ),
        # balanced even when stickiness would leave a member empty: 4 tasks over 3 members is 2-1-1
        (
            {"a": member("p1", tasks("0_0", "0_1")), "b": member("p2", tasks("0_2", "0_3")), "c": member("p3")},
            0,
            {"a": tasks("0_0", "0_1"), "b": tasks("0_2"), "c": tasks("0_3")},
            None,
        ),
        # a task without its owner goes to the member holding its standby (warm state)
        (
            {"a": member("p1", standby=tasks("0_3")), "b": member("p2", tasks("0_0", "0_1", "0_2"))},
            0,
            {"a": tasks("0_2", "0_3"), "b": tasks("0_0", "0_1")},
            None,
        ),
        # standbys on the other process, never beside the active copy
        (
            {"a": member("p1"), "b": member("p2")},
            1,
            {"a": tasks("0_0", "0_2"), "b": tasks("0_1", "0_3")},
            {"a": set(tasks("0_1", "0_3")), "b": set(tasks("0_0", "0_2"))},
        ),
        # two members of one process: no standby is possible (Kafka assigns what it can)
        (
            {"a": member("p1"), "b": member("p1")},
            1,
            {"a": tasks("0_0", "0_2"), "b": tasks("0_1", "0_3")},
            {
                "a": set(),
                "b": set(),
            },
        ),
    ],
)
def test_sticky_task_assignor(members, standbys, expected_active, expected_standby):
    out = sticky_assign(members, T0, standbys)
    assert {m: frozenset(a.active) for m, a in out.items()} == expected_active
    if expected_standby is not None:
        assert {m: a.standby for m, a in out.items()} == expected_standby
    every = [t for a in out.values() for t in a.active]
    assert sorted(every) == sorted(T0), "each task active exactly once"


def test_assignor_standbys_prefer_the_member_with_the_state_and_spread_over_processes():
    members = {
        "a": member("p1", tasks("0_0", "0_1")),
        "b": member("p2", tasks("0_2", "0_3")),
        "c": member("p3", standby=tasks("0_0", "0_1", "0_2", "0_3")),
    }
    out = sticky_assign(members, all_tasks({"0": 4}), 2)
    for task in T0:
        holders = [m for m, a in out.items() if task in a.active or task in a.standby]
        assert len({members[m].process_id for m in holders}) == 3, f"{task}: three copies on three processes"
    assert out["c"].standby >= {t for t in T0 if t not in out["c"].active}


# ---------------------------------------------------------------------- topology configuration
def _topic_info(name: str, partitions: int = 0) -> SimpleNamespace:
    return SimpleNamespace(name=name, partitions=partitions, replication_factor=-1, topic_configs=[])


def _word_count(app: str = "app", source: str = "in") -> SimpleNamespace:
    """The topology Kafka Streams sends for a word count: source -> repartition -> count."""
    return SimpleNamespace(
        epoch=0,
        subtopologies=[
            SimpleNamespace(
                subtopology_id="0",
                source_topics=[source],
                source_topic_regex=[],
                state_changelog_topics=[],
                repartition_sink_topics=[f"{app}-counts-repartition"],
                repartition_source_topics=[],
                copartition_groups=[],
            ),
            SimpleNamespace(
                subtopology_id="1",
                source_topics=[],
                source_topic_regex=[],
                state_changelog_topics=[_topic_info(f"{app}-counts-changelog")],
                repartition_sink_topics=[],
                repartition_source_topics=[_topic_info(f"{app}-counts-repartition")],
                copartition_groups=[],
            ),
        ],
    )


def test_configure_derives_internal_topics_from_the_source_topics():
    runtime = MemoryRuntime(other_topics={"in": 3})
    configured = configure(topology_from_request(_word_count()), runtime.topics())
    assert configured.partitions is None  # internal topics missing: not ready
    assert [(t.name, t.partitions) for t in configured.missing_internal] == [
        ("app-counts-changelog", 3),
        ("app-counts-repartition", 3),
    ]
    assert configured.statuses == [  # in the order of Kafka's HashMap of them
        (MISSING_INTERNAL_TOPICS, "Internal topics are missing: app-counts-repartition, app-counts-changelog")
    ]
    runtime.other_topics.update({"app-counts-changelog": 3, "app-counts-repartition": 3})
    configured = configure(topology_from_request(_word_count()), runtime.topics())
    assert (configured.partitions, configured.statuses) == ({"0": 3, "1": 3}, [])
    missing = configure(topology_from_request(_word_count(source="nope")), runtime.topics())
    assert (missing.partitions, missing.statuses) == (
        None,
        [(MISSING_SOURCE_TOPICS, "Source topics nope are missing.")],
    )


# ---------------------------------------------------------------------- the member lifecycle
def hb(member_id: str, epoch: int, group: str = "g", **fields: Any) -> SimpleNamespace:
    joining = epoch == 0
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "endpoint_information_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30_000 if joining else -1,
        "topology": _word_count() if joining else None,
        "active_tasks": [] if joining else None,
        "standby_tasks": [] if joining else None,
        "warmup_tasks": [] if joining else None,
        "process_id": f"process-{member_id}" if joining else None,
        "user_endpoint": None,
        "client_tags": None,
        "task_offsets": None,
        "task_end_offsets": None,
        "shutdown_application": False,
    }
    body.update(fields)
    if body["active_tasks"] is not None:  # owned tasks come with the other task types, as clients send them
        for kind in ("standby_tasks", "warmup_tasks"):
            if kind not in fields:
                body[kind] = []
    return SimpleNamespace(**body)


def owned(*names: str) -> list[SimpleNamespace]:
    by_sub: dict[str, list[int]] = {}
    for sub, p in sorted(tasks(*names)):
        by_sub.setdefault(sub, []).append(p)
    return [SimpleNamespace(subtopology_id=s, partitions=ps) for s, ps in by_sub.items()]


def active(answer: dict[str, Any]) -> set[str] | None:
    if answer["active_tasks"] is None:
        return None
    return {f"{e['subtopology_id']}_{p}" for e in answer["active_tasks"] for p in e["partitions"]}


# no assignment delays (as --dev, and Kafka with both group configs at 0); their own test below
NO_DELAYS = StreamsGroupSettings(initial_rebalance_delay_ms=0, assignment_interval_ms=0)
CONFIG = GroupCoordinatorConfig(offsets_topic_partitions=1, streams=NO_DELAYS)


def loaded(runtime: MemoryRuntime, config: GroupCoordinatorConfig = CONFIG) -> GroupCoordinator:
    """A coordinator of ``runtime``'s groups, loaded from its `__consumer_offsets`."""
    runtime.partitions.setdefault(("__consumer_offsets", 0), MemoryPartition())
    coordinator = GroupCoordinator(runtime, config)
    coordinator.load()
    return coordinator


@pytest.fixture
def coordinator() -> GroupCoordinator:
    return loaded(MemoryRuntime(other_topics={"in": 2, "app-counts-changelog": 2, "app-counts-repartition": 2}))


def send(streams: StreamsGroups, body: SimpleNamespace, now: float = 0.0) -> dict[str, Any]:
    answer, _ = streams.heartbeat(body, "client", "/127.0.0.1", now)
    return answer


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"member_id": ""}, "MemberId can't be empty."),
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"active_tasks": None}, "ActiveTasks must be empty when (re-)joining."),
        ({"active_tasks": owned("0_0")}, "ActiveTasks must be empty when (re-)joining."),
        ({"standby_tasks": None}, "StandbyTasks must be empty when (re-)joining."),
        ({"topology": None}, "Topology must be non-null when (re-)joining."),
        ({"member_epoch": -3}, "MemberEpoch is -3, but must be greater than or equal to -2."),
    ],
)
def test_invalid_heartbeats_are_invalid_request_with_kafkas_message(coordinator, fields, message):
    body = hb("m1", 0)
    vars(body).update(fields)
    answer = send(coordinator.streams, body)
    assert (answer["error_code"], answer["error_message"], answer["member_id"]) == (
        ErrorCode.INVALID_REQUEST,
        message,
        "",
    )
    assert answer["status"] == [] and answer["active_tasks"] is None


def test_join_second_member_revokes_then_assigns_and_epochs_follow(coordinator):
    streams = coordinator.streams
    first = send(streams, hb("m1", 0))
    # epoch 2: one epoch for the new member, one for the topology's topics (as Kafka 4.3)
    assert (first["error_code"], first["member_epoch"], active(first)) == (0, 2, {"0_0", "0_1", "1_0", "1_1"})
    assert first["heartbeat_interval_ms"] == 5000 and first["status"] == []
    assert streams.describe("g", 0)["group_state"] == "Stable"
    # nothing changed: no tasks in the answer (null: unchanged)
    assert active(send(streams, hb("m1", 2))) is None

    second = send(streams, hb("m2", 0))
    assert (second["member_epoch"], active(second)) == (3, set()), "its tasks are still m1's: unreleased"
    assert streams.describe("g", 0)["group_state"] == "Reconciling"
    revoking = send(streams, hb("m1", 2, active_tasks=owned("0_0", "0_1", "1_0", "1_1")))
    assert revoking["member_epoch"] == 2, "the epoch waits for the revocation"
    kept = active(revoking)
    assert kept == {"0_0", "1_0"}, "partition 0 of both subtopologies stays together"
    waiting = send(streams, hb("m2", 3, active_tasks=[]))
    assert active(waiting) is None, "m1 still holds the tasks it revokes"
    done = send(streams, hb("m1", 2, active_tasks=owned(*sorted(kept))))
    assert (done["member_epoch"], active(done)) == (3, None), "the new epoch; its tasks did not change"
    released = send(streams, hb("m2", 3, active_tasks=[]))
    assert active(released) == {"0_1", "1_1"}
    assert streams.describe("g", 0)["group_state"] == "Stable"

    # m2 leaves: its tasks go back to m1 at the next epoch
    left = send(streams, hb("m2", -1))
    assert (left["error_code"], left["member_epoch"], left["heartbeat_interval_ms"]) == (0, -1, 0)
    back = send(streams, hb("m1", 3, active_tasks=owned(*sorted(kept))))
    assert (back["member_epoch"], active(back)) == (4, {"0_0", "0_1", "1_0", "1_1"})
    again = send(streams, hb("m2", -1))
    assert (again["error_code"], again["error_message"]) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Member m2 is not a member of group g.",
    )


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (hb("m1", 3), ErrorCode.FENCED_MEMBER_EPOCH, "greater member epoch (3)"),
        (hb("m1", 1), ErrorCode.FENCED_MEMBER_EPOCH, "smaller member epoch (1)"),
        (
            hb("m1", 2, active_tasks=[], standby_tasks=None),
            ErrorCode.INVALID_REQUEST,
            "If one task-type is non-null, all must be non-null.",
        ),
        (hb("m1", 0, instance_id="i"), ErrorCode.INVALID_REQUEST, "Static membership is not yet supported."),
        (hb("zz", 1), ErrorCode.UNKNOWN_MEMBER_ID, "Member zz is not a member of group g."),
        (hb("m1", 1, group="other"), ErrorCode.GROUP_ID_NOT_FOUND, "Streams group other not found."),
        (
            hb("m3", 0, topology=_word_count(source="changed")),
            ErrorCode.INVALID_REQUEST,
            "Topology updates are not supported yet.",
        ),
    ],
)
def test_fencing_and_unknown_members(coordinator, body, code, message):
    send(coordinator.streams, hb("m1", 0))
    answer = send(coordinator.streams, body)
    assert answer["error_code"] == code and message in answer["error_message"]


def test_a_consumer_group_id_is_not_a_streams_group(coordinator):
    coordinator.store.consumer["cg"] = object()  # only its presence matters
    answer = send(coordinator.streams, hb("m1", 0, group="cg"))
    assert (answer["error_code"], answer["error_message"]) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group cg is not a streams group.",
    )


def test_a_share_group_id_is_not_a_streams_group_and_a_streams_group_id_not_a_share_group(coordinator):
    """One group id is one group, whatever its kind (KIP-932, KIP-1071): a streams member cannot
    join a share group, a share member cannot join a streams group, and each kind's describe
    says which it is not."""
    from strom.broker.coordinator.group.share_groups import ShareGroup

    coordinator.store.share["sg"] = ShareGroup("sg")
    answer = send(coordinator.streams, hb("m1", 0, group="sg"))
    assert (answer["error_code"], answer["error_message"]) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group sg is not a streams group.",
    )
    assert "sg" not in coordinator.store.streams
    assert coordinator.streams.describe("sg", 0)["error_message"] == "Group sg is not a streams group."

    send(coordinator.streams, hb("m1", 0))  # streams group "g"
    assert coordinator.store.kind_of("g") == "streams"
    assert coordinator.share.describe("g", 0)["error_message"] == "Group g is not a share group."
    assert coordinator.share._other_kind("g")


def test_missing_internal_topics_are_reported_and_asked_for():
    runtime = MemoryRuntime(other_topics={"in": 2})
    coordinator = loaded(runtime)
    answer, missing = coordinator.streams.heartbeat(hb("m1", 0), "c", "h", 0.0)
    assert [s["status_code"] for s in answer["status"]] == [MISSING_INTERNAL_TOPICS]
    assert (answer["member_epoch"], active(answer)) == (2, set())
    assert coordinator.streams.describe("g", 0)["group_state"] == "NotReady"
    assert sorted(t.name for t in missing) == ["app-counts-changelog", "app-counts-repartition"]
    runtime.other_topics.update({t.name: t.partitions for t in missing})
    ready = send(coordinator.streams, hb("m1", 2))
    assert (ready["status"], ready["member_epoch"], active(ready)) == ([], 3, {"0_0", "0_1", "1_0", "1_1"})


def test_session_expiry_removes_a_member_and_moves_its_tasks(coordinator):
    streams = coordinator.streams
    send(streams, hb("m1", 0), now=0.0)
    send(streams, hb("m2", 0), now=40.0)
    streams.expire(46.0)  # m1's 45 s session is over, m2's not
    assert list(streams.groups["g"].members) == ["m2"]
    answer = send(streams, hb("m2", 3, active_tasks=[], standby_tasks=[], warmup_tasks=[]), now=47.0)
    assert (answer["member_epoch"], active(answer)) == (4, {"0_0", "0_1", "1_0", "1_1"})


def test_shutdown_request_reaches_every_member(coordinator):
    streams = coordinator.streams
    send(streams, hb("m1", 0))
    send(streams, hb("m2", 0))
    asked = send(streams, hb("m1", 2, shutdown_application=True))
    told = send(streams, hb("m2", 3))
    detail = "Streams group member m1 encountered a fatal error and requested a shutdown for the entire application."
    for answer in (asked, told):
        assert {"status_code": SHUTDOWN_APPLICATION, "status_detail": detail} in answer["status"]


def test_offset_commit_and_fetch_check_member_epochs(coordinator):
    streams = coordinator.streams
    send(streams, hb("m1", 0))
    assert streams.commit_error("g", "m1", 2) is None
    assert streams.commit_error("g", "m1", 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert streams.commit_error("g", "zz", 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert streams.commit_error("g", "", -1) == ErrorCode.UNKNOWN_MEMBER_ID, "not while it has members"
    assert streams.fetch_error("g", "m1", 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert streams.fetch_error("g", None, -1) is None
    send(streams, hb("m1", -1))
    assert streams.commit_error("g", "", -1) is None, "an empty group takes admin commits"
    # DeleteGroups: an empty streams group goes, with its offsets
    assert coordinator.delete_group("g") == ErrorCode.NONE
    assert streams.get("g") is None
    assert coordinator.delete_group("g") == ErrorCode.GROUP_ID_NOT_FOUND


def test_delete_refuses_a_group_with_members(coordinator):
    send(coordinator.streams, hb("m1", 0))
    assert coordinator.delete_group("g") == ErrorCode.NON_EMPTY_GROUP


def _state(streams: StreamsGroups) -> dict[str, Any]:
    return {
        gid: (
            g.epoch,
            g.assignment_epoch,
            g.topology,
            {
                m.member_id: (m.member_epoch, m.previous_epoch, m.process_id, m.assigned, m.pending_revocation)
                for m in g.members.values()
            },
            g.target,
        )
        for gid, g in streams.groups.items()
    }


def test_the_group_comes_back_from_its_records_after_a_restart(coordinator):
    streams = coordinator.streams
    send(streams, hb("m1", 0))
    send(streams, hb("m2", 0))
    send(streams, hb("m1", 2, active_tasks=owned("0_0", "0_1", "1_0", "1_1"), standby_tasks=[], warmup_tasks=[]))
    before = _state(streams)
    assert before["g"][3]["m1"][4], "a revocation is pending"
    again = loaded(coordinator.runtime)
    assert _state(again.streams) == before
    # the members go on where they were: m1 finishes its revocation at the loaded epochs
    kept = {f"{s}_{p}" for s, p in again.streams.groups["g"].members["m1"].assigned.active}
    done = send(again.streams, hb("m1", 2, active_tasks=owned(*sorted(kept)), standby_tasks=[], warmup_tasks=[]))
    assert (done["error_code"], done["member_epoch"]) == (0, 3)
    # a deleted group leaves tombstones: nothing comes back
    send(again.streams, hb("m1", -1))
    send(again.streams, hb("m2", -1))
    assert again.delete_group("g") == ErrorCode.NONE
    assert loaded(coordinator.runtime).streams.groups == {}


def test_records_are_kafkas_streams_group_record_types(coordinator):
    from strom.broker.coordinator.group.streams_records import decode_streams_key
    from strom.protocol.records.batch import iter_batches, iter_records

    send(coordinator.streams, hb("m1", 0))
    keys = []
    for batch in coordinator.runtime.partitions[("__consumer_offsets", 0)].batches:
        for pos, header in iter_batches(batch):
            keys += [decode_streams_key(r.key or b"") for r in iter_records(memoryview(batch)[pos : pos + header.size])]
    # in Kafka's order: member metadata, topology, group epoch, target, target epoch, current assignment
    assert [(k.version, k.member) for k in keys] == [(19, "m1"), (23, ""), (17, ""), (21, "m1"), (20, ""), (22, "m1")]
    send(coordinator.streams, hb("m1", -1))
    assert coordinator.delete_group("g") == ErrorCode.NONE
    last = coordinator.runtime.partitions[("__consumer_offsets", 0)].batches[-1]
    (_, header), *_ = iter_batches(last)
    gone = [(decode_streams_key(r.key or b"").version, r.value) for r in iter_records(memoryview(last)[: header.size])]
    assert gone == [(20, None), (17, None), (23, None)], "Kafka's order of a deleted group's tombstones"


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced(coordinator):
    streams = coordinator.streams
    send(streams, hb("m1", 0, rebalance_timeout_ms=10_000), now=0.0)
    send(streams, hb("m2", 0), now=1.0)
    revoking = send(streams, hb("m1", 2, active_tasks=owned("0_0", "0_1", "1_0", "1_1")), now=2.0)
    assert revoking["member_epoch"] == 2 and streams.groups["g"].members["m1"].pending_revocation
    send(streams, hb("m1", 2, active_tasks=owned("0_0", "0_1", "1_0", "1_1")), now=8.0)  # still holding them
    streams.expire(11.9)
    assert "m1" in streams.groups["g"].members, "10 s from the revocation's start, not from the join"
    streams.expire(12.0)
    assert list(streams.groups["g"].members) == ["m2"]
    answer = send(streams, hb("m2", 3, active_tasks=[]), now=12.5)
    assert active(answer) == {"0_0", "0_1", "1_0", "1_1"}


def test_a_member_that_reports_no_revoked_task_moves_on_at_once(coordinator):
    streams = coordinator.streams
    send(streams, hb("m1", 0))
    send(streams, hb("m2", 0))
    answer = send(streams, hb("m1", 2, active_tasks=owned("0_0", "1_0")))  # it holds only what it keeps
    assert (answer["member_epoch"], active(answer)) == (3, {"0_0", "1_0"})


def test_interactive_query_endpoints_and_their_epoch(coordinator):
    streams = coordinator.streams
    h1, h2 = SimpleNamespace(host="h1", port=1), SimpleNamespace(host="h2", port=2)
    first = send(streams, hb("m1", 0, user_endpoint=h1))
    assert first["endpoint_information_epoch"] == 1, "m1's tasks changed"
    assert first["partitions_by_user_endpoint"] == [
        {
            "user_endpoint": {"host": "h1", "port": 1},
            "active_partitions": [
                {"topic": "in", "partitions": [0, 1]},
                {"topic": "app-counts-repartition", "partitions": [0, 1]},
            ],
            "standby_partitions": [],
        }
    ]
    same = send(streams, hb("m1", 2, endpoint_information_epoch=1))
    assert (same["endpoint_information_epoch"], same["partitions_by_user_endpoint"]) == (1, None), "up to date"
    second = send(streams, hb("m2", 0, user_endpoint=h2))
    assert second["endpoint_information_epoch"] == 2, "the target assignment changed"
    assert [e["user_endpoint"]["host"] for e in second["partitions_by_user_endpoint"]] == ["h1", "h2"]
    behind = send(streams, hb("m1", 2, endpoint_information_epoch=1))
    assert behind["partitions_by_user_endpoint"] is not None
    # a group without endpoints never sends them
    plain = send(streams, hb("p1", 0, group="other"))
    assert (plain["endpoint_information_epoch"], plain["partitions_by_user_endpoint"]) == (0, None)


def test_assignments_wait_for_the_initial_delay_then_the_interval():
    """Kafka 4.3's defaults (3 s, 1 s), as its reference broker answers them step by step."""
    runtime = MemoryRuntime(other_topics={"in": 2, "app-counts-changelog": 2, "app-counts-repartition": 2})
    streams = loaded(runtime, GroupCoordinatorConfig(offsets_topic_partitions=1)).streams
    initial = {"status_code": 5, "status_detail": "Assignment delayed due to the configured initial rebalance delay."}
    interval = {"status_code": 5, "status_detail": "Assignment delayed due to the configured assignment interval."}
    first = send(streams, hb("m1", 0), now=0.0)
    assert (first["member_epoch"], active(first), first["status"]) == (1, set(), [initial])
    described = streams.describe("g", 0)
    assert (described["group_state"], described["group_epoch"], described["assignment_epoch"]) == ("Assigning", 2, 1)
    waiting = send(streams, hb("m1", 1), now=1.0)
    assert (waiting["member_epoch"], active(waiting), waiting["status"]) == (1, None, [initial])
    assigned = send(streams, hb("m1", 1), now=3.5)
    assert (assigned["member_epoch"], active(assigned), assigned["status"]) == (2, {"0_0", "0_1", "1_0", "1_1"}, [])
    everything = owned("0_0", "0_1", "1_0", "1_1")
    second = send(streams, hb("m2", 0), now=3.6)
    assert (second["member_epoch"], active(second), second["status"]) == (2, set(), [interval])
    assert send(streams, hb("m1", 2, active_tasks=everything), now=3.7)["status"] == [interval]
    moved = send(streams, hb("m1", 2, active_tasks=everything), now=4.8)
    assert (moved["member_epoch"], active(moved), moved["status"]) == (2, {"0_0", "1_0"}, [])
    unreleased = send(streams, hb("m2", 2, active_tasks=[]), now=4.8)
    assert (unreleased["member_epoch"], active(unreleased)) == (3, None)
