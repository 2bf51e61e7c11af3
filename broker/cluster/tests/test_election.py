"""Leader election: clean picks from the ISR in assignment order, unclean only when allowed,
leader epoch bumps, ISR after broker loss and controlled shutdown."""

from __future__ import annotations

from strom.broker.zk.election import (
    Strategy,
    elect_leader,
    initial_state,
    remove_replica_from_isr,
)
from strom.broker.zk.zkdata import LEADER_RECOVERED, LEADER_RECOVERING, NO_LEADER, PartitionState

ASSIGNMENT = (1, 2, 3)


def state(leader: int, isr: tuple[int, ...], epoch: int = 4) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


def test_offline_picks_first_live_isr_replica_in_assignment_order() -> None:
    result = elect_leader(Strategy.OFFLINE, state(1, (3, 2, 1)), ASSIGNMENT, {2, 3}, controller_epoch=7)
    assert result is not None and not result.unclean
    assert result.state == PartitionState(leader=2, leader_epoch=5, isr=(3, 2), controller_epoch=7)


def test_offline_never_picks_an_out_of_sync_replica_without_unclean() -> None:
    assert elect_leader(Strategy.OFFLINE, state(1, (1,)), ASSIGNMENT, {2, 3}, 7) is None


def test_unclean_election_picks_first_live_replica_and_marks_recovering() -> None:
    result = elect_leader(Strategy.OFFLINE, state(1, (1,)), ASSIGNMENT, {3, 2}, 7, unclean=True)
    assert result is not None and result.unclean
    assert result.state.leader == 2
    assert result.state.isr == (2,)
    assert result.state.leader_epoch == 5
    assert result.state.leader_recovery_state == LEADER_RECOVERING


def test_unclean_flag_prefers_a_clean_choice_when_there_is_one() -> None:
    result = elect_leader(Strategy.OFFLINE, state(1, (1, 3)), ASSIGNMENT, {2, 3}, 7, unclean=True)
    assert result is not None and not result.unclean
    assert result.state.leader == 3 and result.state.leader_recovery_state == LEADER_RECOVERED


def test_no_live_replica_means_no_leader_even_unclean() -> None:
    assert elect_leader(Strategy.OFFLINE, state(1, (1, 2)), ASSIGNMENT, {9}, 7, unclean=True) is None


def test_preferred_election_moves_leadership_back() -> None:
    result = elect_leader(Strategy.PREFERRED, state(2, (2, 1)), ASSIGNMENT, {1, 2, 3}, 7)
    assert result is not None and result.state.leader == 1 and result.state.isr == (2, 1)
    assert result.state.leader_epoch == 5
    assert elect_leader(Strategy.PREFERRED, state(2, (2,)), ASSIGNMENT, {1, 2}, 7) is None
    assert elect_leader(Strategy.PREFERRED, state(1, (1, 2)), ASSIGNMENT, {1, 2}, 7) is None


def test_controlled_shutdown_moves_leader_off_leaving_broker_and_shrinks_isr() -> None:
    result = elect_leader(
        Strategy.CONTROLLED_SHUTDOWN,
        state(1, (1, 2, 3)),
        ASSIGNMENT,
        {1, 2, 3},
        7,
        shutting_down={1},
    )
    assert result is not None
    assert result.state.leader == 2 and result.state.isr == (2, 3)
    assert (
        elect_leader(
            Strategy.CONTROLLED_SHUTDOWN,
            state(1, (1,)),
            ASSIGNMENT,
            {1, 2, 3},
            7,
            shutting_down={1},
        )
        is None
    )


def test_losing_a_follower_shrinks_isr_and_keeps_leader() -> None:
    new = remove_replica_from_isr(state(1, (1, 2, 3)), 3, controller_epoch=8)
    assert new == PartitionState(leader=1, leader_epoch=5, isr=(1, 2), controller_epoch=8)


def test_losing_the_leader_leaves_no_leader_until_election() -> None:
    new = remove_replica_from_isr(state(1, (1, 2)), 1, controller_epoch=8)
    assert new is not None and new.leader == NO_LEADER and new.isr == (2,)


def test_last_isr_member_stays_in_isr_when_lost() -> None:
    new = remove_replica_from_isr(state(1, (1,)), 1, controller_epoch=8)
    assert new is not None and new.leader == NO_LEADER and new.isr == (1,)
    # ...so a clean election waits for that broker to return.
    assert elect_leader(Strategy.OFFLINE, new, ASSIGNMENT, {2, 3}, 8) is None
    back = elect_leader(Strategy.OFFLINE, new, ASSIGNMENT, {1, 2, 3}, 8)
    assert back is not None and back.state.leader == 1


def test_removing_an_unrelated_replica_changes_nothing() -> None:
    assert remove_replica_from_isr(state(1, (1, 2)), 3, 8) is None


def test_initial_state_uses_live_assigned_replicas() -> None:
    assert initial_state(ASSIGNMENT, {2, 3}, 4) == PartitionState(2, 0, (2, 3), 4)
    assert initial_state(ASSIGNMENT, set(), 4) is None
