"""Hostile SASL exchanges on a SASL_PLAINTEXT listener (over trio memory streams): handshakes
naming odd mechanisms, then tokens no client sends (empty, NULs, 32 KiB, not UTF-8, SCRAM
messages cut or padded with hostile attributes, a SCRAM final after a well-formed first). Each
answer must decode with Kafka's error codes (or the connection close with a log line), nothing
may log an unexpected error or a password, nothing may authenticate, and a fresh connection is
still served. Fixed cases: deterministic, a few seconds."""

from __future__ import annotations

import base64
import logging
import struct

import trio

from strom.broker.config import BrokerConfig
from strom.broker.server.root import BrokerServer
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_fuzz_apis import KNOWN_ERROR_CODES, _error_codes
from .test_security import open_listener, sasl_props

BIG = 32 * 1024
SECRETS = ("alice-secret", "admin-secret")
TOKENS = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"\x00\x00\x00\x00",
    b"\x00alice",
    b"alice\x00\x00",
    b"\x00alice\x00",
    b"\x00" * BIG,
    b"a" * BIG,
    b"\xff\xfe\x00\xc3\x28\x00",
    b"\x00alice\x00alice-secret\x00extra",
    b"admin\x00alice\x00alice-secret",  # authorization id of another user
    b"n,,",
    b"n,,n=,r=",
    b"n,,n=alice",
    b"y,,n=alice,r=x",
    b"p=tls-unique,,n=alice,r=x",
    b"n,a=admin,n=alice,r=x",
    b"n,,n=alice,r=" + b"x" * BIG,
    b"n,,n=" + b"\xff" * 10 + b",r=x",
    b"n,,n=al=2Cice=3D=ZZ,r=x",
    b"n,,n=alice,r=x,m=ext",
    b"c=biws,r=x,p=" + base64.b64encode(b"x" * 32),
    b"n,,auth=Bearer \x01\x01",
    b"n,,\x01auth=Bearer " + b"a" * BIG + b"\x01\x01",
]
SCRAM_FINALS = [
    b"",
    b"c=biws",
    b"c=biws,r=",
    b"c=,r=x,p=",
    b"c=biws,r=WRONG,p=" + base64.b64encode(b"p" * 32),
    b"c=\xff\xff,r=x,p=!!!",
    b"x" * BIG,
]
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
HOSTILE_MECHANISMS = ["", "plain", "GSSAPI", "x" * 32767, "SCRAM-SHA-1", "PLAIN\x00"]


async def _exchange(client, frames: list[tuple[int, int, bytes]]) -> list:
    """Send each frame in turn and read its answer; None once the connection is closed."""
    answers = []
    for api_key, version, frame in frames:
        try:
            await client.stream.send_all(frame)
            data = await client.receive_frame()
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            answers.append(None)
            break
        answers.append(decode_response(api_key, version, data)[1])
    return answers


def _handshake(mechanism: str, correlation: int = 1) -> tuple[int, int, bytes]:
    return (
        ApiKey.SASL_HANDSHAKE,
        1,
        encode_request(ApiKey.SASL_HANDSHAKE, 1, correlation, "fuzz", {"mechanism": mechanism}),
    )


def _authenticate(token: bytes, correlation: int) -> tuple[int, int, bytes]:
    return (
        ApiKey.SASL_AUTHENTICATE,
        2,
        encode_request(ApiKey.SASL_AUTHENTICATE, 2, correlation, "fuzz", {"auth_bytes": token}),
    )


