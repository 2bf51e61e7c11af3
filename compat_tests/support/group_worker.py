"""A confluent-kafka group member run as its own process by test_groups.py, so it can be killed.

argv: bootstrap group topic assignment-strategy instance-id|- stop-file. Writes to stdout one line
per event: ``A 0,1`` (assigned), ``R 0,1`` (revoked), ``M <partition> <offset>`` per record.
Commits automatically; closes (leaving the group) when the stop file appears.
"""

from __future__ import annotations

import os
import sys

from confluent_kafka import Consumer


def _parts(partitions) -> str:
    return ",".join(str(p.partition) for p in partitions)


def main() -> None:
    bootstrap, group, topic, strategy, instance, stop_file = sys.argv[1:7]
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 200,
        "partition.assignment.strategy": strategy,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if instance != "-":
        conf["group.instance.id"] = instance
    consumer = Consumer(conf)
    out = sys.stdout

    def on_assign(_c, partitions):
        out.write(f"A {_parts(partitions)}\n")
        out.flush()

    def on_revoke(_c, partitions):
        out.write(f"R {_parts(partitions)}\n")
        out.flush()

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not os.path.exists(stop_file):
        lines = [f"M {m.partition()} {m.offset()}\n" for m in consumer.consume(1000, 0.2) if not m.error()]
        if lines:
            out.write("".join(lines))
            out.flush()
    consumer.close()


if __name__ == "__main__":
    main()
