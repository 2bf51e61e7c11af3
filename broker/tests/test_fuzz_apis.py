"""Hostile and malformed requests to every API version the broker serves (broker/apis MODULES).

For each API key, one in-process broker with its group and transaction coordinators' timers
running (trio's autojump clock: long polls and rebalance waits pass instantly, and a request that
never answers shows as a hang at a 40-day virtual deadline) gets, for every version it serves,
after a transactional producer was initialised and a group member joined and synced (the generated
requests name them, their topic and its id, so hostile values reach the handlers' deeper checks):
  (a) requests generated from the protocol schema (broker/tests/fuzzgen.py): every field of the
      version, nested ones included, set in turn to hostile values that still encode (negative and
      extreme integers, empty, 32767-byte and 32 KiB strings, internal topic names, duplicate and
      200-fold entries, array counts and byte lengths claiming 2^31 with few bytes following,
      random uuids, null where nullable, record batches with a right CRC and a hostile header),
      plus bodies with every field hostile at once;
  (b) malformed frames made from a valid one: truncated bodies, flipped bytes, trailing garbage,
      a body of 0xff, 6-byte varints, a huge tagged-field count;
  (c) up to 40 of the answered hostile requests back to back on one connection (answers in the
      order asked, none skipped);
and once per test, frame-level cases (sizes 2^31-1, 0 and negative, API keys and versions Strom
lacks, a client id longer than its frame, a header that is not UTF-8 or is cut short).

After every case: the fuzzed connection got a well-formed answer (decodable at that version,
every error code one of Kafka's) or was closed with a log line saying why; no handler logged an
unexpected error; a fresh connection still gets ApiVersions and Metadata answered; the process's
peak memory did not jump. Records produced before the campaign are all read back after it, and
again after a restart, which must load the coordinators' logs without a complaint.

Every (field, hostile value) pair of every version runs, in CI too (about 10700 cases and 240 pipelines, ~20 s).
What is random is seeded per API and version (reproducible): the values of the bodies with every
field hostile at once and the flipped bytes. STROM_FUZZ_EXAMPLES (default 2) is how many of each
per version; a larger number for longer local runs, STROM_FUZZ_SEED to try other seeds.
Found defects are pinned in REGRESSIONS below.
"""

from __future__ import annotations

import logging
import os
import random
import resource
import struct

import pytest
import trio

from strom.broker.apis import MODULES, SUPPORTED_RANGE
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.schema import ApiKey, api_spec

from . import fuzzgen
from .helpers import make_broker, open_client
from .test_apis import batch, fetch_body, produce_body

EXAMPLES = int(os.environ.get("STROM_FUZZ_EXAMPLES", "2"))
SEED = os.environ.get("STROM_FUZZ_SEED", "")
VIRTUAL_FOREVER_S = 40 * 86400.0
PING_ID = 0x7FFF0001
FUZZ_ID = 0x7FFF0002
MEMORY_JUMP_KIB = 150 * 1024
KNOWN_ERROR_CODES = {int(c) for c in ErrorCode}
KEEP_RECORDS = 25
PIPELINED = 40
CONSUMER_GROUP_APIS = {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}

