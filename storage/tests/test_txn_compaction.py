"""Compaction of transactional data and markers, by Kafka's LogCleaner rules: aborted data goes,
a marker stays while its transaction has data and then leaves in two passes (delete horizon),
the `.txnindex` follows, producer state keeps what idempotence and fencing need, and a crash at
any point of the swap leaves a log whose read_committed view is whole."""

import os
import shutil
from pathlib import Path

import pytest

from strom.protocol.records.batch import Record, build_batch, iter_records, validate_batches
from strom.protocol.records.control import ABORT, build_marker, control_type
from strom.storage.cleaner import DELETE_HORIZON_MASK, LogCleaner, needs_cleaning
from strom.storage.config import LogConfig
from strom.storage.errors import InvalidProducerEpoch
from strom.storage.log import Log
from strom.storage.tests.test_cleaner import batches
from strom.storage.txn_index import AbortedTxn, read_index

A, B, C = 1000, 2000, 3000
DAY = 86_400_000
CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=100_000, delete_retention_ms=DAY, file_delete_delay_ms=0)


class Producer:
    """Writes batches as a (transactional) producer does: sequences and epochs tracked."""

    def __init__(self, log, pid=-1, epoch=0):
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def send(self, *pairs, txn=True, ts=1_000):
        records = [Record(i, 0, k, v) for i, (k, v) in enumerate(pairs)]
        if self.pid < 0:
            data = build_batch(records, base_timestamp=ts)
        else:
            data = build_batch(
                records,
                base_timestamp=ts,
                producer_id=self.pid,
                producer_epoch=self.epoch,
                base_sequence=self.seq,
                is_transactional=txn,
            )
            self.seq += len(records)
        info = self.log.append_as_leader(data, validate_batches(data), 0)
        self.log.high_watermark = self.log.log_end_offset
        return info.first_offset

    def end(self, commit, epoch=None):
        epoch = self.epoch if epoch is None else epoch
        data = build_marker(self.pid, epoch, commit, 0, 5_000)
        info = self.log.append_as_leader(data, validate_batches(data), 0)
        self.log.high_watermark = self.log.log_end_offset
        if epoch != self.epoch:
            self.epoch, self.seq = epoch, 0
        return info.first_offset


def seal(log):
    log.roll()
    log.high_watermark = log.log_end_offset


def layout(log):
    """(offset, kind, values) of every batch: kind is 'data', 'COMMIT', 'ABORT' or 'empty-control'."""
    out: list[tuple[int, str, list[bytes | None] | None]] = []
    for h, raw in batches(log):
        if h.is_control:
            kind = "empty-control" if not h.records_count else ("ABORT" if control_type(raw) == ABORT else "COMMIT")
            out.append((h.base_offset, kind, None))
        else:
            out.append((h.base_offset, "data", [r.value for r in iter_records(raw)]))
    return out


def visible(log, read_committed=True):
    """The records a consumer sees, by the client algorithm (Java's Fetcher, librdkafka): an
    aborted transaction's producer is skipped from its first offset to its ABORT marker."""
    aborted = sorted(log.aborted_transactions(log.log_start_offset, log.log_end_offset), key=lambda e: e.first_offset)
    skipping: set[int] = set()
    i = 0
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for h, raw in batches(log):
        while read_committed and i < len(aborted) and aborted[i].first_offset <= h.last_offset:
            skipping.add(aborted[i].producer_id)
            i += 1
        if h.is_control:
            if h.records_count and control_type(raw) == ABORT:
                skipping.discard(h.producer_id)
            continue
        if read_committed and h.is_transactional and h.producer_id in skipping:
            continue
        out.extend((r.offset, r.key, r.value) for r in iter_records(raw))
    return out


def latest(recs):
    model = {}
    for _, key, value in recs:
        model[key] = value
    return model


def index_entries(log):
    return sorted((e for path in log.dir.glob("*.txnindex") for e in read_index(path)), key=lambda e: e.last_offset)


def consistent_index(log):
    """Every aborted-transaction entry (memory and files agree) has its ABORT marker in the log."""
    entries = log.aborted_transactions(0, 1 << 62)
    assert index_entries(log) == entries
    markers = {o for o, kind, _ in layout(log) if kind == "ABORT"}
    assert all(e.last_offset in markers for e in entries), (entries, markers)
    return entries


