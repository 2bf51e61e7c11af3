"""Pure parts of cluster membership."""
from protocol.records.batch import Record, build_batch

from broker.cluster.member import ClusterView, _whole_batches


def test_whole_batches_drops_a_truncated_last_batch():
    one = build_batch([Record(0, 0, b"k", b"v" * 50)])
    two = build_batch([Record(0, 0, b"k", b"w" * 50)], base_offset=1)
    data = one + two
    assert bytes(_whole_batches(data)) == data
    assert bytes(_whole_batches(data[:-1])) == one
    assert bytes(_whole_batches(data[:10])) == b""


def test_unclean_election_follows_the_topic_config():
    view = ClusterView(configs={"a": {"unclean.leader.election.enable": "true"}, "b": {}})
    assert view.unclean_allowed("a") and not view.unclean_allowed("b")
    assert view.unclean_allowed("b", default=True)
