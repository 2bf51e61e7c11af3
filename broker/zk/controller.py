"""The controller: one broker at a time keeps every partition's leader and ISR right.

Whoever creates the ephemeral `/controller` znode first is the controller; its epoch (from
`/controller_epoch`) fences every partition-state write, so a deposed controller cannot
overwrite a newer one's decisions. Each time anything changes (a broker joins or leaves, a topic
or partition appears, a deletion is requested) it reconciles the whole cluster against ZooKeeper:

- a partition without a state gets one: the first live replica leads, all live replicas in sync;
- a partition whose leader is gone gets a new leader from the live ISR (or, when the topic
  allows unclean election, any live replica), with the leader epoch bumped;
- dead brokers leave every ISR;
- a broker registered anew since its partition's state was written (restarted, or back after its
  ZooKeeper session expired: a new broker epoch, Kafka's bounced broker) is treated as one that
  failed and came back: leadership it held moves to another live in-sync replica, or, when it is
  the only one, it is elected again in a new leader epoch; it leaves the ISR of partitions others
  lead (it may have lost what it had not flushed, and rejoins once caught up);
- such a broker that started after an unclean shutdown (its registration says so, KIP-966's clean
  shutdown detection) is not elected again while another ISR member, dead for now, may hold the
  records it lost: it leaves the ISR and the partition waits for that member (unless it is the
  last ISR member, which has nobody to wait for);
- replicas in a broker's failed log dir (``/log_dir_event_notification``) count as dead for
  their partitions: leadership moves away from them and they leave the ISR;
- topics marked for deletion lose their znodes (brokers then delete their logs).
Brokers learn the outcome from the partition-state znodes they watch.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING

from strom.broker.zk.election import Strategy, elect_leader, initial_state, leader_lost, remove_replica_from_isr
from strom.broker.zk.zkclient import (
    ControllerMovedError,
    PartitionStateConflictError,
    VersionedPartitionState,
    ZkClientError,
)
from strom.broker.zk.zkdata import NO_LEADER, PartitionState, TopicAssignment
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.cluster.member import ClusterMember
    from strom.broker.metadata.cache import ClusterView

log = logging.getLogger("strom.controller")


def _log_elected(topic: str, partition: int, state: PartitionState, unclean: bool) -> None:
    log.info(
        "elected leader topic=%s partition=%d leader=%d epoch=%d isr=%s%s",
        topic,
        partition,
        state.leader,
        state.leader_epoch,
        list(state.isr),
        " (unclean)" if unclean else "",
    )


class Controller:
    def __init__(self, member: ClusterMember):
        self.member = member

    @property
    def epoch(self) -> int | None:
        lease = self.member.zk.controller_lease
        return lease.epoch if lease is not None else None

    async def reconcile(self, view: ClusterView) -> bool:
        """One pass over the cluster; True if it wrote anything (callers re-read and go again)."""
        epoch = self.epoch
        if epoch is None:
            return False
        zk = self.member.zk
        live = set(view.brokers)
        wrote = False
        for name in view.to_delete:
            log.info("deleting topic=%s", name)
            await zk.delete_topic_znodes(name)
            wrote = True
        for name, assignment in view.assignments.items():
            if name in view.to_delete:
                continue
            unclean = view.unclean_allowed(name, self.member.config["unclean.leader.election.enable"])
            missing = {}
            for partition, replicas in assignment.partitions.items():
                current = view.states.get((name, partition))
                # a replica in a failed log dir counts as dead for its partition (Kafka's
                # log dir failure handling): leadership moves away, it leaves the ISR
                usable = live - view.offline_replicas.get((name, partition), set())
                if current is None:
                    state = initial_state(replicas, usable, epoch)
                    if state is not None:
                        missing[partition] = state
                    continue
                bounced = self._bounced(view, current, usable)
                wrote |= await self._repair(
                    name, partition, replicas, current, usable, epoch, unclean, bounced, bounced & view.unclean_starts
                )
            if missing:
                log.info("creating partition states topic=%s partitions=%s", name, sorted(missing))
                await zk.create_partition_states(name, missing)
                wrote = True
        wrote |= await self.progress_reassignments(view)
        return wrote

    @staticmethod
    def _bounced(view: ClusterView, current: VersionedPartitionState, live: set[int]) -> set[int]:
        """Live replicas of the partition registered after its state was last written: the state
        named an earlier life of theirs (Kafka's bounced brokers)."""
        state = current.state
        named = {state.leader, *state.isr} & live
        return {b for b in named if view.broker_epochs.get(b, 0) > current.mzxid}

    async def _repair(
        self,
        topic: str,
        partition: int,
        replicas: list[int],
        current: VersionedPartitionState,
        live: set[int],
        epoch: int,
        unclean: bool,
        bounced: AbstractSet[int] = frozenset(),
        lossy: AbstractSet[int] = frozenset(),
    ) -> bool:
        """``bounced``: live replicas registered after the state was written; ``lossy``: those of
        them that started after an unclean shutdown (what they had not flushed may be gone)."""
        state = current.state
        new = None
        if state.leader in bounced:
            # as a failure and a start: another live in-sync replica leads; else it leads again in
            # a new epoch (never in the epoch its earlier life led, whose records it may have lost),
            # unless it lost its unflushed records while another ISR member may still hold them
            election = elect_leader(Strategy.OFFLINE, state, replicas, live - bounced, epoch) or elect_leader(
                Strategy.OFFLINE, state, replicas, live - lossy, epoch
            )
            if election is None and (state.leader not in lossy or state.isr == (state.leader,)):
                election = elect_leader(Strategy.OFFLINE, state, replicas, live, epoch)
            if election is None and state.leader in lossy:
                new = remove_replica_from_isr(state, state.leader, epoch)
                log.warning(
                    "partition offline topic=%s partition=%d: leader %d restarted after an unclean shutdown; "
                    "waiting for in-sync replicas %s",
                    topic,
                    partition,
                    state.leader,
                    [r for r in state.isr if r != state.leader],
                )
            elif election is not None:
                new = election.state
                log.info(
                    "re-elected leader topic=%s partition=%d leader=%d epoch=%d isr=%s: broker %d registered anew",
                    topic,
                    partition,
                    new.leader,
                    new.leader_epoch,
                    list(new.isr),
                    state.leader,
                )
        elif state.leader == NO_LEADER and (
            back := elect_leader(Strategy.OFFLINE, state, replicas, live - lossy, epoch)
        ):
            # offline, and an in-sync replica is back that kept everything it had written
            new = back.state
            _log_elected(topic, partition, new, back.unclean)
        elif bounced - {state.leader}:
            new = state
            for replica in sorted(bounced - {state.leader}):
                new = remove_replica_from_isr(new, replica, epoch) or new
        elif state.leader == NO_LEADER or state.leader not in live:
            election = elect_leader(Strategy.OFFLINE, state, replicas, live, epoch, unclean=unclean)
            if election is not None:
                new = election.state
                _log_elected(topic, partition, new, election.unclean)
            elif state.leader != NO_LEADER:
                # the ISR stays whole (sim finding 11): the first of its members back that did not
                # lose its unflushed tail leads; one that did leaves the ISR while others remain
                new = leader_lost(state, epoch)
                log.warning("partition offline topic=%s partition=%d: no live in-sync replica", topic, partition)
        else:
            dead = [r for r in state.isr if r not in live]
            if dead:
                new = state
                for replica in dead:
                    new = remove_replica_from_isr(new, replica, epoch) or new
        if new is None or new == state:
            return False
        try:
            await self.member.zk.set_partition_state(topic, partition, new, current.zk_version)
        except PartitionStateConflictError:
            log.debug("partition state of %s-%d changed meanwhile; will re-read", topic, partition)
        except ControllerMovedError:
            log.info("no longer the controller")
            return False
        except ZkClientError as exc:
            log.warning("writing partition state %s-%d failed: %s", topic, partition, exc)
        return True

    async def elect_leaders(
        self, wanted: list[tuple[str, int]] | None, unclean: bool
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders on the controller: the preferred replica (`unclean` False) or, for a
        partition without a live leader, any live replica. `wanted` None: every partition, and
        partitions that need no election are left out of the answer, as Kafka does."""
        view = await self.member.read_view()
        epoch = self.epoch
        live = set(view.brokers)
        if wanted is None:
            targets = [(t, p) for t, a in view.assignments.items() if t not in view.to_delete for p in a.partitions]
        else:
            targets = wanted
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic, partition in targets:
            assignment = view.assignments.get(topic)
            replicas = assignment.partitions.get(partition) if assignment is not None else None
            current = view.states.get((topic, partition))
            if replicas is None or current is None or topic in view.to_delete:
                results[(topic, partition)] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"The partition {topic}-{partition} does not exist.",
                )
                continue
            state = current.state
            if unclean:
                if state.leader != NO_LEADER and state.leader in live:
                    results[(topic, partition)] = (ErrorCode.ELECTION_NOT_NEEDED, None)
                    continue
                election = elect_leader(Strategy.OFFLINE, state, replicas, live, epoch, unclean=True)
                if election is None:
                    results[(topic, partition)] = (
                        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        f"No live replica of {topic}-{partition} can lead.",
                    )
                    continue
            else:
                if replicas and state.leader == replicas[0]:
                    results[(topic, partition)] = (ErrorCode.ELECTION_NOT_NEEDED, None)
                    continue
                election = elect_leader(Strategy.PREFERRED, state, replicas, live, epoch)
                if election is None:
                    results[(topic, partition)] = (
                        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {topic}-{partition} under strategy "
                        f"PreferredReplicaPartitionLeaderElectionStrategy",
                    )
                    continue
            try:
                await self.member.zk.set_partition_state(topic, partition, election.state, current.zk_version)
            except (PartitionStateConflictError, ControllerMovedError, ZkClientError) as exc:
                log.info("leader election for %s-%d not written: %s", topic, partition, exc)
                results[(topic, partition)] = (
                    ErrorCode.NOT_CONTROLLER if isinstance(exc, ControllerMovedError) else ErrorCode.REQUEST_TIMED_OUT,
                    str(exc) or None,
                )
                continue
            log.info(
                "elected leader topic=%s partition=%d leader=%d epoch=%d (%s election requested)",
                topic,
                partition,
                election.state.leader,
                election.state.leader_epoch,
                "unclean" if unclean else "preferred",
            )
            results[(topic, partition)] = (ErrorCode.NONE, None)
        if any(code == ErrorCode.NONE for code, _ in results.values()):
            self.member.mark_dirty()
        if wanted is None:
            results = {k: v for k, v in results.items() if v[0] != ErrorCode.ELECTION_NOT_NEEDED}
        return results

    # ----------------------------------------------------------------- reassignments
    async def alter_reassignments(
        self, wanted: list[tuple[str, int, list[int] | None]]
    ) -> list[tuple[str, int, ErrorCode, str | None]]:
        """AlterPartitionReassignments: record the target replicas of each partition in its
        topic znode (adding/removing replicas, as Kafka does); None cancels a reassignment.
        `progress_reassignments` then carries them out as the new replicas catch up."""
        view = await self.member.read_view()
        live = set(view.brokers)
        from strom.broker.metadata.placement import reassignment_target_error

        results: list[tuple[str, int, ErrorCode, str | None]] = []
        changed: dict[str, TopicAssignment] = {}
        for topic, partition, target in wanted:
            assignment = changed.get(topic) or view.assignments.get(topic)
            if assignment is None or topic in view.to_delete:
                results.append(
                    (topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}.")
                )
                continue
            if partition not in assignment.partitions:
                results.append(
                    (
                        topic,
                        partition,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Unable to find partition {topic}:{partition}.",
                    )
                )
                continue
            replicas = list(assignment.partitions[partition])
            adding = list(assignment.adding_replicas.get(partition, ()))
            removing = list(assignment.removing_replicas.get(partition, ()))
            if target is None:
                if not adding and not removing:
                    results.append((topic, partition, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None))
                    continue
                original = [r for r in replicas if r not in adding]
                new_replicas, new_adding, new_removing = original, [], []
            else:
                problem = reassignment_target_error(list(target), live)
                if problem is not None:
                    results.append((topic, partition, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem))
                    continue
                original = [r for r in replicas if r not in adding]
                if list(target) == original:
                    new_replicas, new_adding, new_removing = original, [], []
                else:
                    new_replicas = list(target) + [r for r in original if r not in target]
                    new_adding = [r for r in target if r not in original]
                    new_removing = [r for r in original if r not in target]
            partitions = dict(assignment.partitions)
            partitions[partition] = tuple(new_replicas)
            add_map = {p: r for p, r in assignment.adding_replicas.items() if p != partition}
            rem_map = {p: r for p, r in assignment.removing_replicas.items() if p != partition}
            if new_adding:
                add_map[partition] = tuple(new_adding)
            if new_removing:
                rem_map[partition] = tuple(new_removing)
            changed[topic] = TopicAssignment(partitions, assignment.topic_id, add_map, rem_map)
            results.append((topic, partition, ErrorCode.NONE, None))
            log.info(
                "reassigning %s-%d: replicas %s -> %s",
                topic,
                partition,
                replicas,
                new_replicas if not new_removing else [r for r in new_replicas if r not in new_removing],
            )
        for topic, assignment in changed.items():
            try:
                await self.member.zk.set_topic_assignment(topic, assignment)
            except ZkClientError as exc:
                results = [
                    (t, p, ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {exc}")
                    if t == topic and code == ErrorCode.NONE
                    else (t, p, code, m)
                    for t, p, code, m in results
                ]
        if changed:
            self.member.mark_dirty()
        return results

    async def progress_reassignments(self, view: ClusterView) -> bool:
        """Finish reassignments whose target replicas are all in sync: leadership to a target
        replica, the removed replicas out of the ISR (leader epoch bumped), then out of the
        assignment. True if anything was written."""
        epoch = self.epoch
        if epoch is None:
            return False
        zk = self.member.zk
        live = set(view.brokers)
        wrote = False
        for name, assignment in view.assignments.items():
            if name in view.to_delete or not (assignment.adding_replicas or assignment.removing_replicas):
                continue
            done: dict[int, tuple[int, ...]] = {}
            for p in sorted(set(assignment.adding_replicas) | set(assignment.removing_replicas)):
                removing = set(assignment.removing_replicas.get(p, ()))
                target = tuple(r for r in assignment.partitions.get(p, ()) if r not in removing)
                current = view.states.get((name, p))
                if current is None or not target:
                    continue
                state = current.state
                if not all(r in state.isr for r in target):
                    continue  # the new replicas are still catching up
                isr = tuple(r for r in state.isr if r in target)
                leader = state.leader
                if leader not in target or leader not in live:
                    leader = next((r for r in target if r in live and r in isr), None)
                    if leader is None:
                        continue
                if (leader, isr) != (state.leader, state.isr):
                    new = replace(
                        state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr, controller_epoch=epoch
                    )
                    try:
                        await zk.set_partition_state(name, p, new, current.zk_version)
                    except (PartitionStateConflictError, ControllerMovedError, ZkClientError) as exc:
                        log.debug("reassignment of %s-%d: state not written (%s); will retry", name, p, exc)
                        continue
                    wrote = True
                done[p] = target
            if done:
                partitions = dict(assignment.partitions)
                partitions.update(done)
                new_assignment = TopicAssignment(
                    partitions,
                    assignment.topic_id,
                    {p: r for p, r in assignment.adding_replicas.items() if p not in done},
                    {p: r for p, r in assignment.removing_replicas.items() if p not in done},
                )
                await zk.set_topic_assignment(name, new_assignment)
                for p, target in done.items():
                    log.info("reassignment of %s-%d done: replicas %s", name, p, list(target))
                wrote = True
        return wrote
