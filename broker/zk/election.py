"""Partition leader election, as a ZooKeeper-mode Kafka controller does it (pure functions).

Inputs are a partition's current :class:`PartitionState` (leader, leader epoch, ISR), its
replica assignment (preference order, preferred leader first), the live brokers, and the
electing controller's epoch. Outputs are the new state to write to the partition's state
znode: the leader epoch always goes up by one when the leader or ISR changes.

Strategies (``Strategy``):

* OFFLINE: the leader is gone. Pick the first assigned replica that is live and in the ISR;
  the new ISR is the live part of the old one. With ``unclean`` and no such replica, pick the
  first live assigned replica; the ISR becomes just that replica and the state records that
  the leader is RECOVERING (data may be lost).
* PREFERRED: move leadership back to the first assigned replica if it is live and in the ISR
  (None when it already leads).
* CONTROLLED_SHUTDOWN: the brokers in ``shutting_down`` are leaving. Pick the first assigned
  replica that is live, in the ISR and not leaving; the leaving brokers drop out of the ISR.

:func:`remove_replica_from_isr` is the state change when a replica's broker is lost;
:func:`leader_lost` when the leader is lost and no in-sync replica is alive.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from strom.broker.zk.zkdata import LEADER_RECOVERED, LEADER_RECOVERING, NO_LEADER, PartitionState


class Strategy(enum.Enum):
    OFFLINE = "offline"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


@dataclass(frozen=True)
class Election:
    """An election's outcome: the state to write, and whether it was an unclean election."""

    state: PartitionState
    unclean: bool = False


def elect_leader(
    strategy: Strategy,
    current: PartitionState,
    assignment: Sequence[int],
    live_brokers: AbstractSet[int],
    controller_epoch: int,
    *,
    unclean: bool = False,
    shutting_down: AbstractSet[int] = frozenset(),
) -> Election | None:
    """The new state after electing a leader with ``strategy``; None when no replica qualifies
    (the partition stays as it is: offline, or led by its current leader)."""
    elect = _STRATEGIES[strategy]
    return elect(current, assignment, live_brokers, controller_epoch, unclean, shutting_down)


def initial_state(
    assignment: Sequence[int], live_brokers: AbstractSet[int], controller_epoch: int
) -> PartitionState | None:
    """State of a new partition: leader is the first live assigned replica, ISR all live
    assigned replicas, leader epoch 0. None when no assigned replica is live."""
    live = [r for r in assignment if r in live_brokers]
    if not live:
        return None
    return PartitionState(leader=live[0], leader_epoch=0, isr=tuple(live), controller_epoch=controller_epoch)


def remove_replica_from_isr(state: PartitionState, replica: int, controller_epoch: int) -> PartitionState | None:
    """State after ``replica``'s broker is lost; None when the replica is neither leader nor in
    the ISR. The leader becomes NO_LEADER if it was that replica. The last ISR member stays in
    the ISR (it holds every committed record; a clean election must still find it)."""
    if replica not in state.isr and replica != state.leader:
        return None
    leader = NO_LEADER if state.leader == replica else state.leader
    isr = state.isr if state.isr == (replica,) else tuple(r for r in state.isr if r != replica)
    return _next(state, leader, isr, controller_epoch)


def leader_lost(state: PartitionState, controller_epoch: int) -> PartitionState:
    """State after the leader is lost with no other in-sync replica alive: no leader, and the
    ISR kept whole. Each of its members had every acknowledged record when it last ran (the
    leader could not count an acknowledgement without it), so each stays eligible until it is
    back; removing them one by one, as brokers are found dead, would keep whichever comes last,
    which may be the first that died and the one that lost its unflushed tail (KIP-966's
    eligible leader replicas keep them for the same reason)."""
    return _next(state, NO_LEADER, state.isr, controller_epoch)


def _offline(
    current: PartitionState,
    assignment: Sequence[int],
    live: AbstractSet[int],
    controller_epoch: int,
    unclean: bool,
    shutting_down: AbstractSet[int],
) -> Election | None:
    clean = _first(assignment, lambda r: r in live and r in current.isr)
    if clean is not None:
        isr = tuple(r for r in current.isr if r in live)
        return Election(_next(current, clean, isr, controller_epoch, LEADER_RECOVERED))
    dirty = _first(assignment, lambda r: r in live) if unclean else None
    if dirty is None:
        return None
    return Election(_next(current, dirty, (dirty,), controller_epoch, LEADER_RECOVERING), unclean=True)


def _preferred(
    current: PartitionState,
    assignment: Sequence[int],
    live: AbstractSet[int],
    controller_epoch: int,
    unclean: bool,
    shutting_down: AbstractSet[int],
) -> Election | None:
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == current.leader or preferred not in live or preferred not in current.isr:
        return None
    return Election(_next(current, preferred, current.isr, controller_epoch))


def _controlled_shutdown(
    current: PartitionState,
    assignment: Sequence[int],
    live: AbstractSet[int],
    controller_epoch: int,
    unclean: bool,
    shutting_down: AbstractSet[int],
) -> Election | None:
    leader = _first(assignment, lambda r: r in live and r in current.isr and r not in shutting_down)
    if leader is None:
        return None
    isr = tuple(r for r in current.isr if r not in shutting_down)
    return Election(_next(current, leader, isr, controller_epoch))


_STRATEGIES: dict[Strategy, Callable[..., Election | None]] = {
    Strategy.OFFLINE: _offline,
    Strategy.PREFERRED: _preferred,
    Strategy.CONTROLLED_SHUTDOWN: _controlled_shutdown,
}


def _first(replicas: Sequence[int], accept: Callable[[int], bool]) -> int | None:
    return next((r for r in replicas if accept(r)), None)


def _next(
    state: PartitionState,
    leader: int,
    isr: tuple[int, ...],
    controller_epoch: int,
    recovery: int | None = None,
) -> PartitionState:
    return replace(
        state,
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        isr=isr,
        controller_epoch=controller_epoch,
        leader_recovery_state=state.leader_recovery_state if recovery is None else recovery,
    )
