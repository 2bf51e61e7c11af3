"""Rack-unaware replica placement, as a ZooKeeper-mode Kafka controller assigns new partitions.

Brokers are taken in ascending id order. Partition ``p``'s first replica (its preferred leader)
is broker ``(p + start) % n``, so leaders go round-robin over the brokers. The other replicas
follow the first at a distance of ``1 + (shift + j) % (n - 1)`` positions (``j`` = 0, 1, ...);
``shift`` grows by one each time the partition number wraps around the broker list, so the
followers of different rounds land on different brokers. ``start`` and the initial ``shift``
are random unless ``start_index`` is given, in which case the result is deterministic.

A manual assignment (CreateTopics/CreatePartitions naming each partition's replicas) is checked
by :func:`manual_assignment` / :func:`added_assignment` as Kafka 4.0's controller checks it, with
its error messages, and then used exactly as given.
"""

from __future__ import annotations

import random
from typing import AbstractSet, Iterable, Sequence

from strom.protocol.errors import ErrorCode


class PlacementError(ValueError):
    """The requested placement is impossible; ``code`` is the Kafka error to answer with."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def assign_replicas(
    broker_ids: Iterable[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replica lists for partitions ``start_partition .. start_partition + partitions - 1``.

    ``start_partition`` > 0 assigns partitions added to an existing topic. Raises
    :class:`PlacementError` (INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR) when the request
    cannot be met.
    """
    brokers = sorted(set(broker_ids))
    _validate(len(brokers), partitions, replication_factor)
    n = len(brokers)
    pick = rng or random.Random()
    start = start_index % n if start_index is not None else pick.randrange(n)
    shift = start_index if start_index is not None else pick.randrange(n)
    result: dict[int, list[int]] = {}
    for partition in range(max(0, start_partition), max(0, start_partition) + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        followers = [brokers[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        result[partition] = [brokers[first], *followers]
    return result


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _validate(brokers: int, partitions: int, replication_factor: int) -> None:
    if partitions <= 0:
        raise PlacementError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise PlacementError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {brokers}.",
        )


# ----------------------------------------------------------------- manual assignments
def check_replicas(replicas: Sequence[int], registered: AbstractSet[int], replication_factor: int | None) -> None:
    """One partition's manual replica list, checked as Kafka's controller checks it: not empty,
    every broker registered and named once (the lowest offending id reported), and as many
    replicas as ``replication_factor`` when that is known. Raises :class:`PlacementError`
    (INVALID_REPLICA_ASSIGNMENT) with Kafka's message."""
    if not replicas:
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in registered:
            raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes broker {broker_id}, "
                                 "but no such broker is registered.")
        if broker_id == previous:
            raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes the broker {broker_id} more than once.")
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
                             "but this is not consistent with previous partitions, which have "
                             f"{replication_factor} replica(s).")


def manual_assignment(assignments: Iterable[tuple[int, Sequence[int]]],
                      registered: AbstractSet[int]) -> dict[int, list[int]]:
    """A new topic's replica lists from CreateTopics' ``(partition index, broker ids)`` pairs, as
    given (the first replica is the preferred leader). Kafka's checks in its order: each
    partition once, each replica list valid (:func:`check_replicas`) with the replication factor
    of the first, then the indexes 0..n-1 without gaps."""
    result: dict[int, list[int]] = {}
    replication_factor = None
    for index, replicas in assignments:
        if index in result:
            raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Found multiple manual partition assignments for partition {index}")
        check_replicas(replicas, registered, replication_factor)
        replication_factor = len(replicas)
        result[index] = list(replicas)
    if not result or sorted(result) != list(range(len(result))):
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "partitions should be a consecutive 0-based integer sequence")
    return dict(sorted(result.items()))


def added_assignment(assignments: Sequence[Sequence[int]], registered: AbstractSet[int], existing: int,
                     count: int, replication_factor: int) -> dict[int, list[int]]:
    """The replica lists of partitions ``existing .. count - 1`` added by CreatePartitions, one list
    per new partition in order, each with the topic's ``replication_factor`` (Kafka's checks)."""
    added = count - existing
    if len(assignments) != added:
        raise PlacementError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
                             "assignment(s) were specified.")
    result = {}
    for i, replicas in enumerate(assignments):
        check_replicas(replicas, registered, replication_factor)
        result[existing + i] = list(replicas)
    return result
