"""Many small Produce requests in flight at once, over raw sockets (trio), for the stall check.

``connections`` TCP connections each write ``depth`` Produce v9 requests (acks=1, one record each)
back to back in one write, then read the ``depth`` responses. All connections do this at the same
time; a round opens fresh connections, and there are ``rounds`` rounds. A request's latency runs
from the write that carried it to the arrival of its response; responses are decoded (error codes,
correlation ids) only after the clock stops.

Frame layout on the wire (Kafka's): 4-byte big-endian size, then the response header
(4-byte correlation id; Produce v9 is flexible, so an empty tagged-field byte follows) and body.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import trio

from strom.protocol.codec import decode_response, encode_request
from strom.protocol.connection import CLIENT, NEED_DATA, Connection, ConnectionClosed, FrameTooLarge
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.schema import ApiKey

PRODUCE_VERSION = 9
MAX_FRAME = 1 << 20
STALL_S = 1.0
TIMEOUT_S = 60.0


class InflightError(RuntimeError):
    """The broker closed a connection, sent a malformed frame, or answered with an error."""


@dataclass
class InflightResult:
    """Latencies of every request (seconds) and the wall time of each round."""

    latencies: list[float]
    round_seconds: list[float]
    errors: int

    @property
    def requests(self) -> int:
        return len(self.latencies)


def produce_frame(topic: str, partition: int, correlation_id: int, value: bytes) -> bytes:
    """One Produce v9 request frame (acks=1) carrying a one-record batch."""
    batch = build_batch([Record(0, 0, None, value)])
    return encode_request(
        ApiKey.PRODUCE,
        PRODUCE_VERSION,
        correlation_id,
        "strom-bench",
        {
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
        },
    )


def _produce_error(frame: bytes, correlation_id: int) -> bool:
    got, body = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, frame)
    codes = [p.error_code for t in body.responses for p in t.partition_responses]
    return got != correlation_id or any(codes)


async def _connection(
    port: int, frames: list[tuple[int, bytes]], latencies: list[float], responses: list[tuple[int, bytes]]
) -> None:
    """Write the frames in one go, then read as many responses; the frames are split by the protocol's
    Connection (undecoded: decoding waits until the clock has stopped)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    conn = Connection(CLIENT, MAX_FRAME)
    conn.raw_frames = True
    async with stream:
        sent = time.perf_counter()
        await stream.send_all(b"".join(f for _, f in frames))
        for correlation_id, _ in frames:
            while (event := conn.next_event()) is NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            if isinstance(event, ConnectionClosed):
                raise InflightError("broker closed the connection")
            if isinstance(event, FrameTooLarge):
                raise InflightError(f"response frame size {event.size} out of range")
            latencies.append(time.perf_counter() - sent)
            responses.append((correlation_id, event.data))


async def _run(port: int, topic: str, partitions: int, connections: int, depth: int, rounds: int) -> InflightResult:
    per_conn = [
        [(c * depth + i, produce_frame(topic, c % partitions, c * depth + i, b"v" * 100)) for i in range(depth)]
        for c in range(connections)
    ]
    latencies: list[float] = []
    responses: list[tuple[int, bytes]] = []
    round_seconds: list[float] = []
    with trio.fail_after(TIMEOUT_S * rounds):
        for _ in range(rounds):
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for frames in per_conn:
                    nursery.start_soon(_connection, port, frames, latencies, responses)
            round_seconds.append(time.perf_counter() - start)
    errors = sum(_produce_error(frame, cid) for cid, frame in responses)
    return InflightResult(latencies, round_seconds, errors)


def run_inflight(
    port: int, topic: str, partitions: int, connections: int = 50, depth: int = 20, rounds: int = 3
) -> InflightResult:
    """``rounds`` rounds of ``connections`` x ``depth`` one-record Produce requests in flight."""
    try:
        return trio.run(_run, port, topic, partitions, connections, depth, rounds)
    except (OSError, trio.TooSlowError) as exc:
        raise InflightError(f"in-flight produce: {exc}") from exc


def summary(result: InflightResult) -> dict[str, Any]:
    """Figures of the run: requests, wall time per round, max and p99 latency, stalls, errors."""
    ordered = sorted(result.latencies)
    rounds = sorted(result.round_seconds)
    return {
        "requests": result.requests,
        "round_seconds_median": rounds[len(rounds) // 2] if rounds else 0.0,
        "max_latency_s": ordered[-1] if ordered else 0.0,
        "p99_latency_s": ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0,
        "stalls": sum(1 for v in ordered if v > STALL_S),
        "errors": result.errors,
    }
