"""Rack-unaware replica placement, as a ZooKeeper-mode Kafka controller assigns new partitions.

Brokers are taken in ascending id order. Partition ``p``'s first replica (its preferred leader)
is broker ``(p + start) % n``, so leaders go round-robin over the brokers. The other replicas
follow the first at a distance of ``1 + (shift + j) % (n - 1)`` positions (``j`` = 0, 1, ...);
``shift`` grows by one each time the partition number wraps around the broker list, so the
followers of different rounds land on different brokers. ``start`` and the initial ``shift``
are random unless ``start_index`` is given, in which case the result is deterministic.
"""

from __future__ import annotations

import random
from typing import Iterable

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
