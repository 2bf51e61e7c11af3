"""Rack-unaware replica placement: distinct replicas, balanced leaders and followers,
deterministic with a start index, Kafka's errors for impossible requests."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.broker.cluster.placement import PlacementError, assign_replicas
from strom.protocol.errors import ErrorCode


def test_known_assignment_with_fixed_start_index() -> None:
    # 5 brokers, 10 partitions, RF 3, start index 0: Kafka's documented example layout.
    result = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert result == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_broker_ids_are_used_in_sorted_order() -> None:
    assert assign_replicas([30, 10, 20], 3, 1, start_index=0) == {0: [10], 1: [20], 2: [30]}


def test_fixed_start_index_is_deterministic_and_random_start_varies() -> None:
    brokers = [1, 2, 3, 4]
    assert assign_replicas(brokers, 8, 2, start_index=2) == assign_replicas(brokers, 8, 2, start_index=2)
    leaders = {assign_replicas(brokers, 1, 1, rng=random.Random(seed))[0][0] for seed in range(40)}
    assert len(leaders) > 1


def test_added_partitions_continue_numbering() -> None:
    result = assign_replicas([0, 1, 2], 2, 2, start_index=0, start_partition=3)
    assert sorted(result) == [3, 4]


@given(
    brokers=st.integers(min_value=1, max_value=9),
    partitions=st.integers(min_value=1, max_value=60),
    data=st.data(),
)
def test_every_partition_gets_distinct_replicas_and_balanced_leaders(brokers: int, partitions: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(min_value=1, max_value=brokers))
    ids = list(range(100, 100 + brokers))
    result = assign_replicas(ids, partitions, rf, rng=random.Random(data.draw(st.integers(0, 2**32))))
    assert sorted(result) == list(range(partitions))
    for replicas in result.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(ids)
    leaders = Counter(replicas[0] for replicas in result.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1
    replica_counts = Counter(r for replicas in result.values() for r in replicas)
    if partitions % brokers == 0:
        assert len(set(replica_counts.values())) == 1


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "code"),
    [
        ([1, 2], 3, 3, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([1, 2], 3, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([], 3, 1, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([1, 2], 0, 1, ErrorCode.INVALID_PARTITIONS),
    ],
)
def test_impossible_requests_raise_kafka_errors(brokers: list[int], partitions: int, rf: int, code: ErrorCode) -> None:
    with pytest.raises(PlacementError) as excinfo:
        assign_replicas(brokers, partitions, rf)
    assert excinfo.value.code == code


def test_replication_factor_message_matches_kafka() -> None:
    with pytest.raises(PlacementError, match=r"Replication factor: 3 larger than available brokers: 2\."):
        assign_replicas([1, 2], 1, 3)
