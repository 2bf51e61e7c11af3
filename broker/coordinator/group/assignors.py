"""The server-side assignors of KIP-848 consumer groups (Kafka's `group.consumer.assignors`).

An assignor maps members (each with the topic names it subscribes to) and the subscribed topics to
a target assignment, given what each member holds now: `uniform` (Kafka's UniformAssignor:
balanced, and sticky to what members hold) and `range` (Kafka's RangeAssignor: per topic,
consecutive ranges in member order). The client-side assignors of classic groups (range,
roundrobin, sticky, cooperative-sticky) run in the group leader, never here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

from strom.broker.coordinator.runtime import TopicMetadata

Assignment = dict[bytes, set[int]]  # topic id -> partitions
TopicMeta: TypeAlias = TopicMetadata  # a subscribed topic: name, id, partition count


Assignor = Callable[[Mapping[str, set[str]], Mapping[str, TopicMeta], Mapping[str, Assignment]], dict[str, Assignment]]


def uniform_assign(
    members: Mapping[str, set[str]], topics: Mapping[str, TopicMeta], current: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    """Balanced and sticky: each member keeps what it has while under its share; the rest goes,
    partition by partition, to the least loaded member subscribed to the topic."""
    out: dict[str, Assignment] = {m: {} for m in members}
    if not members:
        return out
    by_id = {t.topic_id: t for t in topics.values()}
    wanted = [
        (topics[name].topic_id, p)
        for name in sorted(topics)
        for p in range(topics[name].partitions)
        if any(name in subs for subs in members.values())
    ]
    eligible = {tp: sorted(m for m, subs in members.items() if by_id[tp[0]].name in subs) for tp in wanted}
    # each member keeps up to its share (floor; `extra` of them one more), the rest is handed out
    base, extra = divmod(len(wanted), len(members))
    load = {m: 0 for m in members}
    taken = set()
    for quota in (base, base + 1):
        for member in sorted(members):
            for topic_id, parts in sorted((current.get(member) or {}).items()):
                for p in sorted(parts):
                    tp = (topic_id, p)
                    if (
                        tp in eligible
                        and member in eligible[tp]
                        and tp not in taken
                        and load[member] < quota
                        and (quota == base or extra > 0)
                    ):
                        out[member].setdefault(topic_id, set()).add(p)
                        load[member] += 1
                        taken.add(tp)
                        if quota > base:
                            extra -= 1
    owner: dict[tuple[bytes, int], str] = {}
    for member, assignment in out.items():
        for topic_id, parts in assignment.items():
            owner.update(((topic_id, p), member) for p in parts)
    for tp in wanted:
        if tp in taken:
            continue
        member = min(eligible[tp], key=lambda m: (load[m], m))
        out[member].setdefault(tp[0], set()).add(tp[1])
        load[member] += 1
        owner[tp] = member
    # With subscriptions that differ, the shares above can leave a member that subscribes only to
    # topics others hold with nothing (m1 on a+b keeps all three partitions, m2 on a alone gets
    # none). Move a partition from a member to another subscriber of its topic holding at least two
    # fewer until none can move; each move lowers the sum of squared loads, so this ends.
    moved = True
    while moved:
        moved = False
        for tp in wanted:
            giver = owner[tp]
            taker = min(eligible[tp], key=lambda m: (load[m], m))
            if load[taker] + 1 < load[giver]:
                out[giver][tp[0]].discard(tp[1])
                if not out[giver][tp[0]]:
                    del out[giver][tp[0]]
                out[taker].setdefault(tp[0], set()).add(tp[1])
                load[giver] -= 1
                load[taker] += 1
                owner[tp] = taker
                moved = True
    return out


def range_assign(
    members: Mapping[str, set[str]], topics: Mapping[str, TopicMeta], current: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    """Per topic, consecutive ranges of partitions to the members subscribed to it, in member order."""
    out: dict[str, Assignment] = {m: {} for m in members}
    for name in sorted(topics):
        meta = topics[name]
        subscribers = sorted(m for m, subs in members.items() if name in subs)
        if not subscribers:
            continue
        per, extra = divmod(meta.partitions, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            count = per + (1 if i < extra else 0)
            if count:
                out[member][meta.topic_id] = set(range(start, start + count))
            start += count
    return out


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def parse_assignors(value: str) -> list[str]:
    """`group.consumer.assignors`: short names or Kafka's class names, in preference order."""
    names = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name = ASSIGNOR_CLASSES.get(item, item)
        if name not in ASSIGNORS:
            raise ValueError(f"unknown assignor {item!r} (known: uniform, range)")
        names.append(name)
    if not names:
        raise ValueError("at least one assignor is needed")
    return names
