"""Issue 21 on three Strom brokers and a real ZooKeeper: a follower whose log holds an epoch the
leader never had truncates it (leader epochs, KIP-101/KIP-279), ends with exactly the leader's
log and rejoins the ISR; leadership moving over an idle partition leaves no replica outside it."""

from __future__ import annotations

from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition

from compat_tests.support.cluster import (
    admin,
    bootstrap,
    cluster_fixture,
    create,
    partition_meta,
    wait,
    wait_full_isr,
)

cluster = cluster_fixture()

REJOIN_S = 40  # bounded waits: a ZooKeeper session timeout (4 s), restarts, a few fetches


def _produce(
    brokers, topic: str, values: list[bytes], acks: str, timeout_s: float = 30, one_per_batch: bool = False
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "acks": acks,
            "enable.idempotence": False,
            "message.timeout.ms": int(timeout_s * 1000),
        }
    )
    errors = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: errors.append(err))
        if one_per_batch:
            producer.flush(timeout_s + 10)
    producer.flush(timeout_s + 10)
    assert len(errors) == len(values) and not any(errors), errors


def _read(brokers, topic: str, expected: int, timeout_s: float = 30) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of partition 0 from offset 0, read from its leader."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(brokers), "group.id": "truncation-check", "enable.auto.commit": False}
    )
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        wait(
            lambda: (
                out.extend((m.offset(), m.value()) for m in consumer.consume(1000, 1) if not m.error())
                or len(out) >= expected
            ),
            timeout_s,
            f"{expected} records of {topic}",
        )
    finally:
        consumer.close()
    return out


def _leader(brokers, topic: str, not_in: tuple[int, ...] = (-1,), timeout_s: float = REJOIN_S) -> int:
    running = [b for b in brokers if b.running]
    return wait(
        lambda: (lambda p: [p.leader] if p.leader not in not_in else None)(partition_meta(running, topic)),
        timeout_s,
        f"a leader of {topic} not in {not_in}",
    )[0]


def _replicas(cluster, topic: str) -> list[int]:
    """The partition's replicas, asked again while a broker that has not yet heard of the new topic
    answers without them (LEADER_NOT_AVAILABLE and no replicas: an IndexError in a CI run)."""
    return wait(lambda: list(partition_meta(cluster, topic).replicas) or None, REJOIN_S, f"the replicas of {topic}")


def _elect_preferred(cluster, topic: str, preferred: int) -> None:
    client = admin(cluster)  # kept alive until its future completes
    result = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=30)
    assert all(err is None for err in result.values()), result
    wait(lambda: partition_meta(cluster, topic).leader == preferred, 20, f"{preferred} to lead {topic}")


def test_an_idle_partition_keeps_every_replica_in_the_isr_while_its_leadership_moves(cluster):
    """The replica that leads an epoch of an idle partition records that epoch's start and appends
    nothing; when the preferred replica takes the lead back it follows again, reporting that
    epoch, which the new leader never had. It must truncate it away and be in sync again: with
    min.insync.replicas=3, acks=all produces succeed and the ISR is whole after every move (it
    was told it diverged at every fetch, left the ISR and never came back)."""
    topic = "idle-moves"
    create(cluster, topic, 1, configs={"min.insync.replicas": "3"})
    wait_full_isr(cluster, topic)
    preferred = _replicas(cluster, topic)[0]
    _produce(cluster, topic, [b"a%d" % i for i in range(10)], acks="all")
    for round_ in range(3):
        leader = _leader(cluster, topic)
        cluster[leader].kill()
        _leader(cluster, topic, not_in=(-1, leader))
        cluster[leader].start()
        wait_full_isr(cluster, topic, timeout_s=REJOIN_S)
        _elect_preferred(cluster, topic, preferred)
        _produce(cluster, topic, [b"r%d" % round_], acks="all")
        wait_full_isr(cluster, topic, timeout_s=REJOIN_S)
    assert [v for _, v in _read(cluster, topic, 13)] == [b"a%d" % i for i in range(10)] + [b"r0", b"r1", b"r2"]


def test_a_follower_with_records_of_an_epoch_the_leader_never_had_ends_with_the_leaders_log(cluster):
    """P leads, the others take over (epoch e1) and write records P misses; P alone is elected
    uncleanly (epoch e2) and appends records with acks=1 nobody replicates; then the others take
    over again (e3 > e2) and write more. P comes back holding e2 records at offsets where the leader
    has e1 records. The leader answers P's last epoch e2 with e1 ending at 15, an epoch P never
    had: P must cut at 10, where its own epoch 0 ends (cutting at 15 kept its e2 records 10-14 and
    got the same answer at every fetch, outside the ISR for ever). P then rejoins the ISR and, made
    leader again, serves exactly the records the others had."""
    topic = "diverged"
    create(cluster, topic, 1, configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"})
    wait_full_isr(cluster, topic)
    p = _leader(cluster, topic)
    assert p == _replicas(cluster, topic)[0]
    others = [b for b in range(3) if b != p]
    _produce(cluster, topic, [b"a%d" % i for i in range(10)], acks="all")

    cluster[p].kill()  # the others lead (e1) and both get 5 records P never sees
    _leader(cluster, topic, not_in=(-1, p))
    wait(
        lambda: sorted(partition_meta([cluster[b] for b in others], topic).isrs) == others,
        REJOIN_S,
        "the ISR without P",
    )
    _produce(cluster, topic, [b"b%d" % i for i in range(5)], acks="all")

    for b in others:  # P alone, elected uncleanly (e2): 8 records with acks=1, never replicated
        cluster[b].kill()
    cluster[p].start()
    assert _leader(cluster, topic, not_in=(-1, *others)) == p
    # one batch each: a truncation inside one batch would drop it whole, and all of them with it
    _produce(cluster, topic, [b"x%d" % i for i in range(8)], acks="1", one_per_batch=True)

    cluster[p].kill()  # the others again (e3): they keep their e1 records and add 2
    for b in others:
        cluster[b].start()
    _leader(cluster, topic, not_in=(-1, p))
    _produce(cluster, topic, [b"c%d" % i for i in range(2)], acks="all")
    expected = _read(cluster, topic, 17)
    assert [v for _, v in expected] == (
        [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(5)] + [b"c0", b"c1"]
    )

    cluster[p].start()
    wait_full_isr(cluster, topic, timeout_s=REJOIN_S)
    _elect_preferred(cluster, topic, p)
    assert _read(cluster, topic, 17) == expected
