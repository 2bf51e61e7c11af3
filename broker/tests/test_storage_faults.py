"""What a client sees when the disk fails under the broker: error answers, never a closed
connection, and nothing acknowledged that is not on disk."""

from __future__ import annotations

import errno

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.schema import ApiKey
from strom.testing.storage_faults import file_faults

from .helpers import make_broker
from .test_apis import batch, create, fetch_body, produce_body


@pytest.fixture
def faults():
    with file_faults() as injector:
        yield injector


async def test_produce_on_a_full_disk_answers_kafka_storage_error_then_resumes(connect, broker, faults):
    client = await connect()
    assert (await create(client, "full")).error_code == ErrorCode.NONE
    ok = await client.request(ApiKey.PRODUCE, 9, produce_body("full", batch(3)))
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    faults.fail("write", errno.ENOSPC, path=".log", partial=40)
    for _ in range(3):
        failed = await client.request(ApiKey.PRODUCE, 9, produce_body("full", batch(3)))
        part = failed.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert part.base_offset == -1 and "ENOSPC" in part.error_message
    faults.clear()  # space is back: no restart needed
    resumed = await client.request(ApiKey.PRODUCE, 9, produce_body("full", batch(2)))
    assert resumed.responses[0].partition_responses[0].base_offset == 3
    fetched = await client.request(ApiKey.FETCH, 12, fetch_body("full", 0))
    assert [r.offset for r in iter_records(fetched.responses[0].partitions[0].records)] == list(range(5))


async def test_create_topics_on_a_full_disk_answers_per_topic_and_keeps_the_metadata(connect, broker, faults, tmp_path):
    client = await connect()
    assert (await create(client, "before")).error_code == ErrorCode.NONE
    faults.fail("write", errno.ENOSPC, path="strom-metadata")
    result = await create(client, "during", partitions=3)
    assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR and "ENOSPC" in result.error_message
    assert "during" not in broker.topics.topics
    assert not any(p.name.startswith("during-") for p in (tmp_path / "data").iterdir())
    parts = await client.request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {"topics": [{"name": "before", "count": 2, "assignments": None}], "timeout_ms": 1000, "validate_only": False},
    )
    assert parts.results[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert broker.topics.topics["before"].partitions == 1 and broker.replicas.partition("before", 1) is None
    faults.clear()
    assert (await create(client, "during", partitions=3)).error_code == ErrorCode.NONE
    broker.close()
    reopened = make_broker(tmp_path / "data")
    try:
        assert set(reopened.topics.topics) == {"before", "during"}
        assert reopened.topics.topics["before"].partitions == 1
    finally:
        reopened.close()
        broker.logs = None


async def test_create_topics_without_descriptors_answers_kafka_storage_error(connect, broker, faults, tmp_path):
    client = await connect()
    faults.fail("open", errno.EMFILE, path="many-")
    result = await create(client, "many", partitions=4)
    assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "many" not in broker.topics.topics
    assert not any(p.name.startswith("many-") for p in (tmp_path / "data").iterdir())
    faults.clear()
    assert (await create(client, "many", partitions=4)).error_code == ErrorCode.NONE


async def test_accept_out_of_descriptors_waits_and_logs_once(caplog, autojump_clock):
    """EMFILE on accept: retried every 100 ms, one warning with what to do, cached files closed."""
    import trio

    from strom.broker.server.root import AcceptRetry

    class Exhausted:
        socket = type("S", (), {"getsockname": lambda self: ("127.0.0.1", 9092)})()

        def __init__(self):
            self.failures = 25

        async def accept(self):
            await trio.lowlevel.checkpoint()
            if self.failures:
                self.failures -= 1
                raise OSError(errno.EMFILE, "Too many open files")
            return "connection"

        async def aclose(self):
            pass

    inner = Exhausted()
    with trio.fail_after(10):
        assert await AcceptRetry(inner).accept() == "connection"
    assert inner.failures == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "EMFILE" in r.getMessage()]
    assert len(warnings) == 1 and "ulimit -n" in warnings[0]
