"""Streams groups (KIP-1071) answered as the reference Kafka 4.3.1 answers them: the same raw
requests to a reference broker (`../shared/jvm/kafka-reference-4.3.sh`) and to Strom, the answers
compared field by field after the normalisation below.

Each scenario is a list of requests; a step may wait until its answer settles (internal topics
being created). Both brokers delay a streams group's assignments (3 s for a new group, then at
least 1 s apart, with the ASSIGNMENT_DELAYED status meanwhile); the scenarios turn that off on both,
as timing would decide the answers otherwise: Strom's broker configs, the reference's group configs
(Strom's unit tests follow the delays step by step as the reference answers them).
Normalised: throttle times, the clock's assignment timestamps, the
order of members in a describe (by member id) and of the interactive-query endpoints in a heartbeat
(by host and port) and of their topics (by name): Kafka's come out of hash maps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.support.brokers import start_broker
from compat_tests.support.jvm import skip_unless_available
from compat_tests.support.paths import SHARED_JVM
from compat_tests.support.wire import Raw
from strom.protocol.schema import ApiKey

SCRIPT = SHARED_JVM / "kafka-reference-4.3.sh"
CLIENT_JAR = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
SETTLE_S = 60
# the scenarios step faster than Kafka's assignment delays: 0 on both brokers (the reference's
# through its groups' configs, see _no_delays)
NO_DELAYS = {"group.streams.initial.rebalance.delay.ms": "0", "group.streams.assignment.interval.ms": "0"}
COORDINATOR_RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def _unavailable() -> str | None:
    if not SCRIPT.exists():
        return f"no reference Kafka 4.3 at {SCRIPT}"
    if shutil.which("java") is None:
        return "no java on PATH (Debian: openjdk-17-jre-headless)"
    return None


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """(reference Kafka 4.3's port, Strom's port), one of each for the module."""
    skip_unless_available(_unavailable())
    work = tmp_path_factory.mktemp("kafka-4.3")
    # the 4.3.1 tree's libs/kafka-clients-4.3.1.jar is a symlink that some copies of ../shared/jvm
    # hold as a text file; the real client jar on CLASSPATH is found first either way
    env = {**os.environ, "CLASSPATH": str(CLIENT_JAR)}
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(work)], capture_output=True, text=True, timeout=180, env=env
    )
    try:
        if started.returncode != 0:
            skip_unless_available(f"the reference Kafka 4.3 did not start: {started.stderr[-1500:]}")
        reference = int(started.stdout.split()[-2])
        strom = start_broker(tmp_path_factory.mktemp("strom"), NO_DELAYS)
        try:
            for port in (reference, strom.port):
                _create_topic(port, "in", 2)
            yield reference, strom.port
        finally:
            strom.stop()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(work)], capture_output=True, timeout=120)


def _create_topic(port: int, name: str, partitions: int) -> None:
    with Raw(port) as raw:
        answer = raw.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 30000,
                "validate_only": False,
            },
        )
    assert answer.topics[0].error_code in (0, 36)


def _find_coordinator(port: int, group: str) -> None:
    """FindCoordinator until the group's coordinator is ready (as a client does before joining)."""
    deadline = time.monotonic() + SETTLE_S
    with Raw(port) as raw:
        while True:
            answer = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            if answer.coordinators[0].error_code == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.2)


def prepare(ports: tuple[int, int], group: str) -> None:
    """Both brokers ready to coordinate ``group``; the reference assigning without delays."""
    for port in ports:
        _find_coordinator(port, group)
    _no_delays(ports[0], group)


