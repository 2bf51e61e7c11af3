"""Replica placement for new partitions, as a ZooKeeper-mode Kafka controller assigns them:
rack-unaware when no registered broker has a rack, rack-aware (KIP-36) when any has one.

Rack-unaware:

Brokers are taken in ascending id order. Partition ``p``'s first replica (its preferred leader)
is broker ``(p + start) % n``, so leaders go round-robin over the brokers. The other replicas
follow the first at a distance of ``1 + (shift + j) % (n - 1)`` positions (``j`` = 0, 1, ...);
``shift`` grows by one each time the partition number wraps around the broker list, so the
followers of different rounds land on different brokers. ``start`` and the initial ``shift``
are random unless ``start_index`` is given, in which case the result is deterministic.

Rack-aware (:func:`assign_replicas` with ``racks``): the brokers are first put in rack-alternated
order (the lowest id of every rack in rack-name order, then the second lowest of every rack, and so
on, skipping racks that ran out), and the same walk runs over that list, with two differences: the
followers' distance grows with ``shift * number of racks``, and a candidate is passed over (the
walk goes on to the next distance) while its rack already holds one of the partition's replicas
and some rack holds none. So each partition spans ``min(replication factor, racks)`` racks, and
the leaders go round-robin over all brokers and, in the alternated order, over the racks. When
every rack has as many brokers, replicas spread evenly too; a smaller rack gets more of them (as
in Kafka, equal racks are the user's part). Brokers without a rack, in a cluster where others
have one, count as one more rack of their own, as Kafka 4.0's controller treats them (its
StripedReplicaPlacer files them under an empty rack; the ZooKeeper-era refusal "Not all brokers
have rack information for replica rack aware assignment." is left only in the reassignment tool).

A manual assignment (CreateTopics/CreatePartitions naming each partition's replicas) is checked
by :func:`manual_assignment` / :func:`added_assignment` as Kafka 4.0's controller checks it, with
its error messages, and then used exactly as given.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

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
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Replica lists for partitions ``start_partition .. start_partition + partitions - 1``.

    ``start_partition`` > 0 assigns partitions added to an existing topic. ``racks`` maps broker
    ids to their rack (None or missing: no rack); placement is rack-aware when any broker has
    one. Raises :class:`PlacementError` (INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR) when
    the request cannot be met.
    """
    # Without racks every broker is in the one unnamed rack: the rack-alternated order is then
    # ascending ids, the walk's distance is not multiplied, and no follower is ever skipped for its
    # rack, which is exactly the rack-unaware placement described above.
    return _place(
        broker_ids,
        racks or {},
        partitions,
        replication_factor,
        start_index=start_index,
        start_partition=start_partition,
        rng=rng,
    )


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str | None], broker_ids: Iterable[int]) -> list[int]:
    """``broker_ids`` in rack-alternated order: the lowest id of each rack (racks by name, no rack
    first), then the second lowest of each, and so on; e.g. racks a: 0 1 2, b: 3 4, c: 5 give
    0 3 5 1 4 2."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(set(broker_ids)):
        by_rack.setdefault(_rack_key(racks.get(broker)), []).append(broker)
    columns = [by_rack[name] for name in sorted(by_rack)]
    depth = max((len(c) for c in columns), default=0)
    return [column[i] for i in range(depth) for column in columns if i < len(column)]


def _rack_key(rack: str | None) -> str:
    # None sorts before every name (Kafka orders the empty rack first); "\0" + name keeps "" apart.
    return "" if rack is None else "\0" + rack


def _place(
    broker_ids: Iterable[int],
    racks: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None,
    start_partition: int,
    rng: random.Random | None,
) -> dict[int, list[int]]:
    brokers = rack_alternated(racks, broker_ids)
    n = len(brokers)
    _validate(n, partitions, replication_factor)
    rack_of = {b: _rack_key(racks.get(b)) for b in brokers}
    rack_count = len(set(rack_of.values()))
    pick = rng or random.Random(random.getrandbits(64))  # the global generator: a simulation seeds it
    start = start_index % n if start_index is not None else pick.randrange(n)
    shift = start_index if start_index is not None else pick.randrange(n)
    result: dict[int, list[int]] = {}
    for partition in range(max(0, start_partition), max(0, start_partition) + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [brokers[first]]
        used_racks = {rack_of[brokers[first]]}
        k = 0
        while len(replicas) < replication_factor:
            candidate = brokers[_follower_index(first, shift * rack_count, k, n)]
            k += 1
            if candidate in replicas:
                continue
            if rack_of[candidate] in used_racks and len(used_racks) < rack_count:
                continue
            replicas.append(candidate)
            used_racks.add(rack_of[candidate])
        result[partition] = replicas
    return result


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
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
        )
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in registered:
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.",
            )
        if broker_id == previous:
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker_id} more than once.",
            )
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
            "but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s).",
        )


def manual_assignment(
    assignments: Iterable[tuple[int, Sequence[int]]], registered: AbstractSet[int]
) -> dict[int, list[int]]:
    """A new topic's replica lists from CreateTopics' ``(partition index, broker ids)`` pairs, as
    given (the first replica is the preferred leader). Kafka's checks in its order: each
    partition once, each replica list valid (:func:`check_replicas`) with the replication factor
    of the first, then the indexes 0..n-1 without gaps."""
    result: dict[int, list[int]] = {}
    replication_factor = None
    for index, replicas in assignments:
        if index in result:
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Found multiple manual partition assignments for partition {index}",
            )
        check_replicas(replicas, registered, replication_factor)
        replication_factor = len(replicas)
        result[index] = list(replicas)
    if not result or sorted(result) != list(range(len(result))):
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"
        )
    return dict(sorted(result.items()))


def added_assignment(
    assignments: Sequence[Sequence[int]],
    registered: AbstractSet[int],
    existing: int,
    count: int,
    replication_factor: int,
) -> dict[int, list[int]]:
    """The replica lists of partitions ``existing .. count - 1`` added by CreatePartitions, one list
    per new partition in order, each with the topic's ``replication_factor`` (Kafka's checks)."""
    added = count - existing
    if len(assignments) != added:
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
            "assignment(s) were specified.",
        )
    result = {}
    for i, replicas in enumerate(assignments):
        check_replicas(replicas, registered, replication_factor)
        result[existing + i] = list(replicas)
    return result


def reassignment_target_error(target: list[int], live: set[int]) -> str | None:
    """Kafka's complaint about a proposed reassignment's replica list (the checks of a manual
    assignment), or None."""
    try:
        check_replicas(target, live, None)
    except PlacementError as exc:
        return exc.message
    return None
