"""Answers changed to match the reference Kafka 4.0 (found by compat_tests/differential)."""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey


async def test_api_versions_v3_refuses_an_invalid_client_software_name(connect):
    client = await connect()
    bad = await client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "bad name!",
                                                        "client_software_version": "1.0"})
    assert bad.error_code == ErrorCode.INVALID_REQUEST and list(bad.api_keys) == []
    good = await client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "apache-kafka-java",
                                                         "client_software_version": "4.0.0"})
    assert good.error_code == ErrorCode.NONE and good.api_keys


async def test_describe_cluster_for_controllers_is_a_mismatched_endpoint_type(connect):
    client = await connect()
    reply = await client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                              "endpoint_type": 2})
    assert (reply.error_code, reply.endpoint_type, reply.cluster_id) == (ErrorCode.MISMATCHED_ENDPOINT_TYPE, 1, "")
    ok = await client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                           "endpoint_type": 1})
    assert ok.error_code == ErrorCode.NONE and ok.brokers
