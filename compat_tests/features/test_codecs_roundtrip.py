"""Every client × codec: produce records with keys, headers and timestamps to a
6-partition topic and read them back identical and in order per partition."""

from __future__ import annotations

import dataclasses
import time

import pytest

from compat_tests.support.admin import create_topic, unique_topic
from compat_tests.support.clients import aiokafka_client, confluent, kafka_python, kafkajs, kcat
from compat_tests.support.clients.base import CONSUME_TIMEOUT_S, Driver, require_all
from compat_tests.support.workload import (
    CODECS,
    PARTITIONS,
    Record,
    assert_round_trip,
    expected_counts,
    make_records,
    record_count,
)
from strom.tools.broker_process import BrokerProcess

DRIVERS = [confluent.DRIVER, kafka_python.DRIVER, aiokafka_client.DRIVER, kcat.DRIVER, kafkajs.DRIVER]
# A create time the client stamps itself may be a little before our first clock read.
CLOCK_SLACK_MS = 5_000


def skip_reason(driver: Driver, codec: str) -> str | None:
    missing = driver.unavailable()
    if missing and require_all():
        pytest.fail(f"{driver.name} must be available in CI: {missing}")
    return missing or driver.codec_skip(codec)


def fill_create_times(expected: list[Record], got: dict[int, list[Record]], window: tuple[int, int]) -> list[Record]:
    """Where the client could not set timestamps, check each received create time falls
    inside the produce window and adopt it for the comparison."""
    if all(r.timestamp_ms is not None for r in expected):
        return expected
    low, high = window[0] - CLOCK_SLACK_MS, window[1] + CLOCK_SLACK_MS
    received = {(r.partition, r.key): r.timestamp_ms for rs in got.values() for r in rs}
    for key, ts in received.items():
        assert ts is not None and low <= ts <= high, f"record {key}: create time {ts} not in {low}..{high}"
    return [dataclasses.replace(r, timestamp_ms=received.get((r.partition, r.key))) for r in expected]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_round_trip(shared_broker: BrokerProcess, driver: Driver, codec: str) -> None:
    reason = skip_reason(driver, codec)
    if reason:
        pytest.skip(reason)
    topic = unique_topic(f"rt-{driver.name}-{codec}")
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    expected = driver.shape(make_records(record_count(), codec), codec)

    start_ms = int(time.time() * 1000)
    driver.produce(shared_broker.bootstrap, topic, expected, codec)
    end_ms = int(time.time() * 1000)
    got = driver.consume(shared_broker.bootstrap, topic, expected_counts(expected), CONSUME_TIMEOUT_S)

    assert_round_trip(fill_create_times(expected, got, (start_ms, end_ms)), got)
