"""A handler that raises unexpectedly: the client gets an answer in Kafka's shape with
UNKNOWN_SERVER_ERROR on everything it asked about, and keeps its connection (Kafka's
KafkaApis.handleError with AbstractRequest.getErrorResponse); a request without a response
(Produce acks=0) gets its connection closed, as Kafka closes it. And the case that exposed it:
an empty cleanup.policy, which Kafka 4.0 accepts and stores."""

from __future__ import annotations

import logging

import pytest

from strom.broker.apis import HANDLERS, SUPPORTED
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_faults import _error_codes, _request_with_a_topic

SET, APPEND, SUBTRACT = 0, 2, 3
TOPIC_RESOURCE = 2


def _cases():
    for key, lo, hi in SUPPORTED:
        for version in range(lo, hi + 1):
            yield pytest.param(key, version, id=f"{ApiKey(key).name}-v{version}")


@pytest.mark.parametrize("api_key,version", list(_cases()))
async def test_a_handler_that_raises_answers_unknown_server_error_and_keeps_the_connection(
    connect, monkeypatch, caplog, api_key, version
):
    body = _request_with_a_topic(api_key, version)
    if api_key == ApiKey.PRODUCE:
        body["acks"] = -1

    async def broken(broker, request):
        raise RuntimeError("a bug in the handler")

    monkeypatch.setattr(HANDLERS[api_key], "handle", broken)
    client = await connect()
    with caplog.at_level(logging.ERROR, logger="strom.server"):
        answer = await client.request(api_key, version, body)
    codes = _error_codes(answer)
    assert codes and set(codes) == {ErrorCode.UNKNOWN_SERVER_ERROR}, answer
    logged = [r for r in caplog.records if r.name == "strom.server" and r.levelno == logging.ERROR]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert f" v{version} " in logged[0].getMessage() and "a bug in the handler" in logged[0].exc_text
    monkeypatch.undo()
    again = await client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert again.error_code == ErrorCode.NONE  # the same connection still answers


async def test_an_acks0_produce_whose_handler_raises_closes_the_connection(connect, monkeypatch):
    async def broken(broker, request):
        raise RuntimeError("a bug in the handler")

    monkeypatch.setattr(HANDLERS[ApiKey.PRODUCE], "handle", broken)
    client = await connect()
    body = _request_with_a_topic(ApiKey.PRODUCE, 9)
    body["acks"] = 0
    await client.send(ApiKey.PRODUCE, 9, body)
    with pytest.raises(EOFError):
        await client.receive_frame()


async def _create(client, name: str, configs: list | None = None):
    response = await client.request(
        ApiKey.CREATE_TOPICS,
        5,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": configs or [],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        },
    )
    return response.topics[0]


async def _alter(client, name: str, op: int, value: str | None):
    response = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": name,
                    "configs": [{"name": "cleanup.policy", "config_operation": op, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    return response.responses[0]


async def _cleanup_policy(client, name: str):
    response = await client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": ["cleanup.policy"]}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    entry = response.results[0].configs[0]
    return entry.value, entry.config_source


async def test_subtracting_the_last_cleanup_policy_leaves_it_empty_as_kafka_does(connect, broker):
    """Kafka 4.0 (asked): SUBTRACT of the last value (also from the default) stores '' as a topic
    config; the topic then neither deletes by retention nor compacts, and DeleteRecords answers
    POLICY_VIOLATION. Strom refused '' with a ValueError after storing it, and closed the connection."""
    client = await connect()
    assert (await _create(client, "cp")).error_code == 0
    answer = await _alter(client, "cp", SUBTRACT, "delete")  # from the default ["delete"]
    assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, None)
    assert await _cleanup_policy(client, "cp") == ("", 1)  # DYNAMIC_TOPIC_CONFIG
    config = broker.replicas.partition("cp", 0).log.config
    assert not config.delete_enabled and not config.compact_enabled
    deleted = await client.request(
        ApiKey.DELETE_RECORDS,
        2,
        {"topics": [{"name": "cp", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 1000},
    )
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.POLICY_VIOLATION
    assert (await _alter(client, "cp", SET, "compact,delete")).error_code == 0
    assert (await _alter(client, "cp", SUBTRACT, "compact")).error_code == 0
    assert (await _alter(client, "cp", SUBTRACT, "delete")).error_code == 0
    assert await _cleanup_policy(client, "cp") == ("", 1)
    assert (await _alter(client, "cp", APPEND, "compact")).error_code == 0  # to the empty list, not the default
    assert await _cleanup_policy(client, "cp") == ("compact", 1)
    assert (await _create(client, "cp-empty", [{"name": "cleanup.policy", "value": ""}])).error_code == 0
    assert not broker.replicas.partition("cp-empty", 0).log.config.delete_enabled
    bad = await _alter(client, "cp", SET, "forever")
    assert bad.error_code == ErrorCode.INVALID_CONFIG


async def test_an_answer_with_a_field_its_version_lacks_is_answered_unknown_server_error(connect, monkeypatch, caplog):
    """The codec refuses a response key that is no field of the message (a misspelt one was silently
    dropped before): the client gets UNKNOWN_SERVER_ERROR, as for a handler that raised, the broker
    logs why, and the connection keeps serving."""
    real = HANDLERS[ApiKey.DESCRIBE_CLUSTER].handle

    async def misspelt(ctx, request):
        body = await real(ctx, request)
        return dict(body, cluster_idd=body["cluster_id"])

    monkeypatch.setattr(HANDLERS[ApiKey.DESCRIBE_CLUSTER], "handle", misspelt)
    client = await connect()
    with caplog.at_level(logging.ERROR, logger="strom.server"):
        answer = await client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False})
    assert answer.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert any("cluster_idd" in (r.exc_text or "") for r in caplog.records if r.name == "strom.server")
    monkeypatch.undo()
    again = await client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False})
    assert again.error_code == ErrorCode.NONE and again.cluster_id
