"""The web console's JSON API, /metrics and clean-up actions against a live broker, checked against
what the test produced and what Kafka's admin API (confluent-kafka) reports."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.support.console import (
    ActiveConsumer,
    commit,
    console_url,
    csrf_token,
    get_json,
    http,
    post,
    produce_single_batches,
    start_console_broker,
    wait_for,
)

TOPIC = "console-orders"
GROUP = "console-billing"
PRODUCED = {0: 30, 1: 20}
COMMITTED = {0: 10, 1: 20}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    broker = start_console_broker(tmp_path_factory.mktemp("console"))
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1, config={"retention.ms": "3600000"})])[TOPIC].result(30)
        produce_single_batches(broker.bootstrap, TOPIC, PRODUCED)
        commit(broker.bootstrap, GROUP, {(TOPIC, p): o for p, o in COMMITTED.items()})
        yield broker, console_url(broker), admin
    finally:
        broker.stop()


def _metrics(base: str) -> dict[str, dict[tuple, float]]:
    status, body, headers = http(base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_ready_file_names_the_console_and_only_loopback_is_served(setup):
    broker, base, _ = setup
    assert base.startswith("http://127.0.0.1:") and not base.endswith(":0")
    assert "console listening on " + base in broker.log_tail()
    status, body, _ = http(base + "/api/brokers")
    assert status == 200
    assert json.loads(body)[0]["listeners"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]


def test_topic_api_matches_the_log_and_the_admin_api(setup):
    broker, base, admin = setup
    topic = get_json(base, f"/api/topics/{TOPIC}")
    parts = {p["partition"]: p for p in topic["partition_details"]}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "console-watermarks"})
    try:
        for index, count in PRODUCED.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, index), timeout=10)
            assert (parts[index]["log_start_offset"], parts[index]["high_watermark"]) == (low, high) == (0, count)
            assert parts[index]["log_end_offset"] == count
            assert parts[index]["leader"] == 0 and parts[index]["isr"] == [0] and parts[index]["segments"] == 1
    finally:
        consumer.close()
    assert topic["records"] == sum(PRODUCED.values())
    # every batch holds one record of the same size
    batch = parts[0]["size"] // PRODUCED[0]
    assert parts[0]["size"] == batch * PRODUCED[0] and parts[1]["size"] == batch * PRODUCED[1]
    configs = {c["name"]: c for c in topic["configs"]}
    assert configs["retention.ms"] == {"name": "retention.ms", "value": "3600000", "default": False}
    assert configs["segment.bytes"]["default"] is True
    listed = {t["name"]: t for t in get_json(base, "/api/topics")}
    assert listed[TOPIC]["size"] == topic["size"] and listed[TOPIC]["partitions"] == 2
    assert [t["name"] for t in get_json(base, "/api/topics?q=ORDERS")] == [TOPIC]
    status, page, _ = http(base + "/topics?q=orders")
    assert status == 200 and f'data-topic="{TOPIC}"'.encode() in page and b'data-topic="__consumer_offsets"' not in page


def test_group_lag_in_records_and_bytes(setup):
    broker, base, admin = setup
    topic = get_json(base, f"/api/topics/{TOPIC}")
    batch = topic["partition_details"][0]["size"] // PRODUCED[0]
    group = get_json(base, f"/api/groups/{GROUP}")
    assert group["state"] == "Empty" and group["members"] == []
    offsets = {o["partition"]: o for o in group["offsets"]}
    committed = admin.list_consumer_group_offsets([_request(GROUP)])[GROUP].result(30)
    for tp in committed.topic_partitions:
        assert offsets[tp.partition]["committed_offset"] == tp.offset == COMMITTED[tp.partition]
    for index, count in PRODUCED.items():
        entry = offsets[index]
        assert entry["log_end_offset"] == count
        assert entry["lag"] == count - COMMITTED[index]
        assert entry["lag_bytes"] == (count - COMMITTED[index]) * batch
    expected_lag = sum(PRODUCED[p] - COMMITTED[p] for p in PRODUCED)
    assert group["total_lag"] == expected_lag and group["total_lag_bytes"] == expected_lag * batch
    summary = {g["group_id"]: g for g in get_json(base, "/api/groups")}[GROUP]
    assert (summary["total_lag"], summary["total_lag_bytes"], summary["state"]) == (
        expected_lag,
        expected_lag * batch,
        "Empty",
    )


def _request(group: str):
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


def test_metrics_count_what_was_produced(setup):
    broker, base, _ = setup
    topic = get_json(base, f"/api/topics/{TOPIC}")
    metrics = _metrics(base)
    labels = (("topic", TOPIC),)
    assert metrics["kafka_server_brokertopicmetrics_messages_in_total"][labels] == sum(PRODUCED.values())
    assert metrics["kafka_server_brokertopicmetrics_bytes_in_total"][labels] == topic["size"]
    produce_requests = metrics["kafka_network_requestmetrics_requests_total"][(("request", "Produce"),)]
    assert produce_requests >= sum(PRODUCED.values())  # one flush, one request per record
    assert (
        metrics["kafka_network_requestmetrics_total_time_seconds_count"][(("request", "Produce"),)] == produce_requests
    )
    buckets = metrics["kafka_network_requestmetrics_total_time_seconds_bucket"]
    assert buckets[(("le", "+Inf"), ("request", "Produce"))] == produce_requests
    for index, count in PRODUCED.items():
        tp = (("partition", str(index)), ("topic", TOPIC))
        assert metrics["kafka_log_log_end_offset"][tp] == count
        assert metrics["kafka_log_log_size_bytes"][tp] == topic["partition_details"][index]["size"]
        gtp = (("group", GROUP), ("partition", str(index)), ("topic", TOPIC))
        assert metrics["kafka_consumergroup_lag"][gtp] == count - COMMITTED[index]
        assert metrics["kafka_consumergroup_current_offset"][gtp] == COMMITTED[index]
    assert metrics["kafka_controller_kafkacontroller_active_controller_count"][()] == 1
    assert metrics["kafka_server_replicamanager_under_replicated_partitions"][()] == 0
    assert metrics["kafka_coordinator_group_groupmetadatamanager_num_groups"][(("state", "Empty"),)] >= 1


def test_metrics_count_what_was_consumed(setup):
    broker, base, admin = setup
    name = "console-consumed"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    produce_single_batches(broker.bootstrap, name, {0: 12})
    size = get_json(base, f"/api/topics/{name}")["size"]
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "console-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(name, 0, 0)])
    try:
        received = 0
        while received < 12:
            message = consumer.poll(10)
            assert message is not None, f"only {received} of 12 records consumed"
            received += message.error() is None
        labels = (("topic", name),)

        def counted():
            metrics = _metrics(base)
            return (
                metrics["kafka_server_brokertopicmetrics_messages_out_total"].get(labels),
                metrics["kafka_server_brokertopicmetrics_bytes_out_total"].get(labels),
            )

        # records out are counted when the consumer fetches past them (its next fetch offset)
        wait_for(lambda: counted() == (12, size), 15, what=f"12 records and {size} bytes out, got {counted()}")
    finally:
        consumer.close()


def test_clients_show_software_and_roles(setup):
    broker, base, _ = setup
    member = ActiveConsumer(broker.bootstrap, "console-clients", TOPIC).start()
    try:
        clients = wait_for(
            lambda: [
                c
                for c in get_json(base, "/api/clients")
                if c["client_id"] == "console-test-console-clients" and "fetches" in c["roles"]
            ],
            what="the consumer's fetch connection",
        )
        assert clients[0]["software_name"] == "confluent-kafka-python"
        assert clients[0]["host"] == "127.0.0.1" and clients[0]["bytes_out"] > 0
        coordinating = [
            c
            for c in get_json(base, "/api/clients")
            if c["client_id"] == "console-test-console-clients" and "console-clients" in c["groups"]
        ]
        assert coordinating and "coordinates" in coordinating[0]["roles"]
        group = get_json(base, "/api/groups/console-clients")
        assert group["state"] == "Stable" and group["protocol"] in ("range", "roundrobin", "cooperative-sticky")
        assignment = group["members"][0]["assignment"]
        assert assignment == [{"topic": TOPIC, "partitions": [0, 1]}]
        assert 0 <= group["members"][0]["since_heartbeat_ms"] < 10000
    finally:
        member.stop()


def test_history_samples_offsets_over_time(setup):
    broker, base, _ = setup
    history = wait_for(
        lambda: (
            (h := get_json(base, f"/api/groups/{GROUP}/history"))["partitions"]
            and len(h["partitions"][0]["times"]) >= 2
            and h
        ),
        what="two samples",
    )
    by_partition = {p["partition"]: p for p in history["partitions"]}
    assert by_partition[0]["committed_offset"][-1] == COMMITTED[0]
    assert by_partition[0]["lag"][-1] == PRODUCED[0] - COMMITTED[0]
    topic = get_json(base, f"/api/topics/{TOPIC}/history")
    assert topic["log_end_offset"][-1] == sum(PRODUCED.values())


def test_record_browser(setup):
    _, base, _ = setup
    page = get_json(base, f"/api/topics/{TOPIC}/records?partition=0&offset=5&limit=3")
    assert [r["offset"] for r in page["records"]] == [5, 6, 7] and page["truncated"] and page["next_offset"] == 8
    assert page["records"][0]["key"]["text"] == "k00005"
    assert page["records"][0]["headers"] == [
        {"key": "n", "value": {"null": False, "size": 5, "text": "00005", "truncated": False}}
    ]
    latest = get_json(base, f"/api/topics/{TOPIC}/records?partition=1&limit=2&format=hex")
    assert [r["offset"] for r in latest["records"]] == [18, 19]
    assert latest["records"][0]["key"]["text"] == b"k00018".hex(" ")
    ranged = get_json(base, f"/api/topics/{TOPIC}/records?partition=0&offset=5&to_offset=8")
    assert [r["offset"] for r in ranged["records"]] == [5, 6, 7] and not ranged["truncated"]
    stamp = ranged["records"][1]["timestamp"]
    by_time = get_json(base, f"/api/topics/{TOPIC}/records?partition=0&timestamp={stamp}&to_timestamp={stamp}")
    assert by_time["records"] and all(r["timestamp"] == stamp for r in by_time["records"])
    assert by_time["records"][0]["offset"] <= 6 <= by_time["records"][-1]["offset"]
    status, body, _ = http(base + f"/api/topics/{TOPIC}/records?partition=7")
    assert status == 404 and json.loads(body)["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_actions_need_the_csrf_token_and_confirmation(setup):
    _, base, _ = setup
    status, body = post(base, f"/api/groups/{GROUP}/delete", None)
    assert status == 403 and body["error"] == "INVALID_CSRF_TOKEN"
    status, body = post(base, f"/api/groups/{GROUP}/delete", "wrong")
    assert status == 403
    token = csrf_token(base)
    status, _, _ = http(base + f"/api/groups/{GROUP}/delete", data={}, headers={"X-CSRF-Token": token})
    assert status == 400
    assert get_json(base, f"/api/groups/{GROUP}")["state"] == "Empty"


def test_actions_are_refused_for_an_active_group_and_work_once_it_is_empty(setup):
    broker, base, admin = setup
    token = csrf_token(base)
    group = "console-active"
    commit(broker.bootstrap, group, {(TOPIC, 0): 3, (TOPIC, 1): 4})
    member = ActiveConsumer(broker.bootstrap, group, TOPIC).start()
    try:
        status, body = post(base, f"/api/groups/{group}/delete", token)
        assert status == 409 and body["error"] == "NON_EMPTY_GROUP"
        status, body = post(base, f"/api/groups/{group}/reset-offsets", token, to="earliest")
        assert status == 409 and body["error"] == "NON_EMPTY_GROUP"
    finally:
        member.stop()
    wait_for(lambda: get_json(base, f"/api/groups/{group}")["state"] == "Empty", what="the group to empty")

    status, body = post(base, f"/api/groups/{group}/reset-offsets", token, to="latest")
    assert status == 200, body
    offsets = {o["partition"]: o for o in get_json(base, f"/api/groups/{group}")["offsets"]}
    assert {p: o["committed_offset"] for p, o in offsets.items()} == PRODUCED
    assert all(o["lag"] == 0 and o["lag_bytes"] == 0 for o in offsets.values())
    status, body = post(
        base, f"/api/groups/{group}/reset-offsets", token, to="offset", topic=TOPIC, partition="0", offset="7"
    )
    assert status == 200, body
    committed = admin.list_consumer_group_offsets([_request(group)])[group].result(30)
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == {0: 7, 1: PRODUCED[1]}
    status, body = post(base, f"/api/groups/{group}/reset-offsets", token, to="earliest")
    assert status == 200 and [o["offset"] for o in body["offsets"]] == [0, 0]

    status, body = post(base, f"/api/groups/{group}/delete", token)
    assert status == 200, body
    status, body, _ = http(base + f"/api/groups/{group}")
    assert status == 404
    assert group not in {g["group_id"] for g in get_json(base, "/api/groups")}
    status, body = post(base, f"/api/groups/{group}/delete", token)
    assert status == 404 and body["error"] == "GROUP_ID_NOT_FOUND"


def test_a_kip848_consumer_group_is_shown_and_protected_while_active(setup):
    broker, base, _ = setup
    token = csrf_token(base)
    group = "console-kip848"
    member = ActiveConsumer(broker.bootstrap, group, TOPIC, group_protocol="consumer").start()
    try:
        detail = wait_for(
            lambda: (d := get_json(base, f"/api/groups/{group}"))["state"] == "Stable" and d,
            what="the consumer-protocol group to be Stable",
        )
        assert detail["group_protocol"] == "consumer" and len(detail["members"]) == 1
        assert detail["members"][0]["assignment"] == [{"topic": TOPIC, "partitions": [0, 1]}]
        assert detail["members"][0]["client_id"] == f"console-test-{group}"
        # as kafka-consumer-groups.sh --describe: every assigned partition, with no committed offset
        # yet (the member never commits), its whole log as lag
        member_id = detail["members"][0]["member_id"]
        assert [(o["partition"], o["committed_offset"], o["lag"], o["member"]) for o in detail["offsets"]] == [
            (p, None, PRODUCED[p], member_id) for p in sorted(PRODUCED)
        ]
        assert detail["total_lag"] == sum(PRODUCED.values())
        listed = {g["group_id"]: g for g in get_json(base, "/api/groups")}[group]
        assert (listed["state"], listed["members"], listed["group_protocol"]) == ("Stable", 1, "consumer")
        assert (listed["partitions"], listed["total_lag"]) == (len(PRODUCED), sum(PRODUCED.values()))
        status, page, _ = http(base + f"/groups/{group}")
        assert status == 200 and b'<td class="num committed">-</td>' in page
        status, body = post(base, f"/api/groups/{group}/reset-offsets", token, to="earliest", topic=TOPIC)
        assert status == 409 and body["error"] == "NON_EMPTY_GROUP"
        status, body = post(base, f"/api/groups/{group}/delete", token)
        assert status == 409 and body["error"] == "NON_EMPTY_GROUP"
    finally:
        member.stop()
    wait_for(lambda: get_json(base, f"/api/groups/{group}")["state"] == "Empty", what="the group to empty")
    status, body = post(base, f"/api/groups/{group}/reset-offsets", token, to="earliest", topic=TOPIC)
    assert status == 200, body
    assert {o["partition"]: o["committed_offset"] for o in get_json(base, f"/api/groups/{group}")["offsets"]} == {
        0: 0,
        1: 0,
    }


def test_remove_a_stale_static_member(setup):
    broker, base, _ = setup
    token = csrf_token(base)
    group = "console-static"
    member = ActiveConsumer(broker.bootstrap, group, TOPIC, instance_id="worker-1", session_timeout_ms=60000).start()
    member.stop()  # a static member does not leave: it stays until its session times out
    detail = get_json(base, f"/api/groups/{group}")
    assert [m["instance_id"] for m in detail["members"]] == ["worker-1"]
    status, body = post(base, f"/api/groups/{group}/remove-member", token, instance_id="worker-9")
    assert status == 404 and body["error"] == "UNKNOWN_MEMBER_ID"
    status, body = post(base, f"/api/groups/{group}/remove-member", token, instance_id="worker-1")
    assert status == 200, body
    detail = wait_for(
        lambda: (d := get_json(base, f"/api/groups/{group}"))["state"] == "Empty" and d, what="the group to empty"
    )
    assert detail["members"] == []


def test_delete_records_and_topic(setup):
    broker, base, admin = setup
    token = csrf_token(base)
    name = "console-doomed"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    produce_single_batches(broker.bootstrap, name, {0: 10})
    status, body = post(base, f"/api/topics/{name}/delete-records", token, partition="0", offset="11")
    assert status == 409 and body["error"] == "OFFSET_OUT_OF_RANGE"
    status, body = post(base, f"/api/topics/{name}/delete-records", token, partition="0", offset="4")
    assert status == 200 and body["log_start_offset"] == 4
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "console-low"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10) == (4, 10)
    finally:
        consumer.close()
    part = get_json(base, f"/api/topics/{name}")["partition_details"][0]
    assert (part["log_start_offset"], part["high_watermark"]) == (4, 10)
    status, body = post(base, "/api/topics/__consumer_offsets/delete", token)
    assert status == 409 and body["error"] == "INVALID_TOPIC_EXCEPTION"
    status, body = post(base, f"/api/topics/{name}/delete", token)
    assert status == 200, body
    assert name not in {t["name"] for t in get_json(base, "/api/topics")}
    assert name not in admin.list_topics(timeout=10).topics
    status, body = post(base, f"/api/topics/{name}/delete", token)
    assert status == 404 and body["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_auth_when_a_secret_is_set(tmp_path):
    broker = start_console_broker(
        tmp_path / "auth",
        **{"console.auth.username": "ops", "console.auth.password": "s3cret-pw", "console.auth.token": "t0ken"},
    )
    try:
        base = console_url(broker)
        status, _, headers = http(base + "/api/brokers")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        import base64

        basic = "Basic " + base64.b64encode(b"ops:s3cret-pw").decode()
        assert http(base + "/api/brokers", headers={"Authorization": basic})[0] == 200
        wrong = "Basic " + base64.b64encode(b"ops:nope").decode()
        assert http(base + "/api/brokers", headers={"Authorization": wrong})[0] == 401
        assert http(base + "/metrics", headers={"Authorization": "Bearer t0ken"})[0] == 200
        assert http(base + "/metrics", headers={"Authorization": "Bearer t0ke"})[0] == 401
        assert "s3cret-pw" not in broker.log_tail() and "t0ken" not in broker.log_tail()
    finally:
        broker.stop()
