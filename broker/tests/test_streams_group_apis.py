"""StreamsGroupHeartbeat / StreamsGroupDescribe through a broker (KIP-1071): the handler creates the
internal topics the coordinator reports missing, and the other group APIs see the streams group."""

from __future__ import annotations

from typing import Any

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import create
from .test_consumer_group_apis import commit


@pytest.fixture
def streams_broker(tmp_path):
    b = make_broker(
        tmp_path / "data", group_streams_initial_rebalance_delay_ms=0, group_streams_assignment_interval_ms=0
    )
    yield b
    b.close()


def _info(name: str, configs: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "partitions": 0,
        "replication_factor": 0,
        "topic_configs": [{"key": k, "value": v} for k, v in (configs or {}).items()],
    }


def heartbeat(member: str, epoch: int, **fields: Any) -> dict[str, Any]:
    joining = epoch == 0
    topology = {
        "epoch": 0,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": ["st-in"],
                "source_topic_regex": [],
                "state_changelog_topics": [],
                "repartition_sink_topics": ["app-rep"],
                "repartition_source_topics": [],
                "copartition_groups": [],
            },
            {
                "subtopology_id": "1",
                "source_topics": [],
                "source_topic_regex": [],
                "state_changelog_topics": [_info("app-log", {"cleanup.policy": "compact"})],
                "repartition_sink_topics": [],
                "repartition_source_topics": [_info("app-rep")],
                "copartition_groups": [],
            },
        ],
    }
    body: dict[str, Any] = {
        "group_id": "app",
        "member_id": member,
        "member_epoch": epoch,
        "endpoint_information_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000 if joining else -1,
        "topology": topology if joining else None,
        "active_tasks": [] if joining else None,
        "standby_tasks": [] if joining else None,
        "warmup_tasks": [] if joining else None,
        "process_id": "process-1" if joining else None,
        "user_endpoint": None,
        "client_tags": None,
        "task_offsets": None,
        "task_end_offsets": None,
        "shutdown_application": False,
    }
    body.update(fields)
    return body


async def test_join_creates_internal_topics_then_assigns_and_the_group_apis_see_it(streams_broker, nursery):
    client = open_client(streams_broker, nursery)
    await create(client, "st-in", partitions=3)
    joined = await client.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, heartbeat("m1", 0))
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.NONE, 2)
    assert [(s.status_code, s.status_detail) for s in joined.status] == [
        (3, "Internal topics are missing: app-log, app-rep")
    ]
    # created by the handler, with the source topic's partition count and the topology's configs
    topics = streams_broker.topics.topics
    assert (topics["app-rep"].partitions, topics["app-log"].partitions) == (3, 3)
    assert topics["app-log"].configs.get("cleanup.policy") == "compact"

    ready = await client.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, heartbeat("m1", 2))
    assert (ready.error_code, ready.member_epoch, list(ready.status)) == (ErrorCode.NONE, 3, [])
    assert {(t.subtopology_id, p) for t in ready.active_tasks for p in t.partitions} == {
        (s, p) for s in ("0", "1") for p in range(3)
    }

    described = await client.request(
        ApiKey.STREAMS_GROUP_DESCRIBE, 0, {"group_ids": ["app", "none"], "include_authorized_operations": True}
    )
    app, none = described.groups
    assert (app.error_code, app.group_state, app.group_epoch, len(app.members)) == (0, "Stable", 3, 1)
    assert app.authorized_operations == sum(1 << op for op in (3, 6, 8, 10, 11))
    assert (none.error_code, none.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group none not found.")
    listed = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["streams"]})
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] == [
        ("app", "streams", "Stable", "streams")
    ]

    # its members commit with their epoch
    stale = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("app", "m1", 2, "st-in", 0, 5))
    assert stale.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
    done = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("app", "m1", 3, "st-in", 0, 5))
    assert done.topics[0].partitions[0].error_code == ErrorCode.NONE
    refused = await client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["app"]})
    assert refused.results[0].error_code == ErrorCode.NON_EMPTY_GROUP

    left = await client.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, heartbeat("m1", -1))
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
    deleted = await client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["app"]})
    assert deleted.results[0].error_code == ErrorCode.NONE
    gone = await client.request(
        ApiKey.STREAMS_GROUP_DESCRIBE, 0, {"group_ids": ["app"], "include_authorized_operations": False}
    )
    assert gone.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
