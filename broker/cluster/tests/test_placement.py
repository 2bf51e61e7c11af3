"""Replica placement, rack-unaware and rack-aware: distinct replicas (on distinct racks when
there are enough), balanced leaders and followers, deterministic with a start index, Kafka's
errors for impossible requests."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.broker.metadata.placement import PlacementError, assign_replicas
from strom.protocol.errors import ErrorCode


def test_known_assignment_with_fixed_start_index() -> None:
    # 5 brokers, 10 partitions, RF 3, start index 0: Kafka's documented example layout.
    result = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert result == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
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


@settings(deadline=None)  # no per-example deadline: CI runs tests in parallel on 2 cores
@given(
    brokers=st.integers(min_value=1, max_value=9),
    partitions=st.integers(min_value=1, max_value=60),
    data=st.data(),
)
def test_every_partition_gets_distinct_replicas_and_balanced_leaders(
    brokers: int, partitions: int, data: st.DataObject
) -> None:
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


# ----------------------------------------------------------------- manual assignments
# Messages as Kafka 4.0's controller words them (asked of the reference broker; the inconsistent
# replication factor needs several brokers, so it is from ReplicationControlManager's source).

from strom.broker.metadata.placement import added_assignment, check_replicas, manual_assignment  # noqa: E402

REGISTERED = {0, 1, 2}


def refusal(call) -> tuple[ErrorCode, str]:
    with pytest.raises(PlacementError) as info:
        call()
    return info.value.code, info.value.message


def test_a_manual_assignment_is_kept_exactly_as_given() -> None:
    assert manual_assignment([(1, [2, 0]), (0, [1, 2])], REGISTERED) == {0: [1, 2], 1: [2, 0]}
    assert list(manual_assignment([(1, [2, 0]), (0, [1, 2])], REGISTERED)) == [0, 1]


@pytest.mark.parametrize(
    "assignments, message",
    [
        ([(0, [0, 7])], "The manual partition assignment includes broker 7, but no such broker is registered."),
        # the lowest offending id is reported, whether unknown or repeated
        ([(0, [9, 1, 5])], "The manual partition assignment includes broker 5, but no such broker is registered."),
        ([(0, [2, 1, 2])], "The manual partition assignment includes the broker 2 more than once."),
        ([(0, [7, 7, 1])], "The manual partition assignment includes broker 7, but no such broker is registered."),
        ([(0, [])], "The manual partition assignment includes an empty replica list."),
        (
            [(0, [0, 1]), (1, [2])],
            "The manual partition assignment includes a partition with 1 replica(s), but this is "
            "not consistent with previous partitions, which have 2 replica(s).",
        ),
        ([(0, [0]), (2, [1])], "partitions should be a consecutive 0-based integer sequence"),
        ([(1, [0])], "partitions should be a consecutive 0-based integer sequence"),
        ([(-1, [0])], "partitions should be a consecutive 0-based integer sequence"),
        ([(0, [0]), (0, [1])], "Found multiple manual partition assignments for partition 0"),
    ],
)
def test_manual_assignment_refusals_are_kafkas(assignments, message) -> None:
    assert refusal(lambda: manual_assignment(assignments, REGISTERED)) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        message,
    )


def test_partitions_are_checked_in_request_order() -> None:
    # partition 1's unknown broker is found before partition 0's replication factor is compared
    code, message = refusal(lambda: manual_assignment([(1, [0, 9]), (0, [1])], REGISTERED))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "broker 9" in message


def test_added_partitions_take_one_list_each_with_the_topics_replication_factor() -> None:
    assert added_assignment([[2, 1], [0, 2]], REGISTERED, 3, 5, 2) == {3: [2, 1], 4: [0, 2]}
    assert refusal(lambda: added_assignment([[2, 1]], REGISTERED, 3, 5, 2)) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
    )
    assert (
        refusal(lambda: added_assignment([], REGISTERED, 3, 4, 2))[1]
        == "Attempted to add 1 additional partition(s), but only 0 assignment(s) were specified."
    )
    assert refusal(lambda: added_assignment([[0, 1, 2]], REGISTERED, 3, 4, 2))[1].startswith(
        "The manual partition assignment includes a partition with 3 replica(s)"
    )
    assert (
        refusal(lambda: added_assignment([[4, 0]], REGISTERED, 3, 4, 2))[1]
        == "The manual partition assignment includes broker 4, but no such broker is registered."
    )


def test_check_replicas_accepts_any_order_of_registered_brokers() -> None:
    check_replicas([2, 0, 1], REGISTERED, 3)
    check_replicas([1], REGISTERED, None)


# ----------------------------------------------------------------- rack-aware placement
from strom.broker.metadata.placement import rack_alternated  # noqa: E402


def test_brokers_alternate_over_racks_in_rack_name_order() -> None:
    # Kafka's own example (AdminRackAwareTest): racks 1: 0 5, 2: 3 4, 3: 1 2
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks, racks) == [0, 3, 1, 5, 4, 2]
    # a rack that runs out is skipped; brokers without a rack form the first "rack"
    assert rack_alternated({0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}, range(6)) == [0, 3, 5, 1, 4, 2]
    assert rack_alternated({0: "a", 1: None, 2: "a", 3: None}, range(4)) == [1, 0, 3, 2]


def test_known_rack_aware_assignment_with_fixed_start_index() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    # alternated: 0 1 3 5 2 4; leaders from index 2 on; followers walk at distance 1 + (2*3 + k) % 5
    assert assign_replicas(racks, 6, 3, start_index=2, racks=racks) == {
        0: [3, 2, 0],
        1: [5, 4, 1],
        2: [2, 0, 3],
        3: [4, 1, 5],
        4: [0, 3, 2],
        5: [1, 5, 4],
    }


def test_no_rack_anywhere_is_the_rack_unaware_placement() -> None:
    racks = {b: None for b in range(5)}
    assert assign_replicas(racks, 10, 3, start_index=0, racks=racks) == assign_replicas(range(5), 10, 3, start_index=0)


def test_rack_aware_start_index_is_deterministic_and_added_partitions_continue() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    assert assign_replicas(racks, 8, 2, start_index=3, racks=racks) == assign_replicas(
        racks, 8, 2, start_index=3, racks=racks
    )
    leaders = {assign_replicas(racks, 1, 1, rng=random.Random(seed), racks=racks)[0][0] for seed in range(40)}
    assert len(leaders) > 1
    added = assign_replicas(racks, 2, 2, start_index=0, start_partition=3, racks=racks)
    assert sorted(added) == [3, 4] and all(len({racks[b] for b in r}) == 2 for r in added.values())


def test_mixed_racks_are_placed_with_the_rackless_brokers_as_one_rack() -> None:
    """Kafka 4.0's controller does not refuse (its placer files rackless brokers under an empty
    rack); the ZooKeeper-era "Not all brokers have rack information" is not answered."""
    racks = {0: "a", 1: None, 2: "b", 3: None}
    result = assign_replicas(racks, 12, 3, start_index=0, racks=racks)
    for replicas in result.values():
        assert len({racks[b] for b in replicas}) == 3  # a, b and the rackless pair


RACK_NAMES = st.sampled_from(["a", "b", "c", "d", None])


@settings(deadline=None)  # no per-example deadline: CI runs tests in parallel on 2 cores
@given(
    layout=st.dictionaries(st.integers(0, 50), RACK_NAMES, min_size=1, max_size=10),
    partitions=st.integers(1, 40),
    data=st.data(),
)
def test_any_layout_spans_as_many_racks_as_possible_with_balanced_leaders(layout, partitions, data) -> None:
    rf = data.draw(st.integers(1, len(layout)))
    start = data.draw(st.none() | st.integers(0, 100))
    result = assign_replicas(
        layout, partitions, rf, start_index=start, racks=layout, rng=random.Random(data.draw(st.integers(0, 2**32)))
    )
    assert sorted(result) == list(range(partitions))
    rack_count = len(set(layout.values()))
    for replicas in result.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(layout)
        assert len({layout[b] for b in replicas}) == min(rf, rack_count)
    leaders = Counter(replicas[0] for replicas in result.values())
    counts = [leaders.get(b, 0) for b in layout]
    assert max(counts) - min(counts) <= 1
    if start is not None:
        assert result == assign_replicas(layout, partitions, rf, start_index=start, racks=layout)


@settings(deadline=None)  # no per-example deadline: CI runs tests in parallel on 2 cores
@given(rack_count=st.integers(1, 4), per_rack=st.integers(1, 4), rounds=st.integers(1, 4), data=st.data())
def test_equal_racks_get_equal_leaders_and_replicas(rack_count, per_rack, rounds, data) -> None:
    """Every rack with as many brokers: leaders and replicas spread evenly over the brokers and
    the racks (``rounds`` partitions per broker, so exactly)."""
    ids = data.draw(
        st.lists(st.integers(0, 1000), min_size=rack_count * per_rack, max_size=rack_count * per_rack, unique=True)
    )
    racks = {b: f"rack-{i % rack_count}" for i, b in enumerate(ids)}
    rf = data.draw(st.integers(1, len(ids)))
    partitions = rounds * len(ids)
    result = assign_replicas(racks, partitions, rf, racks=racks, rng=random.Random(data.draw(st.integers(0, 2**32))))
    leaders = Counter(replicas[0] for replicas in result.values())
    assert set(leaders.values()) == {rounds} and len(leaders) == len(ids)
    replicas_per_broker = Counter(b for replicas in result.values() for b in replicas)
    assert set(replicas_per_broker.values()) == {rounds * rf} and len(replicas_per_broker) == len(ids)


def test_rack_aware_impossible_requests_raise_kafka_errors() -> None:
    racks = {1: "a", 2: "b"}
    with pytest.raises(PlacementError, match=r"Replication factor: 3 larger than available brokers: 2\.") as info:
        assign_replicas(racks, 1, 3, racks=racks)
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(PlacementError) as info:
        assign_replicas(racks, 0, 1, racks=racks)
    assert info.value.code == ErrorCode.INVALID_PARTITIONS
