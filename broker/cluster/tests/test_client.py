"""BrokerClient shared by tasks: each request gets its own answer (found by the simulation: two
transaction verifications at once on the coordinator's one client read each other's answers)."""

from __future__ import annotations

import trio
import trio.testing

from strom.broker.cluster.client import BrokerClient, BrokerUnavailable
from strom.protocol.connection import SERVER, Connection, Request
from strom.protocol.schema import ApiKey


async def _serve(stream: trio.abc.Stream, delay_s: float) -> None:
    """Answer each Metadata request, in order, ``delay_s`` after it arrived, naming in the answer
    the topic the request asked for."""
    conn = Connection(SERVER, 1 << 20)
    while True:
        data = await stream.receive_some(1 << 16)
        if not data:
            return
        conn.receive_data(data)
        while isinstance(event := conn.next_event(), Request):
            await trio.sleep(delay_s)
            topic = event.body.topics[0].name
            body = {
                "throttle_time_ms": 0,
                "brokers": [],
                "cluster_id": None,
                "controller_id": -1,
                "topics": [
                    {
                        "error_code": 3,
                        "name": topic,
                        "topic_id": bytes(16),
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": -2147483648,
                    }
                ],
            }
            for part in conn.send_response(event, body):
                await stream.send_all(part)


def _client(server_end: trio.abc.Stream, client_end: trio.abc.Stream) -> BrokerClient:
    async def connect(host: str, port: int) -> trio.abc.Stream:
        return client_end

    return BrokerClient("broker2", 9092, "test", request_timeout_s=5, connect=connect)


def _metadata(topic: str) -> dict:
    return {
        "topics": [{"name": topic, "topic_id": bytes(16)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }


async def test_tasks_sharing_a_client_each_get_their_own_answer(autojump_clock):
    server_end, client_end = trio.testing.memory_stream_pair()
    client = _client(server_end, client_end)
    answers: dict[str, str] = {}

    async def ask(topic: str) -> None:
        response = await client.request(ApiKey.METADATA, 12, _metadata(topic))
        answers[topic] = response.topics[0].name

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve, server_end, 0.1)
        async with trio.open_nursery() as askers:
            for topic in ("a", "b", "c"):
                askers.start_soon(ask, topic)
        nursery.cancel_scope.cancel()
    assert answers == {"a": "a", "b": "b", "c": "c"}


async def test_a_request_waiting_its_turn_times_out_within_its_own_timeout(autojump_clock):
    server_end, client_end = trio.testing.memory_stream_pair()
    client = _client(server_end, client_end)
    outcome: dict[str, object] = {}
    finished: dict[str, float] = {}

    async def ask(topic: str, timeout_s: float) -> None:
        try:
            response = await client.request(ApiKey.METADATA, 12, _metadata(topic), timeout_s=timeout_s)
            outcome[topic] = response.topics[0].name
        except BrokerUnavailable as exc:
            outcome[topic] = exc
        finished[topic] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve, server_end, 3.0)
        async with trio.open_nursery() as askers:
            askers.start_soon(ask, "slow", 4.0)
            await trio.sleep(0.01)
            started = trio.current_time()
            askers.start_soon(ask, "impatient", 1.0)
        nursery.cancel_scope.cancel()
    assert outcome["slow"] == "slow"
    assert isinstance(outcome["impatient"], BrokerUnavailable), outcome
    assert finished["impatient"] - started <= 1.0 + 1e-6  # its own timeout, not the slow one's answer
