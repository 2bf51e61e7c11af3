"""Offset planning of the stromkafka source: option parsing, resolution, ranges, rate limits."""

from __future__ import annotations

import pytest

from strom.tools.spark.offsets import (
    ClusterOffsets,
    DataLossError,
    OffsetOptionError,
    OffsetRange,
    OffsetSpec,
    check_batch_start,
    check_progress,
    offsets_from_json,
    offsets_to_json,
    parse_offsets_json,
    parse_spec,
    plan_ranges,
    rate_limit,
    resolve,
    timestamps_to_look_up,
)
from strom.tools.spark.options import SourceOptionError, client_settings, parse_subscription, schema_ddl

PARTS = [("t", 0), ("t", 1)]
CLUSTER = ClusterOffsets(earliest={("t", 0): 5, ("t", 1): 0}, latest={("t", 0): 50, ("t", 1): 20})


def test_earliest_and_latest_resolve_to_the_cluster_offsets():
    assert resolve(parse_spec({}, "starting", "earliest"), PARTS, CLUSTER, "starting") == {("t", 0): 5, ("t", 1): 0}
    assert resolve(parse_spec({}, "ending", "latest"), PARTS, CLUSTER, "ending") == {("t", 0): 50, ("t", 1): 20}
    spec = parse_spec({"startingOffsets": "latest"}, "starting", "earliest")
    assert resolve(spec, PARTS, CLUSTER, "starting") == {("t", 0): 50, ("t", 1): 20}


def test_json_offsets_take_minus_two_and_minus_one_as_earliest_and_latest():
    spec = parse_spec({"startingOffsets": '{"t": {"0": -2, "1": 7}}'}, "starting", "latest")
    assert resolve(spec, PARTS, CLUSTER, "starting") == {("t", 0): 5, ("t", 1): 7}
    end = parse_spec({"endingOffsets": '{"t": {"0": 30, "1": -1}}'}, "ending", "latest")
    assert resolve(end, PARTS, CLUSTER, "ending") == {("t", 0): 30, ("t", 1): 20}


def test_json_offsets_leaving_out_a_partition_start_it_at_earliest_and_end_it_at_latest():
    start = parse_spec({"startingOffsets": '{"t": {"1": 3}}'}, "starting", "latest")
    assert resolve(start, PARTS, CLUSTER, "starting") == {("t", 0): 5, ("t", 1): 3}
    end = parse_spec({"endingOffsets": '{"t": {"0": 9}}'}, "ending", "latest")
    assert resolve(end, PARTS, CLUSTER, "ending") == {("t", 0): 9, ("t", 1): 20}


def test_json_offsets_naming_an_unread_partition_are_refused():
    spec = parse_spec({"startingOffsets": '{"other": {"0": 1}}'}, "starting", "latest")
    with pytest.raises(OffsetOptionError, match="does not read"):
        resolve(spec, PARTS, CLUSTER, "starting")


@pytest.mark.parametrize(
    "text", ["{", "[1]", '{"t": [1]}', '{"t": {"x": 1}}', '{"t": {"0": "1"}}', '{"t": {"0": 1.5}}', '{"t": {"-1": 1}}']
)
def test_malformed_offset_json_is_a_clear_error(text):
    with pytest.raises(OffsetOptionError):
        parse_spec({"startingOffsets": text}, "starting", "latest")


def test_ending_earliest_and_batch_starting_latest_are_refused_as_spark_does():
    with pytest.raises(OffsetOptionError, match="earliest"):
        parse_spec({"endingOffsets": "earliest"}, "ending", "latest")
    with pytest.raises(OffsetOptionError, match="-2"):
        parse_spec({"endingOffsets": '{"t": {"0": -2}}'}, "ending", "latest")
    with pytest.raises(OffsetOptionError, match="batch"):
        check_batch_start(parse_spec({"startingOffsets": "latest"}, "starting", "earliest"))
    check_batch_start(parse_spec({}, "starting", "earliest"))


def test_option_names_are_case_insensitive_like_spark_options():
    spec = parse_spec({"STARTINGOFFSETS": "latest"}, "starting", "earliest")
    assert spec.kind == "latest"


