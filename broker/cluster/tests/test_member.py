"""Pure parts of cluster membership."""

from strom.broker.metadata.cache import ClusterView
from strom.broker.replica.fetcher import whole_batches
from strom.protocol.records.batch import Record, build_batch


def test_whole_batches_drops_a_truncated_last_batch():
    one = build_batch([Record(0, 0, b"k", b"v" * 50)])
    two = build_batch([Record(0, 0, b"k", b"w" * 50)], base_offset=1)
    data = one + two
    assert bytes(whole_batches(data)) == data
    assert bytes(whole_batches(data[:-1])) == one
    assert bytes(whole_batches(data[:10])) == b""


def test_unclean_election_follows_the_topic_config():
    view = ClusterView(configs={"a": {"unclean.leader.election.enable": "true"}, "b": {}})
    assert view.unclean_allowed("a") and not view.unclean_allowed("b")
    assert view.unclean_allowed("b", default=True)


def test_a_diverged_follower_truncates_to_where_the_leader_epoch_ended(tmp_path):
    from types import SimpleNamespace

    from strom.broker.replica.fetcher import apply_fetched
    from strom.protocol.records.batch import validate_batches
    from strom.storage.config import LogConfig
    from strom.storage.log import Log

    log = Log.open(tmp_path / "t-0", LogConfig())
    for count in (5, 2):  # the last 2 records were never replicated by the old leader
        data = bytearray(build_batch([Record(i, 0, b"k", b"v") for i in range(count)]))
        log.append_as_leader(data, validate_batches(data), 0)
    partition = SimpleNamespace(log=log, topic="t", index=0)
    response = SimpleNamespace(
        error_code=0,
        diverging_epoch=SimpleNamespace(epoch=0, end_offset=5),
        records=b"",
        high_watermark=5,
        log_start_offset=0,
    )
    assert apply_fetched(partition, response)
    assert log.log_end_offset == 5
    log.close()


def test_a_follower_moves_its_log_start_only_up_to_its_high_watermark(tmp_path):
    """The leader's log start offset is followed only below the follower's own high watermark
    (a leader that had deleted past its high watermark made followers drop records, or, here,
    made the follower's fetch processing fail after the append)."""
    from types import SimpleNamespace

    from strom.broker.replica.fetcher import apply_fetched
    from strom.protocol.records.batch import validate_batches
    from strom.storage.config import LogConfig
    from strom.storage.log import Log

    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=150, file_delete_delay_ms=0))
    for i in range(10):
        data = bytearray(build_batch([Record(0, 0, b"k", b"v" * 40)], base_offset=i))
        log.append_as_follower(data, validate_batches(data))
    partition = SimpleNamespace(log=log, topic="t", index=0)

    def fetched(high_watermark, log_start_offset):
        return SimpleNamespace(
            error_code=0,
            diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
            records=b"",
            high_watermark=high_watermark,
            log_start_offset=log_start_offset,
        )

    assert apply_fetched(partition, fetched(3, 2))
    assert (log.log_start_offset, log.high_watermark) == (2, 3)
    assert apply_fetched(partition, fetched(5, 8))  # a leader whose start passed its HW
    assert (log.log_start_offset, log.high_watermark) == (5, 5)
    assert log.segments[0].base_offset == 5 and log.log_end_offset == 10
    log.close()


# ----------------------------------------------------------------- follower truncation (issue 21)


def _epoch_log(path, epochs):
    """A log holding, per (epoch, count), ``count`` records appended by the leader of ``epoch``
    (count 0: that replica led the epoch and appended nothing)."""
    from strom.protocol.records.batch import validate_batches
    from strom.storage.config import LogConfig
    from strom.storage.log import Log

    log = Log.open(path, LogConfig())
    for epoch, count in epochs:
        if count == 0:
            log.leader_epoch_cache.assign(epoch, log.log_end_offset)
            continue
        data = bytearray(build_batch([Record(i, 0, b"k", b"e%d" % epoch) for i in range(count)], base_timestamp=1000))
        log.append_as_leader(data, validate_batches(data), epoch)
    return log


def _batches(log):
    """(base offset, partition leader epoch, bytes) of every batch in the log."""
    from strom.protocol.records.batch import validate_batches

    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = bytes(log.read(offset, 1 << 20).records.read())
        for header in validate_batches(data):
            out.append((header.base_offset, header.partition_leader_epoch, data[: header.size]))
            data = data[header.size :]
            offset = header.last_offset + 1
    return out


