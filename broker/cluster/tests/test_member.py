"""Pure parts of cluster membership."""
from strom.protocol.records.batch import Record, build_batch

from strom.broker.cluster.member import ClusterView
from strom.broker.replica.fetcher import whole_batches


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

    from strom.protocol.records.batch import validate_batches
    from strom.storage.config import LogConfig
    from strom.storage.log import Log

    from strom.broker.replica.fetcher import apply_fetched

    log = Log.open(tmp_path / "t-0", LogConfig())
    for count in (5, 2):  # the last 2 records were never replicated by the old leader
        data = bytearray(build_batch([Record(i, 0, b"k", b"v") for i in range(count)]))
        log.append_as_leader(data, validate_batches(data), 0)
    partition = SimpleNamespace(log=log, topic="t", index=0)
    response = SimpleNamespace(error_code=0, diverging_epoch=SimpleNamespace(epoch=0, end_offset=5),
                               records=b"", high_watermark=5, log_start_offset=0)
    assert apply_fetched(partition, response)
    assert log.log_end_offset == 5
    log.close()


def test_a_follower_moves_its_log_start_only_up_to_its_high_watermark(tmp_path):
    """The leader's log start offset is followed only below the follower's own high watermark
    (a leader that had deleted past its high watermark made followers drop records, or, here,
    made the follower's fetch processing fail after the append)."""
    from types import SimpleNamespace

    from strom.protocol.records.batch import validate_batches
    from strom.storage.config import LogConfig
    from strom.storage.log import Log

    from strom.broker.replica.fetcher import apply_fetched

    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=150, file_delete_delay_ms=0))
    for i in range(10):
        data = bytearray(build_batch([Record(0, 0, b"k", b"v" * 40)], base_offset=i))
        log.append_as_follower(data, validate_batches(data))
    partition = SimpleNamespace(log=log, topic="t", index=0)

    def fetched(high_watermark, log_start_offset):
        return SimpleNamespace(error_code=0, diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                               records=b"", high_watermark=high_watermark, log_start_offset=log_start_offset)

    assert apply_fetched(partition, fetched(3, 2))
    assert (log.log_start_offset, log.high_watermark) == (2, 3)
    assert apply_fetched(partition, fetched(5, 8))  # a leader whose start passed its HW
    assert (log.log_start_offset, log.high_watermark) == (5, 5)
    assert log.segments[0].base_offset == 5 and log.log_end_offset == 10
    log.close()


def test_topic_placement_uses_the_brokers_registered_in_zookeeper_not_the_watched_view():
    """A broker registered a moment ago may not be in the watched view yet (the CI failure of
    "Replication factor: 3 larger than available brokers: 2" right after three brokers started)."""
    from types import SimpleNamespace

    import trio

    from strom.broker.cluster.member import ClusterMember

    created = {}

    class FakeZk:
        async def get_all_brokers(self):
            return {2: SimpleNamespace(rack=None), 0: SimpleNamespace(rack=None), 1: SimpleNamespace(rack=None)}

        async def create_topic(self, name, assignment, configs, topic_id):
            created[name] = assignment

        async def set_topic_assignment(self, name, assignment):
            created[name] = dict(assignment.partitions)

    member = ClusterMember.__new__(ClusterMember)
    member.zk = FakeZk()
    member.view = ClusterView(brokers={0: None, 1: None})  # broker 2 not seen yet
    member.cache = SimpleNamespace(topics={})

    async def no_wait(condition):
        pass

    member.wait_for = no_wait

    async def main():
        await member.create_topic("t", 2, 3, {}, validate_only=False)
        assert all(sorted(replicas) == [0, 1, 2] for replicas in created["t"].values())
        member.view.assignments["t"] = SimpleNamespace(partitions={0: (0, 1, 2), 1: (1, 2, 0)}, topic_id=None)
        await member.create_partitions("t", 3)
        assert sorted(created["t"][2]) == [0, 1, 2]

    trio.run(main)


