"""Without TLS, SASL or an authorizer the security APIs answer as Kafka 4.0 does (checked against
the reference broker): ACL APIs SECURITY_DISABLED, SASL APIs ILLEGAL_SASL_STATE."""

from __future__ import annotations

import pytest

from strom.protocol.codec import encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

FILTER = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}
CREATION = {
    "resource_type": 2,
    "resource_name": "t",
    "resource_pattern_type": 3,
    "principal": "User:a",
    "host": "*",
    "operation": 3,
    "permission_type": 3,
}


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_acl_apis_answer_security_disabled_without_an_authorizer(connect, version):
    client = await connect()
    described = await client.request(ApiKey.DESCRIBE_ACLS, version, FILTER)
    assert (described.error_code, described.error_message, described.resources) == (
        ErrorCode.SECURITY_DISABLED,
        "No Authorizer is configured on the broker",
        [],
    )
    created = await client.request(ApiKey.CREATE_ACLS, version, {"creations": [CREATION, CREATION]})
    assert [(r.error_code, r.error_message) for r in created.results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    ] * 2
    deleted = await client.request(ApiKey.DELETE_ACLS, version, {"filters": [FILTER]})
    assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.", [])
    ]


async def test_acl_apis_v0_are_not_offered_as_in_kafka_4(connect):
    client = await connect()
    versions = await client.request(ApiKey.API_VERSIONS, 2, {})
    offered = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert offered[ApiKey.DESCRIBE_ACLS] == offered[ApiKey.CREATE_ACLS] == offered[ApiKey.DELETE_ACLS] == (1, 3)
    assert offered[ApiKey.SASL_HANDSHAKE] == (0, 1) and offered[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    await client.stream.send_all(encode_request(ApiKey.DESCRIBE_ACLS, 0, 9, "t", FILTER))
    with pytest.raises(EOFError):
        await client.receive_frame()


@pytest.mark.parametrize("version", [0, 1])
async def test_sasl_handshake_on_a_plaintext_listener_is_an_illegal_state(connect, version):
    client = await connect()
    response = await client.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": "PLAIN"})
    assert (response.error_code, response.mechanisms) == (ErrorCode.ILLEGAL_SASL_STATE, [])
    assert (await client.request(ApiKey.API_VERSIONS, 2, {})).error_code == ErrorCode.NONE, "connection stays open"


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_sasl_authenticate_on_a_plaintext_listener_is_an_illegal_state(connect, version):
    client = await connect()
    response = await client.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": b"\0user\0secret"})
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert response.error_message == "SaslAuthenticate request received after successful authentication"
    assert response.auth_bytes == b""