def test_global_timestamp_wins_over_per_partition_timestamps_and_offsets():
    options = {
        "startingTimestamp": "1000",
        "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
        "startingOffsets": "earliest",
    }
    spec = parse_spec(options, "starting", "latest")
    assert spec == OffsetSpec("timestamp", timestamp=1000)
    assert timestamps_to_look_up(spec, PARTS) == {("t", 0): 1000, ("t", 1): 1000}


def test_timestamps_resolve_to_the_offsets_the_cluster_found():
    spec = parse_spec({"startingOffsetsByTimestamp": '{"t": {"0": 100, "1": 200}}'}, "starting", "latest")
    assert timestamps_to_look_up(spec, PARTS) == {("t", 0): 100, ("t", 1): 200}
    cluster = ClusterOffsets(CLUSTER.earliest, CLUSTER.latest, {("t", 0): 12, ("t", 1): 3})
    assert resolve(spec, PARTS, cluster, "starting") == {("t", 0): 12, ("t", 1): 3}


def test_a_start_timestamp_past_every_record_fails_unless_the_strategy_is_latest():
    spec = parse_spec({"startingTimestamp": "99"}, "starting", "latest")
    cluster = ClusterOffsets(CLUSTER.earliest, CLUSTER.latest, {("t", 0): 12, ("t", 1): None})
    with pytest.raises(OffsetOptionError, match="no record"):
        resolve(spec, PARTS, cluster, "starting")
    assert resolve(spec, PARTS, cluster, "starting", strategy="latest") == {("t", 0): 12, ("t", 1): 20}


def test_an_end_timestamp_past_every_record_ends_at_the_latest_offset():
    spec = parse_spec({"endingTimestamp": "99"}, "ending", "latest")
    cluster = ClusterOffsets(CLUSTER.earliest, CLUSTER.latest, {("t", 0): 40, ("t", 1): None})
    assert resolve(spec, PARTS, cluster, "ending") == {("t", 0): 40, ("t", 1): 20}


def test_negative_timestamps_are_refused():
    with pytest.raises(OffsetOptionError):
        parse_spec({"startingTimestamp": "-5"}, "starting", "latest")
    with pytest.raises(OffsetOptionError):
        parse_spec({"startingTimestamp": "soon"}, "starting", "latest")
    with pytest.raises(OffsetOptionError):
        parse_spec({"endingOffsetsByTimestamp": '{"t": {"0": -3}}'}, "ending", "latest")


def test_checkpoint_json_round_trips_with_string_partitions():
    offsets = {("b", 1): 4, ("a", 0): 9, ("b", 0): 0}
    doc = offsets_to_json(offsets)
    assert doc == {"a": {"0": 9}, "b": {"0": 0, "1": 4}}
    assert offsets_from_json(doc) == offsets
    assert parse_offsets_json('{"a": {"0": 9}}') == {("a", 0): 9}


def test_ranges_cover_start_to_end_and_skip_empty_partitions():
    ranges = plan_ranges({("t", 0): 5, ("t", 1): 20}, {("t", 0): 50, ("t", 1): 20})
    assert ranges == [OffsetRange("t", 0, 5, 50)]


def test_new_partitions_start_at_their_earliest_offset():
    ranges = plan_ranges({("t", 0): 5}, {("t", 0): 6, ("t", 1): 4}, new_partition_start={("t", 1): 1})
    assert ranges == [OffsetRange("t", 0, 5, 6), OffsetRange("t", 1, 1, 4)]


def test_an_end_before_its_start_is_data_loss():
    with pytest.raises(DataLossError):
        plan_ranges({("t", 0): 10}, {("t", 0): 4})


def test_min_partitions_splits_ranges_in_proportion_and_covers_every_offset():
    ranges = plan_ranges({("t", 0): 0, ("t", 1): 0}, {("t", 0): 90, ("t", 1): 10}, min_partitions=10)
    assert len(ranges) >= 10
    for tp, end in ((("t", 0), 90), (("t", 1), 10)):
        mine = sorted(r for r in ranges if (r.topic, r.partition) == tp)
        assert mine[0].start == 0 and mine[-1].end == end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))
    assert sum(1 for r in ranges if r.partition == 0) == 9