# ============================================================ commit markers
def test_commit_marker_stays_while_its_data_does_then_goes_in_two_passes(open_log, clock):
    log = open_log(CONFIG)
    a, plain = Producer(log, A), Producer(log)
    a.send((b"k", b"txn-1"))  # 0
    a.end(commit=True)  # 1
    plain.send((b"k", b"plain-2"))  # 2: supersedes the transaction's only record
    seal(log)
    a.send((b"j", b"txn-3"))  # 3: A's last data batch, in the active segment
    cleaner = LogCleaner()

    result = cleaner.clean(log, clock.now)  # the data goes; the marker saw it: kept verbatim
    assert result.records_removed == 1 and result.markers_removed == 0
    assert layout(log)[:2] == [(1, "COMMIT", None), (2, "data", [b"plain-2"])]
    marker = batches(log)[0][0]
    assert not marker.attributes & DELETE_HORIZON_MASK

    cleaner.clean(log, clock.now)  # no data left: the marker gets a delete horizon
    marker = batches(log)[0][0]
    assert marker.attributes & DELETE_HORIZON_MASK and marker.base_timestamp == clock.now + DAY
    assert marker.is_control and marker.records_count == 1 and marker.max_timestamp == 5_000
    assert not needs_cleaning(log, clock.now + DAY - 1) and needs_cleaning(log, clock.now + DAY)

    assert cleaner.clean(log, clock.now + DAY - 1).markers_removed == 0
    assert layout(log)[0][1] == "COMMIT"
    result = cleaner.clean(log, clock.now + DAY)
    assert result.markers_removed == 1
    assert layout(log) == [(2, "data", [b"plain-2"]), (3, "data", [b"txn-3"])]
    assert visible(log) == [(2, b"k", b"plain-2"), (3, b"j", b"txn-3")]


def test_a_commit_marker_of_a_transaction_with_surviving_records_is_never_removed(open_log, clock):
    log = open_log(CONFIG)
    a = Producer(log, A)
    a.send((b"k", b"v"))
    a.end(commit=True)
    seal(log)
    Producer(log, B).send((b"x", b"y"), txn=False)  # active segment
    for now in (clock.now, clock.now + DAY, clock.now + 10 * DAY):
        LogCleaner().clean(log, now)
    assert layout(log)[:2] == [(0, "data", [b"v"]), (1, "COMMIT", None)]


# ============================================================ abort markers and the .txnindex
def test_aborted_data_then_its_index_entry_then_its_marker_go(open_log, clock):
    log = open_log(CONFIG)
    a, plain = Producer(log, A), Producer(log)
    plain.send((b"k", b"committed"))  # 0
    a.send((b"k", b"aborted"), (b"j", b"aborted"))  # 1-2
    abort_at = a.end(commit=False)  # 3
    seal(log)
    a.send((b"z", b"later"))  # 4: A's last data, active segment
    a.end(commit=True)
    assert consistent_index(log) == [AbortedTxn(A, 1, 3, 4)]
    committed_before = visible(log)
    cleaner = LogCleaner()

    result = cleaner.clean(log, clock.now)  # aborted data removed; marker and entry stay
    assert result.records_removed == 2
    assert layout(log)[:2] == [(0, "data", [b"committed"]), (3, "ABORT", None)]
    assert consistent_index(log) == [AbortedTxn(A, 1, 3, 4)]
    assert visible(log) == committed_before
    assert visible(log, read_committed=False) == committed_before

    cleaner.clean(log, clock.now)  # no data of it met: entry dropped, horizon set
    assert consistent_index(log) == []
    assert not (log.dir / f"{0:020d}.txnindex").exists()
    marker = batches(log)[1][0]
    assert marker.base_offset == abort_at and marker.attributes & DELETE_HORIZON_MASK
    assert visible(log) == committed_before

    assert cleaner.clean(log, clock.now + DAY).markers_removed == 1
    # the marker was the run's last batch: it stays as an empty control batch (Kafka keeps the
    # cleaning round's last batch the same way), which consumers never see
    assert layout(log) == [
        (0, "data", [b"committed"]),
        (3, "empty-control", None),
        (4, "data", [b"later"]),
        (5, "COMMIT", None),
    ]
    assert visible(log) == committed_before and consistent_index(log) == []