def test_a_manual_assignment_is_written_to_zookeeper_as_given():
    """The topic znode gets the replicas in the given order (first = preferred leader), for new
    topics and added partitions, without asking placement."""
    from types import SimpleNamespace

    import trio

    from strom.broker.cluster.member import ClusterMember

    written = {}

    class FakeZk:
        async def get_all_brokers(self):
            raise AssertionError("a manual assignment needs no placement")

        async def create_topic(self, name, assignment, configs, topic_id):
            written[name] = assignment

        async def set_topic_assignment(self, name, assignment):
            written[name] = dict(assignment.partitions)

    member = ClusterMember.__new__(ClusterMember)
    member.zk = FakeZk()
    member.view = ClusterView(brokers={0: None, 1: None, 2: None})
    member.cache = SimpleNamespace(topics={})

    async def no_wait(condition):
        pass

    member.wait_for = no_wait

    async def main():
        await member.create_topic("t", 2, 2, {}, validate_only=True, assignment={0: [2, 0], 1: [0, 1]})
        assert written == {}
        await member.create_topic("t", 2, 2, {}, validate_only=False, assignment={0: [2, 0], 1: [0, 1]})
        assert written["t"] == {0: (2, 0), 1: (0, 1)}
        member.view.assignments["t"] = SimpleNamespace(partitions=written["t"], topic_id="id")
        await member.create_partitions("t", 3, assignment={2: [1, 2]})
        assert written["t"] == {0: (2, 0), 1: (0, 1), 2: (1, 2)}

    trio.run(main)


def test_validate_only_create_partitions_places_the_new_partitions_and_writes_nothing():
    """A growth the registered brokers cannot hold (replication factor 3, 2 brokers) is refused
    with validate_only too; one they can hold is answered without a write."""
    from types import SimpleNamespace

    import pytest
    import trio

    from strom.broker.cluster.member import ClusterMember
    from strom.broker.errors import TopicError
    from strom.protocol.errors import ErrorCode

    class FakeZk:
        live = [0, 1]

        async def get_all_brokers(self):
            return {b: SimpleNamespace(rack=None) for b in self.live}

        async def set_topic_assignment(self, name, assignment):
            raise AssertionError("validate_only wrote the assignment")

    member = ClusterMember.__new__(ClusterMember)
    member.zk = FakeZk()
    member.view = ClusterView(brokers={0: None, 1: None})
    member.view.assignments["t"] = SimpleNamespace(partitions={0: (0, 1, 2)}, topic_id="id")

    async def main():
        with pytest.raises(TopicError) as refused:
            await member.create_partitions("t", 2, validate_only=True)
        assert refused.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
        member.zk.live = [0, 1, 2]
        await member.create_partitions("t", 2, validate_only=True)

    trio.run(main)


def test_placement_reads_the_racks_from_the_registrations():
    """Brokers registered with a rack get each partition's replicas on distinct racks, for new
    topics and for partitions added later."""
    from types import SimpleNamespace

    import trio

    from strom.broker.cluster.member import ClusterMember

    racks = {0: "r1", 1: "r1", 2: "r2", 3: "r2", 4: "r3", 5: "r3"}
    written = {}

    class FakeZk:
        async def get_all_brokers(self):
            return {b: SimpleNamespace(rack=rack) for b, rack in racks.items()}

        async def create_topic(self, name, assignment, configs, topic_id):
            written[name] = assignment

        async def set_topic_assignment(self, name, assignment):
            written[name] = dict(assignment.partitions)

    member = ClusterMember.__new__(ClusterMember)
    member.zk = FakeZk()
    member.view = ClusterView(brokers=dict.fromkeys(racks))
    member.cache = SimpleNamespace(topics={})

    async def no_wait(condition):
        pass

    member.wait_for = no_wait

    async def main():
        await member.create_topic("t", 6, 3, {}, validate_only=False)
        assert all(sorted(racks[b] for b in r) == ["r1", "r2", "r3"] for r in written["t"].values())
        member.view.assignments["t"] = SimpleNamespace(partitions=dict(written["t"]), topic_id=None)
        await member.create_partitions("t", 9)
        assert sorted(written["t"]) == list(range(9))
        assert all(sorted(racks[b] for b in written["t"][p]) == ["r1", "r2", "r3"] for p in (6, 7, 8))

    trio.run(main)


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
            out.append((header.base_offset, header.partition_leader_epoch, data[:header.size]))
            data = data[header.size:]
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
        request = SimpleNamespace(last_fetched_epoch=-1 if epoch is None else epoch,
                                  fetch_offset=follower.log_end_offset)
        diverging = diverging_epoch(leader, request, 12)
        if diverging is None:
            records = b""
            if follower.log_end_offset < leader.log_end_offset:
                records = bytes(leader.read(follower.log_end_offset, 1 << 20).records.read())
            apply_fetched(partition, SimpleNamespace(
                error_code=0, diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1), records=records,
                high_watermark=leader.log_end_offset, log_start_offset=leader.log_start_offset))
            if follower.log_end_offset == leader.log_end_offset:
                return answers
            continue
        answers.append(diverging)
        apply_fetched(partition, SimpleNamespace(
            error_code=0, diverging_epoch=SimpleNamespace(epoch=diverging[0], end_offset=diverging[1]),
            records=b"", high_watermark=leader.log_end_offset, log_start_offset=leader.log_start_offset))
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