def _replicate(leader, follower, rounds=10):
    """Follow ``leader`` as a Strom follower does: fetch with the last fetched epoch (the leader
    answers as its Fetch handler does), truncate on a diverging epoch, else append what it sent.
    Returns the diverging epochs answered; fails if the follower does not converge."""
    from types import SimpleNamespace

    from strom.broker.replica.fetcher import apply_fetched
    from strom.broker.replica.manager import diverging_epoch

    partition = SimpleNamespace(log=follower, topic="t", index=0)
    answers = []
    for _ in range(rounds):
        epoch = follower.latest_epoch()
        request = SimpleNamespace(
            last_fetched_epoch=-1 if epoch is None else epoch, fetch_offset=follower.log_end_offset
        )
        diverging = diverging_epoch(leader, request, 12)
        if diverging is None:
            records = b""
            if follower.log_end_offset < leader.log_end_offset:
                records = bytes(leader.read(follower.log_end_offset, 1 << 20).records.read())
            apply_fetched(
                partition,
                SimpleNamespace(
                    error_code=0,
                    diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                    records=records,
                    high_watermark=leader.log_end_offset,
                    log_start_offset=leader.log_start_offset,
                ),
            )
            if follower.log_end_offset == leader.log_end_offset:
                return answers
            continue
        answers.append(diverging)
        apply_fetched(
            partition,
            SimpleNamespace(
                error_code=0,
                diverging_epoch=SimpleNamespace(epoch=diverging[0], end_offset=diverging[1]),
                records=b"",
                high_watermark=leader.log_end_offset,
                log_start_offset=leader.log_start_offset,
            ),
        )
    raise AssertionError(f"the follower did not converge; the leader answered {answers}")


def test_a_follower_never_had_the_leaders_epoch_truncates_to_where_its_own_epoch_ends(tmp_path):
    """KIP-279: the follower (epochs 1 at 0-4, 3 at 5-9) asks about epoch 3; the leader never had it
    and answers epoch 2 ending at 8. The follower never had epoch 2: its own largest epoch below,
    1, ends at 5, and offsets 5-9 are epoch 3's, which the leader never had. It cuts at 5, not
    at the leader's 8 (that kept 5-7 of epoch 3 and got the same answer at every fetch)."""
    from strom.broker.replica.fetcher import truncation_offset

    follower = _epoch_log(tmp_path / "f" / "t-0", [(1, 5), (3, 5)])
    assert follower.end_offset_for_epoch(2) == (1, 5)
    assert truncation_offset(follower, 2, 8) == 5
    assert truncation_offset(follower, 3, 7) == 7  # the same epoch: the smaller end
    assert truncation_offset(follower, 3, 12) == 10  # never past the follower's own end
    assert truncation_offset(follower, 1, 3) == 3  # both ends bound it
    empty = _epoch_log(tmp_path / "e" / "t-0", [])
    assert truncation_offset(empty, 2, 8) == 0

    leader = _epoch_log(tmp_path / "l" / "t-0", [(1, 5), (2, 3), (4, 4)])
    assert _replicate(leader, follower) == [(2, 8)]
    assert _batches(follower) == _batches(leader)
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries()
    for log in (leader, follower, empty):
        log.close()


def test_a_follower_that_led_an_idle_epoch_converges(tmp_path):
    """Issue 21: this replica led epoch 5 of an idle partition (its cache says (5, 3), no data),
    then the lead moved to a replica that starts epoch 6 at 3. The leader answers epoch 4 ending
    at 3, the follower's log end; it must drop epoch 5 and fetch normally, not be told it
    diverged at every fetch (and so never be recorded as caught up, never rejoin the ISR)."""
    follower = _epoch_log(tmp_path / "f" / "t-0", [(4, 3), (5, 0)])
    leader = _epoch_log(tmp_path / "l" / "t-0", [(4, 3), (6, 0), (6, 2)])
    assert _replicate(leader, follower) == [(4, 3)]
    assert _batches(follower) == _batches(leader)
    assert follower.leader_epoch_cache.entries() == [(4, 0), (6, 3)]
    for log in (leader, follower):
        log.close()


def test_divergent_records_of_an_old_leader_are_replaced_by_the_leaders(tmp_path):
    """The old leader appended epoch 2 records (acks=1) that nobody replicated; the new leader
    (epoch 3) wrote other records at the same offsets. The follower ends with exactly the leader's log."""
    follower = _epoch_log(tmp_path / "f" / "t-0", [(1, 4), (2, 6)])
    leader = _epoch_log(tmp_path / "l" / "t-0", [(1, 4), (3, 2), (5, 0), (5, 7)])
    _replicate(leader, follower)
    assert _batches(follower) == _batches(leader)
    for log in (leader, follower):
        log.close()