def _no_delays(port: int, group: str) -> None:
    """The reference Kafka 4.3: the group assigns at once (its initial delay and assignment interval
    set to 0), as Strom does."""
    with Raw(port) as raw:
        answer = raw.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": GROUP_RESOURCE,
                        "resource_name": group,
                        "configs": [
                            {"name": name, "config_operation": 0, "value": "0"}
                            for name in ("streams.initial.rebalance.delay.ms", "streams.assignment.interval.ms")
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
    assert answer.responses[0].error_code == 0, answer
    # the configs reach the group coordinator through the metadata log: wait until they show
    deadline = time.monotonic() + SETTLE_S
    with Raw(port) as raw:
        while time.monotonic() < deadline:
            described = raw.request(
                ApiKey.DESCRIBE_CONFIGS,
                4,
                {
                    "resources": [
                        {
                            "resource_type": GROUP_RESOURCE,
                            "resource_name": group,
                            "configuration_keys": ["streams.initial.rebalance.delay.ms"],
                        }
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
            )
            if [c.value for c in described.results[0].configs] == ["0"]:
                return
            time.sleep(0.1)


# ---------------------------------------------------------------------- requests
def _info(name: str) -> dict[str, Any]:
    return {"name": name, "partitions": 0, "replication_factor": 0, "topic_configs": []}


def topology(group: str, source: str = "in") -> dict[str, Any]:
    """A word count's topology (as Kafka Streams sends it): source -> repartition -> count."""
    return {
        "epoch": 0,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": [source],
                "source_topic_regex": [],
                "state_changelog_topics": [],
                "repartition_sink_topics": [f"{group}-rep"],
                "repartition_source_topics": [],
                "copartition_groups": [],
            },
            {
                "subtopology_id": "1",
                "source_topics": [],
                "source_topic_regex": [],
                "state_changelog_topics": [_info(f"{group}-log")],
                "repartition_sink_topics": [],
                "repartition_source_topics": [_info(f"{group}-rep")],
                "copartition_groups": [],
            },
        ],
    }


def tasks(*names: str) -> list[dict[str, Any]]:
    by_sub: dict[str, list[int]] = {}
    for name in names:
        sub, p = name.split("_")
        by_sub.setdefault(sub, []).append(int(p))
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(by_sub.items())]


def hb(group: str, member: str, epoch: int, **fields: Any) -> tuple[int, int, dict[str, Any]]:
    joining = epoch == 0
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "endpoint_information_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000 if joining else -1,
        "topology": topology(group) if joining else None,
        "active_tasks": [] if joining else None,
        "standby_tasks": [] if joining else None,
        "warmup_tasks": [] if joining else None,
        "process_id": f"process-{member}" if joining else None,
        "user_endpoint": None,
        "client_tags": None,
        "task_offsets": None,
        "task_end_offsets": None,
        "shutdown_application": False,
    }
    body.update(fields)
    return ApiKey.STREAMS_GROUP_HEARTBEAT, 0, body


def describe(*groups: str) -> tuple[int, int, dict[str, Any]]:
    return ApiKey.STREAMS_GROUP_DESCRIBE, 0, {"group_ids": list(groups), "include_authorized_operations": True}


def commit(group: str, member: str, epoch: int) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKey.OFFSET_COMMIT,
        9,
        {
            "group_id": group,
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": "in",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )


def plain(value: Any) -> Any:
    """A decoded answer as plain data, normalised where brokers may differ without a meaning."""
    if isinstance(value, dict) or hasattr(value, "items"):
        out = {k: plain(v) for k, v in value.items() if k not in ("throttle_time_ms",)}
        if "members" in out and isinstance(out["members"], list):
            out["members"] = sorted(out["members"], key=lambda m: str(m.get("member_id")))
        if isinstance(out.get("partitions_by_user_endpoint"), list):  # Kafka's order is a hash map's
            out["partitions_by_user_endpoint"].sort(
                key=lambda e: (e["user_endpoint"]["host"], e["user_endpoint"]["port"])
            )
            for entry in out["partitions_by_user_endpoint"]:
                for kind in ("active_partitions", "standby_partitions"):
                    entry[kind].sort(key=lambda t: t["topic"])
        if "groups" in out and isinstance(out["groups"], list):
            out["groups"] = sorted(out["groups"], key=lambda g: str(g.get("group_id")))
        return out
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def ask(port: int, step: tuple[int, int, dict[str, Any]]) -> Any:
    """The answer to ``step`` (asked again while the coordinator is loading, as a client would)."""
    api, version, body = step
    deadline = time.monotonic() + SETTLE_S
    with Raw(port) as raw:
        while True:
            answer = plain(raw.request(api, version, body))
            # a coordinator still loading the group's partition is asked again, as clients do
            loading = isinstance(answer, dict) and answer.get("error_code") in COORDINATOR_RETRIABLE
            if not loading or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)