def _cases():
    for mechanism in MECHANISMS:
        for i, token in enumerate(TOKENS):
            frames = [_handshake(mechanism), _authenticate(token, 2)]
            if mechanism == "OAUTHBEARER":  # the client's 0x01 after an error challenge (RFC 7628)
                frames.append(_authenticate(b"\x01", 3))
            yield f"{mechanism} token {i}", frames
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for i, final in enumerate(SCRAM_FINALS):
            yield (
                f"{mechanism} final {i}",
                [_handshake(mechanism), _authenticate(b"n,,n=alice,r=fuzznonce", 2), _authenticate(final, 3)],
            )
    for i, mechanism in enumerate(HOSTILE_MECHANISMS):
        yield f"mechanism {i}", [_handshake(mechanism), _authenticate(b"\x00alice\x00alice-secret", 2)]
    yield "authenticate before a handshake", [_authenticate(b"\x00alice\x00alice-secret", 1)]
    yield "a second handshake", [_handshake("PLAIN"), _handshake("PLAIN", 2)]
    yield (
        "Metadata before authenticating",
        [
            (
                ApiKey.METADATA,
                12,
                encode_request(ApiKey.METADATA, 12, 1, "fuzz", {"topics": None, "allow_auto_topic_creation": False}),
            )
        ],
    )
    yield "a frame cut in the handshake", [(ApiKey.SASL_HANDSHAKE, 1, struct.pack(">ihhi", 8, 17, 1, 1))]


async def test_hostile_sasl_exchanges(tmp_path, nursery, autojump_clock, caplog):
    caplog.set_level(logging.DEBUG, logger="strom")
    broker = BrokerServer(BrokerConfig(sasl_props(tmp_path)))
    broker.open_storage()
    failures = []
    try:
        # the harness sees a real login succeed (else "nothing authenticated" would prove nothing)
        genuine = open_listener(broker, nursery, "SASL_PLAINTEXT")
        ok = await _exchange(genuine, [_handshake("PLAIN"), _authenticate(b"\x00alice\x00alice-secret", 2)])
        await genuine.stream.aclose()
        assert ok[-1].error_code == ErrorCode.NONE and not ok[-1].auth_bytes
        for label, frames in _cases():
            caplog.clear()
            client = open_listener(broker, nursery, "SASL_PLAINTEXT")
            try:
                with trio.fail_after(3600):
                    answers = await _exchange(client, frames)
            except trio.TooSlowError:
                failures.append(f"{label}: no answer and no close")
                continue
            except Exception as exc:
                failures.append(f"{label}: undecodable answer {exc!r}")
                continue
            finally:
                await client.stream.aclose()
            await trio.testing.wait_all_tasks_blocked()
            for answer in answers:
                if answer is None:
                    continue
                codes = [c for _, c in _error_codes(answer)]
                if any(c not in KNOWN_ERROR_CODES for c in codes):
                    failures.append(f"{label}: unknown error codes {codes}")
            last = answers[-1] if answers else None
            if (
                last is not None
                and frames[-1][0] == ApiKey.SASL_AUTHENTICATE
                and last.error_code == ErrorCode.NONE
                and not (last.auth_bytes or b"").startswith((b"r=", b'{"status"'))
            ):
                # (a SCRAM server-first and an OAUTHBEARER error challenge are not a success)
                failures.append(f"{label}: authenticated")
            records = [r for r in caplog.records if r.name.startswith("strom")]
            for r in records:
                if r.levelno >= logging.ERROR or r.exc_info:
                    failures.append(f"{label}: logged {r.getMessage()!r}")
                if any(secret in r.getMessage() for secret in SECRETS):
                    failures.append(f"{label}: a password reached the log: {r.getMessage()[:200]!r}")
            if answers and answers[-1] is None and not any(r.levelno >= logging.INFO for r in records):
                failures.append(f"{label}: closed without a log line saying why")
            fresh = open_listener(broker, nursery, "SASL_PLAINTEXT")
            with trio.fail_after(3600):
                alive = await fresh.request(
                    ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
                )
            await fresh.stream.aclose()
            if alive.error_code != ErrorCode.NONE:
                failures.append(f"{label}: ApiVersions on a fresh connection answered {alive.error_code}")
        assert not failures, "\n".join(failures)
    finally:
        broker.close()
