"""A consume-transform-produce worker run as its own process by test_exactly_once_pipeline.py, so the
nemesis can kill it in the middle of a transaction.

argv: bootstrap group input-topic output-topic transactional-id stop-file max-batch in-txn-delay-s.
Reads ``input-topic`` read_committed in consumer group ``group`` and copies every record (key, value)
to the same partition of ``output-topic`` in one transaction per batch, whose offsets it commits with
send_offsets_to_transaction. Writes its history to stdout, one line per event::

    S                          transactions initialised (the previous instance is fenced)
    A 0,1 / R 0,1              partitions assigned / revoked
    B <n> p:first-last ...     a transaction began with these input offsets
    W <n>                      its records are written (flushed), the transaction not ended
    O <n>                      its offsets are sent (send_offsets_to_transaction returned)
    C <n>                      commit_transaction returned: transaction n is committed
    X <n> <error>              transaction n was aborted (abortable error); positions rewound
    E <error>                  an error it cannot go on from: it closes and exits with 3
                               (the test starts a new instance with the same transactional id)
Each line ends with the wall-clock time (``@HH:MM:SS.mmm``). Exits 0 when the stop file appears.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

TIMEOUT_S = 30


def _parts(partitions) -> str:
    return ",".join(str(p.partition) for p in partitions)


def main() -> int:
    bootstrap, group, source, sink, tid, stop_file, max_batch, delay = sys.argv[1:9]
    max_batch, delay = int(max_batch), float(delay)
    out = sys.stdout

    def say(line: str) -> None:
        now = time.time()
        out.write(f"{line} @{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now * 1000) % 1000:03d}\n")
        out.flush()

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "linger.ms": 5,
            "transaction.timeout.ms": 20000,
            "message.timeout.ms": 20000,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )

    def rewind() -> None:
        """After an abort: back to the group's committed offsets of every assigned partition."""
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.committed(assigned, TIMEOUT_S):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    try:
        producer.init_transactions(TIMEOUT_S)
        say("S")
        consumer.subscribe(
            [source], on_assign=lambda _c, ps: say(f"A {_parts(ps)}"), on_revoke=lambda _c, ps: say(f"R {_parts(ps)}")
        )
        n = 0
        while not os.path.exists(stop_file):
            batch = [m for m in consumer.consume(max_batch, 0.5) if not m.error()]
            if not batch:
                continue
            n += 1
            ranges: dict[int, list[int]] = {}
            for m in batch:
                ranges.setdefault(m.partition(), []).append(m.offset())
            say(f"B {n} " + " ".join(f"{p}:{min(o)}-{max(o)}" for p, o in sorted(ranges.items())))
            try:
                producer.begin_transaction()
                for m in batch:
                    producer.produce(sink, m.value(), m.key(), partition=m.partition())
                if producer.flush(TIMEOUT_S) == 0:
                    say(f"W {n}")
                time.sleep(delay)  # a window for the nemesis: data written, nothing ended
                offsets = [TopicPartition(source, p, max(o) + 1) for p, o in ranges.items()]
                producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), TIMEOUT_S)
                say(f"O {n}")
                producer.commit_transaction(TIMEOUT_S)
                say(f"C {n}")
            except KafkaException as exc:
                error = exc.args[0]
                if not error.txn_requires_abort():
                    raise
                producer.abort_transaction(TIMEOUT_S)
                say(f"X {n} {error.name()}")
                rewind()
        consumer.close()
        return 0
    except KafkaException as exc:
        say(f"E {exc.args[0].name()} {exc.args[0].str()}")
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass
        return 3


if __name__ == "__main__":
    sys.exit(main())
