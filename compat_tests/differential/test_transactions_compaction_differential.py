"""Compaction of transactional data, differentially: the same transactions (commits, aborts, a
tombstone, a producer whose last batch is aborted data) on a compacted topic of Strom and of the
reference Kafka 4.0, each broker's own time-driven cleaner left to run until nothing more can go,
then the results compared: the records read_committed and read_uncommitted consumers see
(offsets, keys, values), the transaction markers left in the log (offset and type), and the
aborted transactions a read_committed fetch from offset 0 is given.

Kafka's cleaner runs on time and on the dirty ratio only, so both brokers are driven the same
way. segment.ms rolls the active segment at the next append, and every round appends a "filler"
record after segment.ms has passed. That record makes the previous segment cleanable and dirty.
The test then waits until the broker's own `cleaner-offset-checkpoint` shows that the pass ran.
With delete.retention.ms=0 every marker that can go is gone after a few rounds. Empty batches
(kept for producer state and at the end of a cleaned range) are not compared: Kafka keeps one
at the end of each cleaning round, Strom one at the end of each cleaned run (FINDINGS).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from compat_tests.support.reference import module_reference
from compat_tests.support.wire import Raw, fetch_partition
from strom.protocol.records.batch import iter_batches, iter_records
from strom.protocol.records.control import ABORT, control_type

TOPIC = "dtc"
SEGMENT_MS = 500
ROUNDS = 5
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    for port, log_dir in module_reference(tmp_path_factory):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        # the cleaner thread's pause between looks at the logs (a dynamic broker config)
        resource = ConfigResource(
            "BROKER",
            "1",
            incremental_configs=[
                ConfigEntry("log.cleaner.backoff.ms", "100", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(TIMEOUT_S)
        yield port, log_dir


def _cleaned_up_to(log_dir: Path) -> int:
    """The topic's first dirty offset in the broker's cleaner-offset-checkpoint (-1 if none)."""
    try:
        lines = (log_dir / "cleaner-offset-checkpoint").read_text().split("\n")
    except OSError:
        return -1
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == TOPIC and parts[1] == "0":
            return int(parts[2])
    return -1


def _scenario(port: int, log_dir: Path) -> dict:
    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [
            NewTopic(
                TOPIC,
                1,
                1,
                config={
                    "cleanup.policy": "compact",
                    "segment.ms": str(SEGMENT_MS),
                    "min.cleanable.dirty.ratio": "0.01",
                    "delete.retention.ms": "0",
                    "min.compaction.lag.ms": "0",
                },
            )
        ]
    )[TOPIC].result(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    producers = {}
    watermarks = {
        isolation: Consumer({"bootstrap.servers": bootstrap, "group.id": "dtc-wm", "isolation.level": isolation})
        for isolation in ("read_committed", "read_uncommitted")
    }

    def txn(tid, pairs, commit=True):
        p = producers.get(tid)
        if p is None:
            p = producers[tid] = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
            p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        for key, value in pairs:
            p.produce(TOPIC, key=key, value=value, partition=0)
            p.flush(TIMEOUT_S)  # one batch per record: the same batches on both brokers
        (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT_S)
        settle()

    def settle():
        """Kafka writes markers after EndTxn is answered: wait until the marker is in (the last
        stable offset reaches the high watermark), so that the next record gets the same offset
        on both brokers."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            committed = watermarks["read_committed"].get_watermark_offsets(TopicPartition(TOPIC, 0), TIMEOUT_S)[1]
            high = watermarks["read_uncommitted"].get_watermark_offsets(TopicPartition(TOPIC, 0), TIMEOUT_S)[1]
            if committed == high:
                return
            assert time.monotonic() < deadline, "the last stable offset did not reach the high watermark"
            time.sleep(0.02)

    def put(key, value):
        plain.produce(TOPIC, key=key, value=value, partition=0)
        plain.flush(TIMEOUT_S)

    txn("dtc-1", [(b"k1", b"a1"), (b"k2", b"a2")])
    txn("dtc-1", [(b"k1", b"x1"), (b"k3", b"x3")], commit=False)
    put(b"k5", b"p5")
    txn("dtc-2", [(b"k2", b"b2")])
    txn("dtc-1", [(b"k1", b"a3")])
    put(b"k5", None)  # a tombstone
    txn("dtc-2", [(b"k4", b"y4")], commit=False)  # dtc-2's last data batch is aborted
    txn("dtc-3", [(b"k6", b"c6")])
    txn("dtc-3", [(b"k6", b"c7")])  # dtc-3's first transaction has no data left
    for n in range(ROUNDS):
        time.sleep(SEGMENT_MS / 1000 + 0.1)
        put(b"filler", b"f%d" % n)  # rolls: the segment before becomes dirty
        end = watermarks["read_uncommitted"].get_watermark_offsets(TopicPartition(TOPIC, 0), TIMEOUT_S)[1]
        deadline = time.monotonic() + TIMEOUT_S
        while _cleaned_up_to(log_dir) < end - 1:
            assert time.monotonic() < deadline, f"the cleaner did not reach offset {end - 1} (round {n})"
            time.sleep(0.05)
    for p in producers.values():
        p.flush(TIMEOUT_S)
    for c in watermarks.values():
        c.close()
    with Raw(port) as raw:
        return _observe(raw)