def test_entry_and_marker_of_an_abort_whose_data_spans_runs(open_log, clock):
    """The transaction's data lies in one run, its marker in the next: the entry stays with the
    marker's segment while data is met earlier in the same pass."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=220, delete_retention_ms=0, file_delete_delay_ms=0)
    log = open_log(config)
    a, b = Producer(log, A), Producer(log, B)
    a.send((b"a1", b"x" * 80))
    b.send((b"b1", b"y" * 80))
    b.end(commit=True)
    a.send((b"a2", b"x" * 80))
    a.end(commit=False)
    seal(log)
    a.send((b"tail", b"t"))
    b.send((b"tail2", b"t"))
    assert log.num_segments > 3
    before = visible(log)
    entries = consistent_index(log)
    assert LogCleaner().clean(log, clock.now).records_removed == 2
    assert consistent_index(log) == entries  # the aborted data was met in this pass
    assert visible(log) == before
    # pass 1 left empty batches of A (each segment was a run of its own, and a run keeps its
    # last batch); pass 2 merges runs and still meets them; pass 3 finds no data: the entry
    # goes and the marker gets its (zero) horizon; pass 4 removes the marker
    LogCleaner().clean(log, clock.now)
    assert consistent_index(log) == entries
    LogCleaner().clean(log, clock.now)
    assert consistent_index(log) == [] and "ABORT" in [kind for _, kind, _ in layout(log)]
    assert LogCleaner().clean(log, clock.now).markers_removed == 1
    assert "ABORT" not in [kind for _, kind, _ in layout(log)]
    assert visible(log) == before


# ============================================================ producer state
def test_the_last_marker_of_a_producer_with_a_bumped_epoch_stays_empty_for_fencing(open_log, clock):
    log = open_log(CONFIG)
    a, plain = Producer(log, A), Producer(log)
    a.send((b"k", b"aborted"))
    a.end(commit=False, epoch=1)  # aborted with a bumped epoch: A's batches are cleared
    plain.send((b"k", b"plain"))
    seal(log)
    plain.send((b"tail", b"t"))
    for now in (clock.now, clock.now, clock.now + DAY):
        LogCleaner().clean(log, now)
    kinds = layout(log)
    assert kinds[:2] == [(1, "empty-control", None), (2, "data", [b"plain"])]
    empty = batches(log)[0][0]
    assert (empty.producer_id, empty.producer_epoch, empty.is_transactional) == (A, 1, True)
    assert not empty.attributes & DELETE_HORIZON_MASK and empty.base_timestamp == -1
    assert consistent_index(log) == []
    log.close()
    for snapshot in log.dir.glob("*.snapshot"):
        snapshot.unlink()  # producer state from the batch headers alone
    reopened = open_log(CONFIG, clean_shutdown=False, high_watermark=log.log_end_offset)
    assert reopened.producer_state.producers[A].producer_epoch == 1
    stale = build_batch(
        [Record(0, 0, b"k", b"zombie")], producer_id=A, producer_epoch=0, base_sequence=1, is_transactional=True
    )
    with pytest.raises(InvalidProducerEpoch):
        reopened.append_as_leader(stale, validate_batches(stale), 0)


def test_a_producers_last_data_batch_keeps_its_marker(open_log, clock):
    """Kafka keeps the producer's last data batch (empty) for its sequence; the batch is still
    met by every pass, so its transaction's marker stays too."""
    log = open_log(CONFIG)
    a, plain = Producer(log, A), Producer(log)
    a.send((b"k", b"txn"))
    a.end(commit=True)
    plain.send((b"k", b"plain"))
    seal(log)
    plain.send((b"tail", b"t"))
    for now in (clock.now, clock.now, clock.now + DAY):
        LogCleaner().clean(log, now)
    assert layout(log)[:3] == [(0, "data", []), (1, "COMMIT", None), (2, "data", [b"plain"])]
    assert batches(log)[0][0].producer_id == A


def test_an_open_transaction_is_never_cleaned_and_later_data_waits_for_it(open_log, clock):
    log = open_log(CONFIG)
    a, b = Producer(log, A), Producer(log, B)
    b.send((b"k", b"old"))
    b.end(commit=True)
    seal(log)
    a.send((b"k", b"open"))  # open: the LSO
    seal(log)
    b.send((b"k", b"newer"))
    b.end(commit=True)
    seal(log)
    Producer(log).send((b"tail", b"t"))
    assert log.last_stable_offset == 2
    LogCleaner().clean(log, clock.now)
    assert [(o, v) for o, _, v in visible(log, read_committed=False)][:3] == [(0, b"old"), (2, b"open"), (3, b"newer")]