def test_min_partitions_never_makes_empty_ranges():
    ranges = plan_ranges({("t", 0): 0}, {("t", 0): 3}, min_partitions=10)
    assert ranges == [OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2), OffsetRange("t", 0, 2, 3)]


def test_max_offsets_per_trigger_is_shared_by_backlog_and_never_starves_a_partition():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 98, ("t", 2): 2}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 90, ("t", 1): 8, ("t", 2): 1}
    assert sum(end[tp] - start[tp] for tp in end) <= 100


def test_max_offsets_per_trigger_above_the_backlog_reads_everything():
    start = {("t", 0): 3}
    assert rate_limit(start, {("t", 0): 10}, 100) == {("t", 0): 10}
    assert rate_limit(start, {("t", 0): 10}, None) == {("t", 0): 10}


def test_successive_rate_limited_batches_reach_the_latest_offsets():
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 25, ("t", 1): 7}
    batches = 0
    while start != latest:
        start = rate_limit(start, latest, 5)
        batches += 1
    assert batches <= 10


def test_start_offsets_below_the_log_start_are_data_loss_or_skipped():
    start, end, earliest = {("t", 0): 2}, {("t", 0): 50}, {("t", 0): 5}
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        check_progress(start, end, earliest, fail_on_data_loss=True)
    assert check_progress(start, end, earliest, fail_on_data_loss=False) == {("t", 0): 5}


def test_a_vanished_partition_is_data_loss():
    with pytest.raises(DataLossError, match="no longer exists"):
        check_progress({("t", 0): 2, ("gone", 0): 1}, {("t", 0): 5}, {}, fail_on_data_loss=True)
    assert check_progress({("t", 0): 2, ("gone", 0): 1}, {("t", 0): 5}, {}, False) == {("t", 0): 2}


# --------------------------------------------------------------------------- options


def test_subscribe_pattern_and_assign_pick_partitions_from_metadata():
    cluster = {"clicks": 2, "clicks-dlq": 1, "__consumer_offsets": 50, "other": 1}
    assert parse_subscription({"subscribe": "clicks, other"}).partitions(cluster) == [
        ("clicks", 0),
        ("clicks", 1),
        ("other", 0),
    ]
    assert parse_subscription({"subscribePattern": "click.*"}).partitions(cluster) == [
        ("clicks", 0),
        ("clicks", 1),
        ("clicks-dlq", 0),
    ]
    assert parse_subscription({"subscribePattern": ".*"}).partitions(cluster)[-1] == ("other", 0)
    assert parse_subscription({"assign": '{"clicks": [1], "x": [0]}'}).partitions(cluster) == [("clicks", 1), ("x", 0)]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"subscribe": "a", "assign": '{"a": [0]}'},
        {"subscribe": " , "},
        {"subscribePattern": "("},
        {"assign": "[0]"},
        {"assign": '{"a": [-1]}'},
        {"assign": '{"a": []}'},
    ],
)
def test_bad_subscriptions_are_clear_errors(options):
    with pytest.raises(SourceOptionError):
        parse_subscription(options)


def test_kafka_prefixed_options_become_client_settings_without_java_only_ones():
    settings = client_settings(
        {"kafka.bootstrap.servers": "h:1", "kafka.client.id": "c", "kafka.key.deserializer": "x", "subscribe": "t"}
    )
    assert settings == {"bootstrap.servers": "h:1", "client.id": "c"}
    with pytest.raises(SourceOptionError, match="bootstrap"):
        client_settings({"subscribe": "t"})


def test_the_schema_is_the_kafka_sources_and_has_headers_only_when_asked():
    assert schema_ddl({}).split(", ")[0] == "key binary"
    assert "headers" not in schema_ddl({})
    assert schema_ddl({"includeHeaders": "true"}).endswith("headers array<struct<key: string, value: binary>>")
