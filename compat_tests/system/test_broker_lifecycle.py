"""The broker as a process: clean shutdown, restart on the same port, and data acked
with acks=all surviving a SIGKILL."""

from __future__ import annotations

from compat_tests.support.admin import create_topic, unique_topic
from compat_tests.support.clients import confluent
from compat_tests.support.workload import Record, assert_round_trip, expected_counts, make_records
from strom.tools.broker_process import BrokerProcess

PARTITIONS = 2
COUNT = 2_000


def produce_and_check(broker: BrokerProcess, topic: str) -> list[Record]:
    records = make_records(COUNT, "lz4", PARTITIONS)
    confluent.produce(broker.bootstrap, topic, records, "lz4")
    return records


def test_sigterm_exits_zero(broker: BrokerProcess) -> None:
    assert broker.stop() == 0  # stop() sends SIGTERM and returns the exit code


def test_restart_keeps_port_and_data(broker: BrokerProcess) -> None:
    topic = unique_topic("restart")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = produce_and_check(broker, topic)
    port = broker.port
    assert broker.stop() == 0
    broker.start()
    assert broker.port == port
    got = confluent.consume(broker.bootstrap, topic, expected_counts(records, PARTITIONS), 60)
    assert_round_trip(records, got, PARTITIONS)


def test_acked_data_survives_sigkill(broker: BrokerProcess) -> None:
    topic = unique_topic("crash")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = produce_and_check(broker, topic)
    broker.restart(crash=True)
    got = confluent.consume(broker.bootstrap, topic, expected_counts(records, PARTITIONS), 60)
    assert_round_trip(records, got, PARTITIONS)
    # the recovered log takes appends at the next offsets
    more = make_records(10, "none", PARTITIONS)
    confluent.produce(broker.bootstrap, topic, more, "none")
    counts = expected_counts(records + more, PARTITIONS)
    got = confluent.consume(broker.bootstrap, topic, counts, 60)
    assert_round_trip(records + more, got, PARTITIONS)