def settle(port: int, group: str, member: str, epoch: int) -> Any:
    """Heartbeats (with the epoch each answer gives) until the member has no status left (its
    internal topics created) and holds its tasks; the last answer."""
    deadline = time.monotonic() + SETTLE_S
    owned: list[dict[str, Any]] = []
    while True:
        answer = ask(port, hb(group, member, epoch, active_tasks=owned, standby_tasks=[], warmup_tasks=[]))
        if answer["error_code"] != 0:
            return answer
        epoch = answer["member_epoch"]
        if answer["active_tasks"] is not None:
            owned = answer["active_tasks"]
        if (not answer["status"] and answer["active_tasks"] is None) or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def settle_both(ports: tuple[int, int], group: str, member: str, epoch: int) -> Any:
    reference, strom = (settle(port, group, member, epoch) for port in ports)
    assert strom == reference, f"{group} {member} settled"
    return strom


def both(ports: tuple[int, int], step: tuple[int, int, dict[str, Any]]) -> Any:
    reference, strom = (ask(port, step) for port in ports)
    assert strom == reference, f"request {step[0]} {step[2]}"
    return strom


# ---------------------------------------------------------------------- scenarios
@pytest.mark.parametrize(
    "fields",
    [
        {"member_id": ""},
        {"rebalance_timeout_ms": -1},
        {"active_tasks": None},
        {"standby_tasks": tasks("0_0")},
        {"topology": None},
        {"member_epoch": -3},
        {"instance_id": ""},
    ],
    ids=[
        "no-member-id",
        "no-rebalance-timeout",
        "null-tasks",
        "owned-tasks",
        "no-topology",
        "bad-epoch",
        "empty-instance",
    ],
)
def test_invalid_heartbeats(ports, fields):
    prepare(ports, "inv")
    step = hb("inv", "m1", 0)
    step[2].update(fields)
    answer = both(ports, step)
    assert answer["error_code"] == 42


def test_unknown_groups_and_members(ports):
    prepare(ports, "unk")
    both(ports, hb("unk", "m1", 1))  # no such group
    first = both(ports, hb("unk", "m1", 0))
    settle_both(ports, "unk", "m1", first["member_epoch"])
    both(ports, hb("unk", "zz", 1))  # UNKNOWN_MEMBER_ID
    both(ports, hb("unk", "m1", 9))  # FENCED_MEMBER_EPOCH
    both(ports, hb("unk", "m9", 0, topology=topology("unk", "other")))  # a topology update
    both(ports, describe("unk", "nope"))


def test_two_members_revoke_then_assign_and_leave(ports):
    group = "two"
    prepare(ports, group)
    # the first member: the internal topics are created, then it gets every task
    first = both(ports, hb(group, "m1", 0))
    assert [s["status_code"] for s in first["status"]] == [3]  # MISSING_INTERNAL_TOPICS
    epoch1 = settle_both(ports, group, "m1", first["member_epoch"])["member_epoch"]
    everything = ("0_0", "0_1", "1_0", "1_1")
    both(ports, hb(group, "m1", epoch1, active_tasks=tasks(*everything), standby_tasks=[]))  # one null type
    both(ports, hb(group, "m1", epoch1, active_tasks=tasks(*everything), standby_tasks=[], warmup_tasks=[]))
    both(ports, describe(group))
    # a second member: it waits for tasks m1 still holds; m1 revokes, then m2 gets them
    second = both(ports, hb(group, "m2", 0))
    revoking = both(ports, hb(group, "m1", epoch1, active_tasks=tasks(*everything), standby_tasks=[], warmup_tasks=[]))
    kept = [f"{t['subtopology_id']}_{p}" for t in revoking["active_tasks"] for p in t["partitions"]]
    done = both(ports, hb(group, "m1", epoch1, active_tasks=tasks(*kept), standby_tasks=[], warmup_tasks=[]))
    both(ports, describe(group))
    both(ports, hb(group, "m2", second["member_epoch"], active_tasks=[], standby_tasks=[], warmup_tasks=[]))
    both(ports, describe(group))
    # offsets: a member commits with its epoch; an old epoch is stale
    both(ports, commit(group, "m1", done["member_epoch"]))
    both(ports, commit(group, "m1", epoch1 - 1))
    both(ports, commit(group, "zz", done["member_epoch"]))
    # the other group APIs on a streams group
    both(ports, (ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["streams"]}))
    both(ports, (ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}))
    both(ports, (ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False}))
    both(ports, (ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]}))  # NON_EMPTY_GROUP
    # both leave; the group can be deleted
    both(ports, hb(group, "m2", -1))
    both(ports, hb(group, "m1", -1))
    both(ports, describe(group))
    both(ports, (ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]}))
    both(ports, describe(group))


