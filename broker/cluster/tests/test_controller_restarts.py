"""The controller and a broker that restarted after an unclean shutdown (docs/simulation.md,
finding 5): it may have lost what it had not flushed, so it does not lead again while another
in-sync replica, dead for now, may hold those records."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.broker.metadata.cache import ClusterView
from strom.broker.zk.controller import Controller
from strom.broker.zk.zkclient import ControllerLease, VersionedPartitionState
from strom.broker.zk.zkdata import NO_LEADER, BrokerIdZNode, BrokerInfo, EndPoint, PartitionState, TopicAssignment

STATE_ZXID = 100  # the partition state was written before the restart ...
REGISTRATION_ZXID = 200  # ... and broker 2 registered after it


class RecordingZk:
    def __init__(self) -> None:
        self.controller_lease = ControllerLease(broker_id=2, epoch=7, epoch_zk_version=0)
        self.written: list[PartitionState] = []

    async def set_partition_state(self, topic: str, partition: int, state: PartitionState, version: int) -> None:
        self.written.append(state)


def view(isr: tuple[int, ...], live: set[int], unclean_starts: set[int]) -> ClusterView:
    state = PartitionState(leader=2, leader_epoch=1, isr=isr, controller_epoch=6)
    return ClusterView(
        brokers={b: None for b in live},  # type: ignore[misc]
        broker_epochs={b: REGISTRATION_ZXID if b == 2 else 1 for b in live},
        unclean_starts=unclean_starts,
        assignments={"t": TopicAssignment({0: (2, 3, 1)})},
        states={("t", 0): VersionedPartitionState(state, zk_version=3, mzxid=STATE_ZXID)},
    )


async def repaired(v: ClusterView) -> PartitionState:
    zk = RecordingZk()
    member = SimpleNamespace(zk=zk, config={"unclean.leader.election.enable": False})
    assert await Controller(member).reconcile(v)  # type: ignore[arg-type]
    (state,) = zk.written
    return state


async def test_a_leader_back_from_an_unclean_shutdown_waits_for_the_in_sync_replica_that_is_down():
    """Seed 30196: broker 2 led with ISR [2, 3], lost its page cache in a crash and came back while
    broker 3 was down; elected again, it led without the records only broker 3 still had."""
    state = await repaired(view(isr=(2, 3), live={2}, unclean_starts={2}))
    assert state.leader == NO_LEADER
    assert state.isr == (3,)
    assert state.leader_epoch == 2


async def test_a_leader_back_from_a_clean_shutdown_leads_again_in_a_new_epoch():
    state = await repaired(view(isr=(2, 3), live={2}, unclean_starts=set()))
    assert (state.leader, state.leader_epoch, state.isr) == (2, 2, (2,))


async def test_the_last_in_sync_replica_leads_again_even_after_an_unclean_shutdown():
    state = await repaired(view(isr=(2,), live={2}, unclean_starts={2}))
    assert (state.leader, state.leader_epoch, state.isr) == (2, 2, (2,))


async def test_another_live_in_sync_replica_takes_over_from_one_back_from_an_unclean_shutdown():
    state = await repaired(view(isr=(2, 3), live={2, 3}, unclean_starts={2}))
    assert (state.leader, state.isr) == (3, (3,))


async def test_with_no_in_sync_replica_alive_the_whole_isr_stays_eligible():
    """Seeds 50116 (sim finding 11): every broker down at once, no controller alive to shrink the
    ISR one death at a time. The controller that came back removed the dead members in list order
    and kept the last, which could be the first to die, one that lost its page cache; elected when
    it returned, it led without records the others held. Now the ISR stays whole."""
    state = await repaired(view(isr=(2, 3), live={1}, unclean_starts=set()))
    assert (state.leader, state.isr) == (NO_LEADER, (2, 3))
    state = await repaired(view(isr=(3, 2), live={1}, unclean_starts=set()))
    assert (state.leader, state.isr) == (NO_LEADER, (3, 2))


async def offline_then(isr: tuple[int, ...], back: int, unclean: bool) -> PartitionState:
    """A partition offline with ``isr`` (no leader) when broker ``back`` registers again."""
    state = PartitionState(leader=NO_LEADER, leader_epoch=4, isr=isr, controller_epoch=6)
    return await repaired(
        ClusterView(
            brokers={1: None, back: None},  # type: ignore[misc]
            broker_epochs={1: 1, back: REGISTRATION_ZXID},
            unclean_starts={back} if unclean else set(),
            assignments={"t": TopicAssignment({0: (2, 3, 1)})},
            states={("t", 0): VersionedPartitionState(state, zk_version=3, mzxid=STATE_ZXID)},
        )
    )


async def test_an_offline_partition_waits_for_the_in_sync_replicas_that_kept_their_records():
    # back after an unclean shutdown: it leaves the ISR while another member may hold more
    state = await offline_then((2, 3), back=2, unclean=True)
    assert (state.leader, state.isr) == (NO_LEADER, (3,))
    # back after a clean one: it has everything it ever acknowledged, and leads
    state = await offline_then((2, 3), back=2, unclean=False)
    assert (state.leader, state.isr) == (2, (2,))
    # the last member leads whatever its shutdown was (after one more round, as today)
    state = await offline_then((3,), back=3, unclean=True)
    assert (state.leader, state.isr) == (NO_LEADER, (3,))


@pytest.mark.parametrize("unclean", [True, False])
def test_the_registration_says_whether_the_broker_started_after_an_unclean_shutdown(unclean):
    info = BrokerInfo(2, (EndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),), unclean_shutdown=unclean)
    data = BrokerIdZNode.encode(info)
    assert (b"unclean_shutdown" in data) is unclean  # a clean start writes Kafka's JSON unchanged
    assert BrokerIdZNode.decode(2, data).unclean_shutdown is unclean
