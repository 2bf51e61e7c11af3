"""Compaction of a transactional topic, with confluent-kafka's transactional producers and
consumers in both isolation levels, the test broker's compaction on demand and Kafka's own
kafka-dump-log reading the compacted segments and their `.txnindex`.

What a Kafka user relies on (Kafka's LogCleaner rules): compaction removes aborted records, so
read_uncommitted consumers stop seeing them too. Committed records are compacted as any others.
A read_committed consumer sees the same records before and after every pass, and after a restart.
Transaction markers whose data is gone leave the log within two further passes at
delete.retention.ms=0. The aborted-transaction index entries go with their data.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from confluent_kafka import Producer

from compat_tests.java.test_java_client import JVM_FLAGS, KAFKA_HOME, java_unavailable
from compat_tests.support.reading import read_to_end
from strom.testing import broker

TOPIC = "txn-compacted"
TIMEOUT_S = 30
QUIET = {"log_level": 3}


def _producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **QUIET})
    p.init_transactions(TIMEOUT_S)
    return p


def _txn(p: Producer, pairs: list[tuple[bytes, bytes]], commit: bool = True) -> None:
    p.begin_transaction()
    for key, value in pairs:
        p.produce(TOPIC, key=key, value=value, partition=0)
    p.flush(TIMEOUT_S)
    if commit:
        p.commit_transaction(TIMEOUT_S)
    else:
        p.abort_transaction(TIMEOUT_S)


def _read(bootstrap: str, isolation: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a consumer with ``isolation`` gets, to the end."""
    return read_to_end(bootstrap, TOPIC, isolation=isolation, timeout_s=TIMEOUT_S, config=QUIET)


def _values(recs) -> list[bytes]:
    return [value for _, _, value in recs]


def _dump(paths: list[str]) -> str:
    """kafka-dump-log (Kafka's DumpLogSegments) over Strom's files."""
    run = subprocess.run(
        [
            "java",
            *JVM_FLAGS,
            "-cp",
            f"{KAFKA_HOME}/libs/*",
            "kafka.tools.DumpLogSegments",
            "--deep-iteration",
            "--print-data-log",
            "--files",
            ",".join(paths),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Exception" not in run.stdout + run.stderr, (run.stdout + run.stderr)[-3000:]
    return run.stdout


def test_compaction_of_committed_and_aborted_transactions(tmp_path):
    # the broker's own cleaner stays idle: every pass here is one the test asks for
    with broker(log_cleaner_backoff_ms=3_600_000) as b:
        bootstrap = b.bootstrap_servers
        b.create_topic(TOPIC, cleanup_policy="compact", delete_retention_ms=0, min_cleanable_dirty_ratio=0.01)
        p1, p2 = _producer(bootstrap, "cmp-1"), _producer(bootstrap, "cmp-2")
        _txn(p1, [(b"k1", b"a1"), (b"k2", b"a2")])
        _txn(p1, [(b"k1", b"x1"), (b"k3", b"x3")], commit=False)
        _txn(p1, [(b"k1", b"a3")])
        _txn(p2, [(b"k2", b"b2")])
        assert _values(_read(bootstrap, "read_uncommitted")) == [b"a1", b"a2", b"x1", b"x3", b"a3", b"b2"]
        assert _values(_read(bootstrap, "read_committed")) == [b"a1", b"a2", b"a3", b"b2"]
        partition = next(b.data_dir.rglob(f"{TOPIC}-0"))

        # pass 1: the superseded committed records and the aborted ones go; markers stay, and so
        # does the aborted transaction's index entry (its data was met in this pass)
        first = b.compact(topic=TOPIC)
        assert first["records_removed"] == 4 and first["markers_removed"] == 0, first
        expected = [b"a3", b"b2"]
        assert _values(_read(bootstrap, "read_committed")) == expected
        assert _values(_read(bootstrap, "read_uncommitted")) == expected
        (index,) = partition.glob("*.txnindex")
        kept = tmp_path / "pass1"
        kept.mkdir()
        (kept / index.name).write_bytes(index.read_bytes())  # dumped below with Kafka's tool

        # passes 2 and 3 (each started by new data, as Kafka's cleaner is): the entry goes and
        # the two markers with no data left get their delete horizon (0 ms), then they go
        removed = []
        for n, value in enumerate((b"d4", b"d5")):
            _txn(p2, [(b"k%d" % (4 + n), value)])
            expected.append(value)
            removed.append(b.compact(topic=TOPIC)["markers_removed"])
            assert _values(_read(bootstrap, "read_committed")) == expected
            assert _values(_read(bootstrap, "read_uncommitted")) == expected
            assert not list(partition.glob("*.txnindex"))
        assert removed == [0, 2]

        p1.flush(TIMEOUT_S)
        p2.flush(TIMEOUT_S)
        del p1, p2  # librdkafka handles are destroyed here, before the broker goes away
        b.restart()
        bootstrap = b.bootstrap_servers
        assert _values(_read(bootstrap, "read_committed")) == expected
        assert _values(_read(bootstrap, "read_uncommitted")) == expected

        reason = java_unavailable()
        if reason is not None:
            pytest.skip(f"kafka-dump-log not run: {reason}")
        files = sorted(str(p) for p in partition.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
        dump = _dump(files + [str(kept / index.name)])
        batches = re.findall(r"^baseOffset: \d+ lastOffset: \d+ count: \d+ .*?isvalid: (\w+)", dump, re.M)
        assert batches and set(batches) == {"true"}, dump[:3000]
        # the commits whose records are still there; the first commit and the abort are gone
        assert re.findall(r"endTxnMarker: (\w+)", dump) == ["COMMIT"] * 4, dump[:4000]
        assert [v for _, v in re.findall(r"key: (k\d) payload: (\w+)", dump)] == [v.decode() for v in expected]
        assert "Mismatch" not in dump and "Non-consecutive" not in dump, dump[:4000]
        entries = re.findall(
            r"^version: 0 producerId: \d+ firstOffset: (\d+) lastOffset: (\d+) "
            r"lastStableOffset: (\d+)$",
            dump,
            re.M,
        )
        assert entries == [("3", "5", "6")], dump  # the abort of offsets 3-4, its marker at 5