def test_shutdown_request(ports):
    group = "stop"
    prepare(ports, group)
    first = both(ports, hb(group, "m1", 0))
    epoch = settle_both(ports, group, "m1", first["member_epoch"])["member_epoch"]
    both(ports, hb(group, "m1", epoch, shutdown_application=True))
    both(ports, hb(group, "m2", 0))


def test_missing_source_topic(ports):
    group = "nosrc"
    prepare(ports, group)
    both(ports, hb(group, "m1", 0, topology=topology(group, "absent")))
    both(ports, describe(group))


def _consumer_heartbeat(group: str) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": group,
            "member_id": "c1",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": ["in"],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        },
    )


def test_other_protocols_meet_a_streams_group(ports):
    group, consumers = "mixed", "mixed-consumers"
    prepare(ports, group)
    prepare(ports, consumers)
    first = both(ports, hb(group, "m1", 0))
    settle_both(ports, group, "m1", first["member_epoch"])
    both(ports, _consumer_heartbeat(group))  # GROUP_ID_NOT_FOUND: not a consumer group
    join = {
        "group_id": group,
        "session_timeout_ms": 30000,
        "rebalance_timeout_ms": 30000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "reason": None,
    }
    both(ports, (ApiKey.JOIN_GROUP, 9, join))  # INCONSISTENT_GROUP_PROTOCOL
    both(
        ports,
        (
            ApiKey.OFFSET_DELETE,
            0,
            {"group_id": group, "topics": [{"name": "in", "partitions": [{"partition_index": 0}]}]},
        ),
    )
    # a streams member at a consumer group's id
    for port in ports:  # (not compared: Kafka 4.3's consumer groups are not this test's subject)
        assert ask(port, _consumer_heartbeat(consumers))["error_code"] == 0
    both(ports, hb(consumers, "m1", 0))  # GROUP_ID_NOT_FOUND: not a streams group


def test_interactive_query_endpoints(ports):
    group = "iq"
    prepare(ports, group)
    first = both(ports, hb(group, "m1", 0, user_endpoint={"host": "h1", "port": 1}))
    settled = settle_both(ports, group, "m1", first["member_epoch"])
    epoch = settled["member_epoch"]
    everything = tasks("0_0", "0_1", "1_0", "1_1")
    owned = {"standby_tasks": [], "warmup_tasks": []}
    both(ports, hb(group, "m1", epoch, endpoint_information_epoch=0, active_tasks=everything, **owned))
    second = both(ports, hb(group, "m2", 0, user_endpoint={"host": "h2", "port": 2}))
    moved = both(
        ports,
        hb(
            group,
            "m1",
            epoch,
            endpoint_information_epoch=second["endpoint_information_epoch"],
            **owned,
            active_tasks=[],
        ),
    )
    current = moved["endpoint_information_epoch"]
    both(ports, hb(group, "m1", moved["member_epoch"], endpoint_information_epoch=current))  # up to date: none
    both(
        ports, hb(group, "m2", second["member_epoch"], endpoint_information_epoch=current - 1, active_tasks=[], **owned)
    )