# ============================================================ crash safety
def _crash_copies(log, tmp_path, monkeypatch, now):
    copies: list[Path] = []
    real_rename = os.rename

    def rename(src, dst):
        target = tmp_path / f"crash{len(copies)}" / log.dir.name
        shutil.copytree(log.dir, target)
        copies.append(target)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    try:
        LogCleaner().clean(log, now)
    finally:
        monkeypatch.setattr(os, "rename", real_rename)
    final = tmp_path / "crash-final" / log.dir.name
    shutil.copytree(log.dir, final)
    return copies + [final]


@pytest.mark.parametrize("passes_before", [0, 1], ids=["data-goes", "entry-goes"])
def test_crash_at_every_rename_keeps_log_index_and_txnindex_consistent(
    open_log, tmp_path, clock, monkeypatch, passes_before
):
    config = LogConfig(cleanup_policy="compact", segment_bytes=700, delete_retention_ms=DAY, file_delete_delay_ms=0)
    log = open_log(config)
    a, b, plain = Producer(log, A), Producer(log, B), Producer(log)
    for n in range(3):
        a.send((b"k%d" % n, b"aborted-%d" % n))
        b.send((b"k%d" % n, b"committed-%d" % n))
        a.end(commit=False)
        b.end(commit=True)
        plain.send((b"p%d" % n, b"plain-%d" % n))
    seal(log)
    a.send((b"tail", b"t"))
    b.send((b"tail", b"t2"))
    for _ in range(passes_before):
        LogCleaner().clean(log, clock.now)
    before_committed, before_entries = visible(log), consistent_index(log)
    copies = _crash_copies(log, tmp_path, monkeypatch, clock.now)
    after_committed, after_entries = visible(log), consistent_index(log)
    assert before_entries != after_entries or passes_before == 0
    assert len(copies) > 8, len(copies)
    for directory in copies:
        for recovery_point in (0, log.log_end_offset):  # full header replay, or files trusted
            target = directory.parent / f"rp{recovery_point}" / directory.name
            shutil.copytree(directory, target)
            reopened = Log.open(
                target,
                config,
                now_ms=clock,
                clean_shutdown=False,
                recovery_point=recovery_point,
                high_watermark=log.log_end_offset,
            )
            try:
                entries = consistent_index(reopened)
                assert entries in (before_entries, after_entries) or set(entries) <= set(before_entries), target
                got = visible(reopened)
                assert latest(got) == latest(before_committed), target
                assert not [v for _, _, v in got if v.startswith(b"aborted")], target
                assert not [p for p in target.iterdir() if p.name.endswith((".cleaned", ".swap"))]
            finally:
                reopened.close()
    assert latest(after_committed) == latest(before_committed)


# ============================================================ memory bound of the aborted transactions
def _brute_force(log, fetch, upper):
    return [e for e in index_entries(log) if e.last_offset >= fetch and e.first_offset < upper]


def _many_aborts(log, count, producers=(A, B)):
    sent = [Producer(log, pid) for pid in producers]
    for n in range(count):
        p = sent[n % len(sent)]
        p.send((b"k%d" % (n % 7), b"aborted-%d" % n))
        if n % 3 == 0:
            p.send((b"j", b"aborted-more-%d" % n))
        p.end(commit=False)
        Producer(log).send((b"k%d" % (n % 7), b"plain-%d" % n))
        if n % 4 == 3:
            log.roll()
    log.high_watermark = log.log_end_offset
    return sent


def test_only_the_newest_aborted_transactions_stay_in_memory_and_fetches_read_the_rest(open_log, monkeypatch):
    from strom.storage import txn_index

    monkeypatch.setattr(txn_index, "MAX_IN_MEMORY", 6)
    monkeypatch.setattr(txn_index, "SEGMENTS_CACHED", 2)
    log = open_log(CONFIG)
    _many_aborts(log, 30)
    assert len(index_entries(log)) == 30
    assert len(log.txn.aborted) <= 6 and log.txn.floor > 0

    def check(log):
        end = log.log_end_offset
        for fetch in range(0, end + 1):
            for upper in (fetch + 1, fetch + 5, end):
                assert log.aborted_transactions(fetch, upper) == _brute_force(log, fetch, upper), (fetch, upper)

    check(log)
    log.close()
    reopened = open_log(CONFIG, clean_shutdown=True, high_watermark=log.log_end_offset)
    assert len(reopened.txn.aborted) <= 6 + 4 and reopened.txn.floor > 0  # newest segments' entries
    check(reopened)