def _observe(raw: Raw) -> dict:
    """Records each isolation level shows (by the consumers' algorithm), markers left, and the
    aborted transactions read_committed fetches are given."""
    out: dict = {}
    for isolation in (0, 1):
        offset, batches, aborted = 0, [], set()
        while True:
            part = fetch_partition(raw, TOPIC, offset, isolation)
            assert part.error_code == 0, part.error_code
            aborted.update((a.first_offset, a.producer_id) for a in part.aborted_transactions or [])
            data = bytes(part.records or b"")
            found = [(h, data[pos : pos + h.size]) for pos, h in iter_batches(data)]
            if not found:
                break
            batches.extend(found)
            offset = found[-1][0].last_offset + 1
        end = part.last_stable_offset if isolation else part.high_watermark
        pending, skipping, records, markers = sorted(aborted), set(), [], []
        for h, raw_batch in batches:
            while pending and pending[0][0] <= h.last_offset:
                skipping.add(pending.pop(0)[1])
            if h.is_control:
                if h.records_count:
                    kind = "ABORT" if control_type(raw_batch) == ABORT else "COMMIT"
                    markers.append((h.base_offset, kind))
                    if kind == "ABORT":
                        skipping.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in skipping:
                continue
            records.extend((r.offset, r.key, r.value) for r in iter_records(raw_batch))
        name = "read_committed" if isolation else "read_uncommitted"
        out[name] = [r for r in records if r[0] < end]
        out[f"{name} end"] = end
        if isolation:
            out["aborted transactions (first offsets)"] = sorted(first for first, _ in aborted)
        else:
            out["markers"] = markers
    return out


def test_compacted_transactions_end_as_kafkas_do(make_broker, kafka):
    kafka_port, kafka_dir = kafka
    strom = make_broker({"log.cleaner.backoff.ms": "100"})
    got = _scenario(strom.port, strom.log_dir)
    want = _scenario(kafka_port, kafka_dir)
    for key in want:
        assert got[key] == want[key], (key, got[key], want[key])
    # Kafka's answers, recorded so a change on either side shows
    assert [(o, v) for o, _, v in want["read_committed"]] == [
        (7, b"b2"),
        (9, b"a3"),
        (16, b"c7"),
        (21, b"f3"),
        (22, b"f4"),
    ]
    assert want["read_uncommitted"] == want["read_committed"]
    # the first commit, the first abort and dtc-3's first commit lost their data and are gone;
    # dtc-2's abort stays (its aborted batch is dtc-2's last and is kept, empty), with its entry
    assert want["markers"] == [(8, "COMMIT"), (10, "COMMIT"), (13, "ABORT"), (17, "COMMIT")]
    assert want["aborted transactions (first offsets)"] == [12]
