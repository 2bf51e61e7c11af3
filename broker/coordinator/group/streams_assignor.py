"""The task assignor of streams groups (KIP-1071): Kafka's server-side `sticky` task assignor.

A task is a (subtopology id, partition) pair. The assignor spreads a group's tasks over its
members: every task active on exactly one member, balanced (no member more than one active task
above another), sticky (a task stays with the member that had it, while that keeps the balance),
and with ``num_standby_replicas`` standby copies of each task on members of *other* processes
(a process, one Kafka Streams instance, may run several members, one per stream thread), preferring
members that already hold the task's state (a previous standby or active copy).

Pure: no clocks, no I/O; deterministic for the same input (ties go to the smaller member id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Task = tuple[str, int]  # subtopology id, partition


@dataclass(frozen=True)
class AssignorMember:
    """What the assignor knows of a member: its process and the tasks it holds now."""

    process_id: str
    active: frozenset[Task] = frozenset()
    standby: frozenset[Task] = frozenset()
    warmup: frozenset[Task] = frozenset()


@dataclass
class TaskAssignment:
    """One member's target: active, standby and warm-up tasks."""

    active: set[Task] = field(default_factory=set)
    standby: set[Task] = field(default_factory=set)
    warmup: set[Task] = field(default_factory=set)


def all_tasks(partitions_by_subtopology: Mapping[str, int]) -> list[Task]:
    """Every task of a configured topology, in order."""
    return [(sub, p) for sub in sorted(partitions_by_subtopology) for p in range(partitions_by_subtopology[sub])]


def sticky_assign(
    members: Mapping[str, AssignorMember], tasks: Iterable[Task], num_standby_replicas: int = 0
) -> dict[str, TaskAssignment]:
    """Kafka's sticky task assignment of ``tasks`` over ``members`` (member id -> what it holds)."""
    result = {member_id: TaskAssignment() for member_id in members}
    # by partition, then subtopology, as Kafka's assignor goes through them: the same partition of
    # each subtopology stays together where the balance allows
    tasks = sorted(set(tasks), key=lambda t: (t[1], t[0]))
    if not members:
        return result
    # balance: every member gets `base` active tasks, `extra` of them one more
    base, extra = divmod(len(tasks), len(members))
    above_base = 0
    load = dict.fromkeys(members, 0)
    process_load: dict[str, int] = {}
    for spec in members.values():
        process_load[spec.process_id] = 0

    def has_room(member_id: str) -> bool:
        return load[member_id] < base or (load[member_id] == base and above_base < extra)

    def give(member_id: str, task: Task) -> None:
        nonlocal above_base
        if load[member_id] == base:
            above_base += 1
        result[member_id].active.add(task)
        load[member_id] += 1
        process_load[members[member_id].process_id] += 1

    # 1. sticky: a task stays active where it was, while that keeps the balance
    unassigned: list[Task] = []
    for task in tasks:
        owners = sorted((load[m], m) for m, spec in members.items() if task in spec.active)
        if owners and has_room(owners[0][1]):
            give(owners[0][1], task)
        else:
            unassigned.append(task)
    # 2. the rest to the least loaded member, preferring one that holds the task's state
    for task in unassigned:

        def rank(member_id: str, task: Task = task) -> tuple[int, int, int, str]:
            spec = members[member_id]
            warm = 0 if task in spec.standby or task in spec.warmup else 1
            return (load[member_id], warm, process_load[spec.process_id], member_id)

        give(min(members, key=rank), task)
    # 3. standby copies, each on a process that has no copy of the task yet
    if num_standby_replicas > 0:
        standby_load = dict.fromkeys(members, 0)
        owner = {task: m for m, a in result.items() for task in a.active}
        for task in tasks:
            holding = {members[owner[task]].process_id}
            for _ in range(num_standby_replicas):
                candidates = [m for m, spec in members.items() if spec.process_id not in holding]
                if not candidates:
                    break  # fewer processes than copies: Kafka assigns what it can

                def standby_rank(member_id: str, task: Task = task) -> tuple[int, int, str]:
                    spec = members[member_id]
                    warm = 0 if task in spec.standby or task in spec.active or task in spec.warmup else 1
                    return (warm, standby_load[member_id] + load[member_id], member_id)

                chosen = min(candidates, key=standby_rank)
                result[chosen].standby.add(task)
                standby_load[chosen] += 1
                holding.add(members[chosen].process_id)
    return result