def test_compaction_and_truncation_below_the_memory_floor(open_log, clock, monkeypatch):
    from strom.storage import txn_index

    monkeypatch.setattr(txn_index, "MAX_IN_MEMORY", 6)
    log = open_log(CONFIG)
    _many_aborts(log, 24)
    seal(log)
    Producer(log).send((b"tail", b"t"))
    committed = visible(log)
    assert log.txn.floor > 0
    LogCleaner().clean(log, clock.now)  # all aborted data goes; entries stay (pass 1)
    assert len(consistent_index(log)) == 24
    assert latest(visible(log)) == latest(committed)
    assert not [v for _, _, v in visible(log, read_committed=False) if v.startswith(b"aborted")]
    LogCleaner().clean(log, clock.now)  # no aborted data left: the entries go,
    left = consistent_index(log)  # but each producer's last batch stays (empty)
    assert sorted(e.producer_id for e in left) == [A, B] and latest(visible(log)) == latest(committed)
    floor = log.txn.floor
    log.truncate_to(floor - 3)  # below the floor: files are cut too
    assert log.txn.floor <= floor - 3
    consistent_index(log)


def test_truncation_below_the_floor_cuts_entries_only_in_files(open_log, monkeypatch):
    from strom.storage import txn_index

    monkeypatch.setattr(txn_index, "MAX_IN_MEMORY", 4)
    log = open_log(CONFIG)
    _many_aborts(log, 16)
    entries = index_entries(log)
    cut = entries[5].last_offset
    assert cut < log.txn.floor
    log.truncate_to(cut)
    assert index_entries(log) == entries[:5]
    assert log.aborted_transactions(0, 1 << 62) == entries[:5]


def test_an_abort_marker_in_the_clean_section_ends_its_transaction_for_the_offset_map(open_log, clock):
    """Found by the differential test: the offset map is built from the dirty section only, so
    an abort whose marker lies in the clean section must not make that producer's later
    committed data look aborted (its keys would then not shadow older values)."""
    log = open_log(CONFIG)
    a = Producer(log, A)
    a.send((b"k", b"old"))
    a.end(commit=True)
    a.send((b"x", b"aborted"))
    a.end(commit=False)
    seal(log)
    Producer(log).send((b"tail", b"t"))
    LogCleaner().clean(log, clock.now)
    a.send((b"k", b"new"))  # dirty, after the abort marker of the clean section
    a.end(commit=True)
    seal(log)
    Producer(log).send((b"tail", b"t2"))
    LogCleaner().clean(log, clock.now)
    assert [v for _, k, v in visible(log) if k == b"k"] == [b"new"]
    assert [v for _, k, v in visible(log, read_committed=False) if k == b"k"] == [b"new"]


# ============================================================ tombstones keep Kafka's horizon
def test_a_rewritten_batch_keeps_its_delete_horizon_as_kafka_does(open_log, clock):
    log = open_log(CONFIG)
    plain = Producer(log)
    plain.send((b"gone", None), (b"stays", b"1"), ts=2_000)
    seal(log)
    plain.send((b"tail", b"t"))
    LogCleaner().clean(log, clock.now)
    header = batches(log)[0][0]
    assert header.attributes & DELETE_HORIZON_MASK and header.base_timestamp == clock.now + DAY
    result = LogCleaner().clean(log, clock.now + DAY)
    assert result.tombstones_removed == 1
    (header, raw), *_ = batches(log)
    # Kafka (MemoryRecords.filterTo) rebuilds the batch with the horizon it already has
    assert header.attributes & DELETE_HORIZON_MASK and header.base_timestamp == clock.now + DAY
    assert [(r.key, r.value, r.timestamp) for r in iter_records(raw)] == [(b"stays", b"1", 2_000)]
    assert not needs_cleaning(log, clock.now + 2 * DAY)  # no tombstone left to wait for