# Defects this campaign found, each pinned with the answer now given: (api key, version, field path,
# hostile value, expected: "closed" or the error codes answered[, other paths set: their values]).
# Kafka 4.0 (asked by raw request) answers the same where noted; for the overlong names Kafka's own
# error message overflows and it answers UNKNOWN_SERVER_ERROR or closes, where Strom keeps its
# specific code and cuts the message.
REGRESSIONS: list[tuple] = [
    # an error message quoting a 32767-byte name could not be encoded: connection closed, traceback
    (
        ApiKey.DESCRIBE_CONFIGS,
        1,
        ("resources", 0, "resource_name"),
        "x" * 32767,
        {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    ),
    (
        ApiKey.DESCRIBE_CONFIGS,
        4,
        ("resources", 0, "resource_name"),
        "x" * 32767,
        {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    ),
    (ApiKey.CREATE_PARTITIONS, 3, ("topics", 0, "name"), "x" * 32767, {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
    (ApiKey.ALTER_CONFIGS, 0, ("resources", 0, "configs", 0, "name"), "x" * 32767, {ErrorCode.INVALID_CONFIG}),
    (
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        ("resources", 0, "resource_name"),
        "x" * 32767,
        {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    ),
    (ApiKey.ELECT_LEADERS, 2, ("topic_partitions", 0, "topic"), "x" * 32767, {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
    (ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, ("components", 0, "entity_type"), "x" * 32767, {ErrorCode.UNSUPPORTED_VERSION}),
    (
        ApiKey.ALTER_CLIENT_QUOTAS,
        0,
        ("entries", 0, "entity", 0, "entity_type"),
        "x" * 32767,
        {ErrorCode.INVALID_REQUEST},
    ),
    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, ("users", 0, "name"), "x" * 32767, {ErrorCode.RESOURCE_NOT_FOUND}),
    (
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        ("topics", 0, "name"),
        "x" * 32767,
        {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    ),
    # expiry = now + 2^63-1 overflowed the offset record: handler failed; Kafka commits it (same)
    (ApiKey.OFFSET_COMMIT, 2, ("retention_time_ms",), 2**63 - 1, {ErrorCode.NONE}),
    # a 32768-byte compact string: Kafka's readers refuse any string over 32767 bytes and close;
    # Strom took it and failed writing the group's record (same as Kafka now)
    (ApiKey.OFFSET_COMMIT, 8, ("group_id",), "g" * 32768, "closed"),
    (ApiKey.METADATA, 12, ("topics", 0, "name"), "t" * 32768, "closed"),
    # v10-11 with a topic named only by id: the answer's name is not nullable there (handler failed);
    # Kafka: INVALID_REQUEST for each topic, named "" (same now)
    (ApiKey.METADATA, 10, ("topics", 0, "name"), None, {ErrorCode.INVALID_REQUEST}),
    (ApiKey.METADATA, 11, ("topics", 0, "name"), None, {ErrorCode.INVALID_REQUEST}),
    # an empty transactional id skipped the coordinator and wrote offsets unverified (or logged an
    # error when the offsets topic did not exist yet); Kafka: COORDINATOR_NOT_AVAILABLE (same now)
    (ApiKey.TXN_OFFSET_COMMIT, 0, ("transactional_id",), "", {ErrorCode.COORDINATOR_NOT_AVAILABLE}),
    (ApiKey.TXN_OFFSET_COMMIT, 5, ("transactional_id",), "", {ErrorCode.COORDINATOR_NOT_AVAILABLE}),
    # a client appended garbage to the coordinators' logs (found by the restart after the campaign):
    # Kafka refuses Produce to an internal topic and adding one to a transaction (same now)
    (ApiKey.PRODUCE, 9, ("topic_data", 0, "name"), "__consumer_offsets", {ErrorCode.INVALID_TOPIC_EXCEPTION}),
    (ApiKey.PRODUCE, 11, ("topic_data", 0, "name"), "__transaction_state", {ErrorCode.INVALID_TOPIC_EXCEPTION}),
    (
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        ("v3_and_below_topics", 0, "name"),
        "__transaction_state",
        {ErrorCode.TOPIC_AUTHORIZATION_FAILED},
    ),
    # a transactional batch without a transactional id: Kafka fails the whole request so (was INVALID_RECORD)
    (
        ApiKey.PRODUCE,
        9,
        ("transactional_id",),
        None,
        {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
        {
            ("topic_data", 0, "partition_data", 0, "records"): fuzzgen.build_batch(
                [fuzzgen.Record(0, 0, b"k", b"v")],
                base_timestamp=1_700_000_000_000,
                is_transactional=True,
                producer_id=1,
                producer_epoch=0,
                base_sequence=0,
            )
        },
    ),
    # DeleteRecords of an internal topic: Kafka INVALID_TOPIC_EXCEPTION (was POLICY_VIOLATION)
    (ApiKey.DELETE_RECORDS, 2, ("topics", 0, "name"), "__consumer_offsets", {ErrorCode.INVALID_TOPIC_EXCEPTION}),
    # Kafka writes a marker into __transaction_state when WriteTxnMarkers names it; Strom's loader
    # then warned of an unreadable record at every start (the restart below checks)
    (ApiKey.WRITE_TXN_MARKERS, 1, ("markers", 0, "topics", 0, "name"), "__transaction_state", {ErrorCode.NONE}),
]


def _error_codes(value, path=""):
    """(path, code) of every *error_code field in a decoded response."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("error_code") and isinstance(item, int):
                yield f"{path}.{key}", item
            else:
                yield from _error_codes(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _error_codes(item, path)


class Campaign:
    def __init__(self, broker, nursery, caplog):
        self.broker = broker
        self.nursery = nursery
        self.caplog = caplog
        self.failures: list[str] = []
        self.cases = 0
        self.outcomes: dict[str, int] = {}
        self.baselines: dict[int, str] = {}
        self.ctx: fuzzgen.Context | None = None
        self.api_key: int | None = None
        self.maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def prepare(self):
        """What the generated requests name exists: the fuzz topic (a fuzzed DeleteTopics may
        have removed it), a transactional producer and a member of a group that has synced, so
        that hostile values reach the handlers' deeper checks, not only "unknown"."""
        client = open_client(self.broker, self.nursery)
        try:
            with trio.fail_after(VIRTUAL_FOREVER_S):
                if "fuzz" not in self.broker.topics.topics:
                    await client.request(
                        ApiKey.CREATE_TOPICS,
                        7,
                        {
                            "topics": [
                                {
                                    "name": "fuzz",
                                    "num_partitions": 3,
                                    "replication_factor": 1,
                                    "assignments": [],
                                    "configs": [],
                                }
                            ],
                            "timeout_ms": 1000,
                        },
                    )
                ctx = fuzzgen.Context("fuzz", self.broker.topics.topics["fuzz"].topic_id)
                await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": ctx.transactional_id, "key_type": 1})
                init = await client.request(
                    ApiKey.INIT_PRODUCER_ID,
                    4,
                    {
                        "transactional_id": ctx.transactional_id,
                        "transaction_timeout_ms": 600_000,
                        "producer_id": -1,
                        "producer_epoch": -1,
                    },
                )
                if init.error_code == ErrorCode.NONE:
                    ctx.producer_id, ctx.producer_epoch = init.producer_id, init.producer_epoch
                await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": ctx.group, "key_type": 0})
                # the autojump clock jumps whenever all tasks wait: a session of 24 days (virtual)
                # keeps the member through the campaign's waits
                join = {
                    "group_id": ctx.group,
                    "session_timeout_ms": 2**31 - 1,
                    "rebalance_timeout_ms": 30_000,
                    "member_id": self.ctx.member_id if self.ctx else "",
                    "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}],
                }
                joined = await client.request(ApiKey.JOIN_GROUP, 5, join)
                if joined.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    join["member_id"] = ""
                    joined = await client.request(ApiKey.JOIN_GROUP, 5, join)
                if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                    join["member_id"] = joined.member_id
                    joined = await client.request(ApiKey.JOIN_GROUP, 5, join)
                if joined.error_code == ErrorCode.NONE:
                    ctx.member_id, ctx.generation = joined.member_id, joined.generation_id
                    await client.request(
                        ApiKey.SYNC_GROUP,
                        3,
                        {
                            "group_id": ctx.group,
                            "generation_id": ctx.generation,
                            "member_id": ctx.member_id,
                            "group_instance_id": None,
                            "assignments": [{"member_id": ctx.member_id, "assignment": b""}],
                        },
                    )
                if self.api_key in CONSUMER_GROUP_APIS:
                    # a KIP-848 consumer group and member instead of the classic one
                    ctx.group, ctx.member_id = "fuzz-cgroup", "fuzz-member"
                    beat = await client.request(
                        ApiKey.CONSUMER_GROUP_HEARTBEAT,
                        0,
                        {
                            "group_id": ctx.group,
                            "member_id": ctx.member_id,
                            "member_epoch": 0,
                            "instance_id": None,
                            "rack_id": None,
                            "rebalance_timeout_ms": 30_000,
                            "subscribed_topic_names": [ctx.topic],
                            "subscribed_topic_regex": None,
                            "server_assignor": None,
                            "topic_partitions": [],
                        },
                    )
                    ctx.generation = beat.member_epoch if beat.error_code == ErrorCode.NONE else -1
        finally:
            await client.stream.aclose()
        self.ctx = ctx

    async def run(self, label: str, api_key: int, version: int, frame: bytes):
        """Send one frame (then a ping) on a fresh connection and check everything after it;
        returns the decoded answer (None: none came) and whether the connection was closed."""
        self.cases += 1
        where = f"api={api_spec(api_key).name if api_key in SUPPORTED_RANGE else api_key} v{version} {label}"
        self.caplog.clear()
        client = open_client(self.broker, self.nursery)
        outcome = "closed"
        body = None
        try:
            with trio.fail_after(VIRTUAL_FOREVER_S):
                ping = encode_request(ApiKey.API_VERSIONS, 0, PING_ID, "fuzz", {})
                try:
                    await client.stream.send_all(frame + ping)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                while True:
                    try:
                        data = await client.receive_frame()
                    except EOFError:
                        break
                    (correlation,) = struct.unpack_from(">i", data)
                    if correlation == PING_ID:
                        outcome = "answered"
                        break
                    if correlation != FUZZ_ID:
                        self.failures.append(f"{where}: response with correlation id {correlation}")
                        break
                    try:
                        _, body = decode_response(api_key, version, data)
                    except Exception as exc:
                        self.failures.append(f"{where}: undecodable response: {exc}")
                        break
                    bad = [(p, c) for p, c in _error_codes(body) if c not in KNOWN_ERROR_CODES]
                    if bad:
                        self.failures.append(f"{where}: unknown error codes {bad}")
        except trio.TooSlowError:
            self.failures.append(f"{where}: no answer and no close (hangs)")
            outcome = "hung"
        finally:
            await client.stream.aclose()
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if label == "baseline":
            self.baselines[version] = outcome
        await trio.testing.wait_all_tasks_blocked()
        records = [r for r in self.caplog.records if r.name.startswith("strom")]
        unexpected = [r for r in records if r.levelno >= logging.ERROR or r.exc_info]
        for r in unexpected:
            exc = r.exc_info[1] if r.exc_info else None
            self.failures.append(f"{where}: logged {r.getMessage()!r} {type(exc).__name__ if exc else ''}: {exc}")
        if outcome == "closed" and not any(r.levelno >= logging.INFO for r in records):
            self.failures.append(f"{where}: connection closed without a log line saying why")
        await self.check_alive(where)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if rss - self.maxrss > MEMORY_JUMP_KIB:
            self.failures.append(f"{where}: peak memory jumped by {(rss - self.maxrss) // 1024} MiB")
        self.maxrss = rss
        return body, outcome == "closed"

    async def check_alive(self, where: str) -> None:
        client = open_client(self.broker, self.nursery)
        try:
            with trio.fail_after(VIRTUAL_FOREVER_S):
                versions = await client.request(
                    ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
                )
                metadata = await client.request(
                    ApiKey.METADATA,
                    12,
                    {"topics": [{"name": "keep", "topic_id": bytes(16)}], "allow_auto_topic_creation": False},
                )
            assert versions.error_code == ErrorCode.NONE
            assert metadata.topics[0].error_code == ErrorCode.NONE
        except BaseException as exc:
            if isinstance(exc, trio.Cancelled):
                raise
            self.failures.append(f"{where}: broker no longer answers ApiVersions/Metadata: {exc!r}")
        finally:
            await client.stream.aclose()

    async def fuzz_version(self, api_key: int, version: int) -> None:
        self.api_key = api_key
        await self.prepare()
        rng = random.Random(f"{api_key}/{version}{SEED}")
        mutations = fuzzgen.field_mutations(api_key, version, self.ctx, rng)
        bodies = [("baseline", fuzzgen.baseline(api_key, version, self.ctx))] + mutations
        bodies += [fuzzgen.all_fields_hostile(api_key, version, self.ctx, rng) for _ in range(EXAMPLES)]
        answered = []
        for label, body in bodies:
            frame = fuzzgen.encode(api_key, version, FUZZ_ID, body)
            answer, closed = await self.run(label, api_key, version, frame)
            if answer is not None and not closed:
                answered.append(body)
        await self.pipelined(api_key, version, answered[:PIPELINED])
        frame = fuzzgen.encode(api_key, version, FUZZ_ID, fuzzgen.baseline(api_key, version, self.ctx))
        for label, raw in fuzzgen.raw_cases(api_key, version, frame, rng, flips=EXAMPLES + 1):
            await self.run(label, api_key, version, raw)

    async def pipelined(self, api_key: int, version: int, bodies: list[dict]) -> None:
        """The hostile requests that were answered one by one, sent back to back on one
        connection: their answers come in the order asked, none skipped (state their neighbours
        changed may make one close the connection: then none after it is answered)."""
        await self.prepare()
        where = f"api={api_spec(api_key).name} v{version} {len(bodies)} hostile requests pipelined"
        frames = [fuzzgen.encode(api_key, version, i + 1, body) for i, body in enumerate(bodies)]
        ping = encode_request(ApiKey.API_VERSIONS, 0, PING_ID, "fuzz", {})
        client = open_client(self.broker, self.nursery)
        seen = []
        try:
            with trio.fail_after(VIRTUAL_FOREVER_S):
                await client.stream.send_all(b"".join(frames) + ping)
                while True:
                    try:
                        data = await client.receive_frame()
                    except EOFError:
                        break
                    (correlation,) = struct.unpack_from(">i", data)
                    seen.append(correlation)
                    if correlation == PING_ID:
                        break
                    decode_response(api_key, version, data)
        except trio.TooSlowError:
            self.failures.append(f"{where}: no answer and no close (hangs)")
        except Exception as exc:
            self.failures.append(f"{where}: {exc!r}")
        finally:
            await client.stream.aclose()
        silent = {i + 1 for i, body in enumerate(bodies) if api_key == ApiKey.PRODUCE and body.get("acks") == 0}
        expected = [i for i in range(1, len(bodies) + 1) if i not in silent] + [PING_ID]
        if seen != expected[: len(seen)] or (seen and seen[-1] != PING_ID and len(seen) == len(expected)):
            self.failures.append(f"{where}: answers in the order {seen}, asked {expected}")


def frame_cases() -> list[tuple[str, int, int, bytes]]:
    """Frames broken before any API's body is read: sizes, headers, keys and versions."""

    def framed(payload: bytes) -> bytes:
        return struct.pack(">i", len(payload)) + payload

    header = struct.pack(">hhi", ApiKey.METADATA, 9, FUZZ_ID)
    return [
        ("frame size 2^31-1", 3, 9, struct.pack(">i", 2**31 - 1) + header),
        ("frame size 0", 3, 9, struct.pack(">i", 0)),
        ("frame size -1", 3, 9, struct.pack(">i", -1) + header),
        ("header of 3 bytes", 3, 9, framed(header[:3])),
        ("api key 999", 999, 0, framed(struct.pack(">hhih", 999, 0, FUZZ_ID, -1))),
        ("api key -1", -1, 0, framed(struct.pack(">hhih", -1, 0, FUZZ_ID, -1))),
        ("ControlledShutdown (not served)", 7, 3, framed(struct.pack(">hhih", 7, 3, FUZZ_ID, -1) + b"\x00")),
        ("Metadata v99", 3, 99, framed(struct.pack(">hhih", 3, 99, FUZZ_ID, -1) + b"\x00")),
        ("Metadata v-1", 3, -1, framed(struct.pack(">hhih", 3, -1, FUZZ_ID, -1))),
        (
            "client id length beyond the frame",
            3,
            9,
            framed(struct.pack(">hhih", ApiKey.METADATA, 9, FUZZ_ID, 30000) + b"abc"),
        ),
        ("client id length -2", 3, 9, framed(struct.pack(">hhih", ApiKey.METADATA, 9, FUZZ_ID, -2) + b"\x00")),
        (
            "client id not UTF-8",
            3,
            9,
            framed(struct.pack(">hhih", ApiKey.METADATA, 9, FUZZ_ID, 2) + b"\xff\xfe\x00\x00"),
        ),
        (
            "header tagged fields truncated",
            3,
            9,
            framed(struct.pack(">hhih", ApiKey.METADATA, 9, FUZZ_ID, -1) + b"\x05\x01"),
        ),
    ]


async def _keep_records(client) -> list[bytes]:
    values = []
    for partition in range(2):
        response = await client.request(ApiKey.FETCH, 12, fetch_body("keep", 0, partition=partition))
        values += [r.value for r in iter_records(response.responses[0].partitions[0].records)]
    return sorted(values)


def _fuzz_broker(tmp_path):
    # the coordinators' periodic timers wake rarely: under the autojump clock a 24-day long
    # poll then passes in a few steps
    return make_broker(
        tmp_path / "data",
        transaction_state_log_num_partitions=1,
        offsets_topic_num_partitions=1,
        transaction_abort_timed_out_transaction_cleanup_interval_ms=2**31 - 1,
        transaction_remove_expired_transaction_cleanup_interval_ms=2**31 - 1,
        group_max_session_timeout_ms=2**31 - 1,
        group_consumer_session_timeout_ms=2**31 - 1,
        offsets_retention_check_interval_ms=2**31 - 1,
    )


async def _background(broker, nursery):
    """The timers a running broker has: the group and transaction coordinators'."""
    await nursery.start(broker.txn.run)
    nursery.start_soon(broker.groups.run)


async def _produce_keep(broker, nursery) -> list[bytes]:
    """Topic `keep` (2 partitions) with acknowledged records; their values, read back."""
    client = open_client(broker, nursery)
    await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": "keep", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 1000,
        },
    )
    for partition in range(2):
        response = await client.request(
            ApiKey.PRODUCE,
            9,
            produce_body("keep", batch(KEEP_RECORDS, key_prefix=b"p%d-" % partition), partition=partition),
        )
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    before = await _keep_records(client)
    assert len(before) == 2 * KEEP_RECORDS
    return before


@pytest.mark.parametrize("api_key", sorted(m.API_KEY for m in MODULES), ids=lambda k: api_spec(k).name)
async def test_hostile_requests_to_every_version(api_key, tmp_path, nursery, autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="strom")
    broker = _fuzz_broker(tmp_path)
    try:
        async with trio.open_nursery() as background:
            await _background(broker, background)
            before = await _campaign(api_key, broker, nursery, caplog)
            background.cancel_scope.cancel()
    finally:
        broker.close()
    # the acknowledged records and the coordinators' logs come back after a restart, without a
    # complaint (a hostile request must not have written what the broker cannot load)
    caplog.clear()
    again = _fuzz_broker(tmp_path)
    try:
        async with trio.open_nursery() as background:
            await _background(again, background)
            assert await _keep_records(open_client(again, nursery)) == before
            background.cancel_scope.cancel()
    finally:
        again.close()
    complaints = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("strom") and (r.levelno >= logging.WARNING or r.exc_info)
    ]
    assert not complaints, f"after the campaign, the restarted broker logged {complaints}"


async def _campaign(api_key, broker, nursery, caplog):
    before = await _produce_keep(broker, nursery)
    campaign = Campaign(broker, nursery, caplog)
    low, high = SUPPORTED_RANGE[api_key]
    for version in range(low, high + 1):
        await campaign.fuzz_version(api_key, version)
    if api_key == ApiKey.METADATA:  # frame-level cases once, not per API
        for label, key, version, raw in frame_cases():
            await campaign.run(label, key, version, raw)
    fresh = open_client(broker, nursery)
    assert await _keep_records(fresh) == before, "acknowledged records changed during the campaign"
    unanswered = [v for v, outcome in campaign.baselines.items() if outcome != "answered"]
    assert not unanswered, f"the generated baseline request of versions {unanswered} was not answered"
    assert not campaign.failures, f"{len(campaign.failures)} of {campaign.cases} cases failed:\n" + "\n".join(
        campaign.failures[:60]
    )
    return before


async def test_found_defects_stay_fixed(tmp_path, nursery, autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="strom")
    broker = _fuzz_broker(tmp_path)
    try:
        await _background(broker, nursery)
        await _produce_keep(broker, nursery)
        campaign = Campaign(broker, nursery, caplog)
        for api_key, version, path, value, expected, *also in REGRESSIONS:
            campaign.api_key = api_key
            await campaign.prepare()
            body = fuzzgen.set_path(fuzzgen.baseline(api_key, version, campaign.ctx), path, value)
            for other_path, other_value in (also[0] if also else {}).items():
                body = fuzzgen.set_path(body, other_path, other_value)
            label = f"{'.'.join(map(str, path))}={fuzzgen._short(value)}"
            answer, closed = await campaign.run(
                label, api_key, version, fuzzgen.encode(api_key, version, FUZZ_ID, body)
            )
            codes = (
                "closed"
                if answer is None and closed
                else {c for _, c in _error_codes(answer)} - {ErrorCode.NONE} or {ErrorCode.NONE}
            )
            if codes != expected:
                campaign.failures.append(f"{api_spec(api_key).name} v{version} {label}: {codes}, expected {expected}")
        assert not campaign.failures, "\n".join(campaign.failures)
    finally:
        broker.close()
    caplog.clear()
    _fuzz_broker(tmp_path).close()
    complaints = [r.getMessage() for r in caplog.records if r.name.startswith("strom") and r.levelno >= logging.WARNING]
    assert not complaints, f"the restarted broker logged {complaints}"
