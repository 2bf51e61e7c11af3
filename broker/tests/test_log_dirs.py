"""Several log dirs: one that fails hard goes offline, its partitions answer KAFKA_STORAGE_ERROR,
DescribeLogDirs reports it, and the other dirs keep serving."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.schema import ApiKey
from strom.testing.storage_faults import file_faults

from .helpers import make_broker, open_client
from .test_apis import batch, create, fetch_body, produce_body


@pytest.fixture
def two_dirs(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    broker = make_broker(tmp_path, log_dirs=",".join(map(str, dirs)))
    yield broker, dirs
    broker.close()


def placement(broker, topic, partitions):
    return {p: broker.logs.log_dir_of(topic, p) for p in range(partitions)}


async def describe(client, version=4, topics=None):
    return await client.request(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": topics})


async def produce(client, topic, p, n=2):
    response = await client.request(ApiKey.PRODUCE, 9, produce_body(topic, batch(n), partition=p))
    return response.responses[0].partition_responses[0]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_describe_log_dirs_lists_dirs_partitions_and_sizes(two_dirs, nursery, version):
    broker, dirs = two_dirs
    client = open_client(broker, nursery)
    await create(client, "t", partitions=4)
    for p in range(4):
        assert (await produce(client, "t", p, n=p + 1)).error_code == ErrorCode.NONE
    response = await describe(client, version)
    assert [r.log_dir for r in response.results] == [os.path.abspath(d) for d in dirs]  # noqa: ASYNC240  no disk access
    where = placement(broker, "t", 4)
    for result, d in zip(response.results, dirs, strict=False):
        assert result.error_code == ErrorCode.NONE
        sizes = {p.partition_index: p.partition_size for t in result.topics if t.name == "t" for p in t.partitions}
        assert set(sizes) == {p for p, at in where.items() if at == d}
        for p, size in sizes.items():
            assert size == broker.logs.get_log("t", p).size_in_bytes > 0
        assert all(p.offset_lag == 0 and not p.is_future_key for t in result.topics for p in t.partitions)
        if version >= 4:
            assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    some = await describe(client, version, topics=[{"topic": "t", "partitions": [1]}])
    listed = [(t.name, p.partition_index) for r in some.results for t in r.topics for p in t.partitions]
    assert listed == [("t", 1)]


async def test_a_failing_dir_goes_offline_and_the_other_keeps_serving(two_dirs, nursery, tmp_path):
    broker, dirs = two_dirs
    client = open_client(broker, nursery)
    await create(client, "t", partitions=4)
    for p in range(4):
        assert (await produce(client, "t", p)).error_code == ErrorCode.NONE
    where = placement(broker, "t", 4)
    # the second dir fails (the first holds the topic metadata file: while it is offline,
    # topic changes are answered with KAFKA_STORAGE_ERROR, as Kafka stops with its metadata dir)
    bad = [p for p, d in where.items() if d == dirs[1]]
    good = [p for p, d in where.items() if d == dirs[0]]
    assert bad and good
    with file_faults() as faults:
        faults.fail("write", errno.EIO, path=str(dirs[1]))
        failed = await produce(client, "t", bad[0])
        assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "EIO" in failed.error_message
        assert list(broker.logs.offline_dirs) == [dirs[1]]
        for p in bad:  # every partition of the dir, without touching the disk again
            assert (await produce(client, "t", p)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            fetched = await client.request(ApiKey.FETCH, 12, fetch_body("t", 0, partition=p))
            assert fetched.responses[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        for p in good:
            ok = await produce(client, "t", p)
            assert (ok.error_code, ok.base_offset) == (ErrorCode.NONE, 2)
        response = await describe(client)
        assert [r.error_code for r in response.results] == [ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR]
        assert response.results[1].topics == [] and response.results[1].total_bytes == -1
        metadata = await client.request(
            ApiKey.METADATA, 12, {"topics": [{"name": "t", "topic_id": bytes(16)}], "allow_auto_topic_creation": False}
        )
        offline = {p.partition_index: p.offline_replicas for p in metadata.topics[0].partitions}
        assert all(offline[p] == [broker.node_id] for p in bad) and all(offline[p] == [] for p in good)
        new = await create(client, "later", partitions=2)  # new partitions go to the working dir
        assert new.error_code == ErrorCode.NONE
        assert set(placement(broker, "later", 2).values()) == {dirs[0]}
        broker.close()
    again = make_broker(tmp_path, log_dirs=",".join(map(str, dirs)))  # the disk was repaired
    try:
        client = open_client(again, nursery)
        for p in range(4):
            fetched = await client.request(ApiKey.FETCH, 12, fetch_body("t", 0, partition=p))
            part = fetched.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            assert [r.offset for r in iter_records(part.records)] == list(range(4 if p in good else 2))
    finally:
        again.close()


async def test_a_removed_dir_goes_offline_at_the_next_checkpoint(two_dirs, nursery):
    broker, dirs = two_dirs
    client = open_client(broker, nursery)
    await create(client, "t", partitions=2)
    shutil.rmtree(dirs[0])
    broker.logs.checkpoint()
    assert list(broker.logs.offline_dirs) == [dirs[0]]
    response = await describe(client)
    assert [r.error_code for r in response.results] == [ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE]


async def test_a_dir_unusable_at_start_leaves_its_partitions_unavailable_not_empty(tmp_path, nursery):
    dirs = [tmp_path / "a", tmp_path / "b"]
    broker = make_broker(tmp_path, log_dirs=",".join(map(str, dirs)))
    client = open_client(broker, nursery)
    await create(client, "t", partitions=4)
    for p in range(4):
        assert (await produce(client, "t", p)).error_code == ErrorCode.NONE
    where = placement(broker, "t", 4)
    broker.close()
    hidden = tmp_path / "b-away"
    dirs[1].rename(hidden)
    dirs[1].write_text("not a directory")  # the disk did not come back
    again = make_broker(tmp_path, log_dirs=",".join(map(str, dirs)))
    try:
        client = open_client(again, nursery)
        assert list(again.logs.offline_dirs) == [dirs[1]]
        for p, d in where.items():
            answer = await produce(client, "t", p)
            if d == dirs[1]:  # no empty copy was made in the working dir
                assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
                assert again.logs.get_log("t", p) is None
            else:
                assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 2)
    finally:
        again.close()
    dirs[1].unlink()
    hidden.rename(dirs[1])
    third = make_broker(tmp_path, log_dirs=",".join(map(str, dirs)))
    try:
        client = open_client(third, nursery)
        for p, d in where.items():
            assert (await produce(client, "t", p)).base_offset == (2 if d == dirs[1] else 4)
    finally:
        third.close()