# ============================================================ a model of consumers
def _txn_ops():
    from hypothesis import strategies as st

    key = st.sampled_from([b"a", b"b", b"c", b"d"])
    value = st.one_of(st.none(), st.binary(min_size=1, max_size=8))
    return st.lists(
        st.one_of(
            st.tuples(
                st.just("txn"),
                st.sampled_from([A, B]),
                st.lists(st.tuples(key, value), min_size=1, max_size=3),
                st.booleans(),
            ),
            st.tuples(st.just("put"), st.none(), st.lists(st.tuples(key, value), min_size=1, max_size=2), st.none()),
            st.tuples(st.just("bump"), st.sampled_from([A, B]), st.none(), st.booleans()),
            st.tuples(st.just("clean"), st.none(), st.none(), st.integers(0, 2)),
        ),
        min_size=1,
        max_size=25,
    )


def test_consumers_see_the_committed_model_after_any_passes(tmp_path_factory):
    """Random commits, aborts (some with an epoch bump), plain writes with tombstones, and passes
    at random times: read_committed shows each key's last committed value (or nothing once its
    tombstone has gone), never an aborted value, and read_uncommitted shows none in cleaned
    segments. Every index entry has its marker, and producer epochs survive."""
    from hypothesis import HealthCheck, given, settings

    @settings(
        max_examples=int(os.environ.get("STROM_TXN_MODEL_EXAMPLES", "40")),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(ops=_txn_ops())
    def run(ops):
        now = [1_000_000]
        config = LogConfig(
            cleanup_policy="compact",
            segment_bytes=400,
            delete_retention_ms=100,
            index_interval_bytes=64,
            file_delete_delay_ms=0,
        )
        log = Log.open(tmp_path_factory.mktemp("txnmodel") / "topic-0", config, now_ms=lambda: now[0])
        producers = {A: Producer(log, A), B: Producer(log, B)}
        model: dict[bytes, bytes | None] = {}  # key -> value a read_committed reader must see
        aborted: set[bytes | None] = set()
        committed: set[bytes | None] = set()
        epochs = {A: 0, B: 0}
        try:
            for op, pid, pairs, flag in ops:
                if op == "txn":
                    for key, value in pairs:
                        producers[pid].send((key, value), ts=now[0])
                    if flag:
                        producers[pid].end(commit=True)
                        model.update(pairs)
                        committed.update(v for _, v in pairs)
                    else:
                        producers[pid].end(commit=False)
                        aborted.update(v for _, v in pairs if v is not None)
                elif op == "put":
                    Producer(log).send(*pairs, ts=now[0])
                    model.update(pairs)
                    committed.update(v for _, v in pairs)
                elif op == "bump":
                    epochs[pid] += 1  # an abort that bumps the epoch (KIP-360 / TV2)
                    producers[pid].end(commit=flag, epoch=epochs[pid])
                else:
                    now[0] += flag * 60
                    seal(log)
                    LogCleaner().clean(log, now[0])
            consistent_index(log)
            got = visible(log)
            assert not [v for _, _, v in got if v in aborted and v not in committed]
            live = latest(got)
            for key, value in model.items():
                assert live.get(key) == value, (key, live.get(key), value)
            cleaned_end = log.cleaner_state.first_dirty_offset
            uncommitted = [(o, v) for o, _, v in visible(log, read_committed=False) if o < cleaned_end]
            assert not [v for _, v in uncommitted if v in aborted and v not in committed]
            for pid, epoch in epochs.items():
                entry = log.producer_state.producers.get(pid)
                assert entry is None or entry.producer_epoch == epoch
        finally:
            log.close()

    run()


# ============================================================ producer.id.expiration.ms
def test_an_expired_producers_last_batch_and_marker_are_no_longer_kept(open_log, clock):
    log = open_log(CONFIG)
    a, b, plain = Producer(log, A), Producer(log, B), Producer(log)
    a.send((b"k", b"txn"), ts=clock.now)
    a.end(commit=True)
    plain.send((b"k", b"plain"), ts=clock.now)
    seal(log)
    b.send((b"open", b"o"), ts=clock.now)  # B's transaction stays open: never expired
    LogCleaner().clean(log, clock.now)
    assert layout(log)[:2] == [(0, "data", []), (1, "COMMIT", None)]  # A's last batch kept, empty
    assert log.remove_expired_producers(DAY) == 0
    clock.now += DAY
    assert log.remove_expired_producers(DAY) == 1  # A only: B has a transaction open
    assert set(log.producer_state.producers) == {B}
    for now in (clock.now, clock.now, clock.now + DAY):
        LogCleaner().clean(log, now)
    assert [o for o, _, _ in layout(log)][:1] == [2]  # A's batch and marker are gone
    assert latest(visible(log))[b"k"] == b"plain"
