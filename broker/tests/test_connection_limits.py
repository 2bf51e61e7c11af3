"""Connection limits (Kafka's ConnectionQuotas, KIP-402): max.connections.per.ip and its overrides
close an IP's extra connection at once; max.connections and listener.name.<l>.max.connections
make a listener stop accepting until a connection closes; the inter-broker listener is exempt and
takes room from the least recently used connection of another listener; all of them change at
run time and are checked as Kafka checks them."""

from __future__ import annotations

import struct

import pytest
import trio

from strom.broker.config import BrokerConfig, ConfigError, parse_ip_overrides
from strom.broker.server.root import BrokerServer
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, -1)
FRAME = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0


async def _serve(tmp_path, nursery, listeners: str = "PLAINTEXT://127.0.0.1:0", **props) -> tuple[BrokerServer, dict]:
    config = {"listeners": listeners, "log.dirs": str(tmp_path)}
    if "INTERNAL" in listeners:
        config.update(
            {
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
            }
        )
    config.update(props)
    broker = BrokerServer(BrokerConfig(config))
    bound = await nursery.start(broker.run)
    return broker, {b.listener.name: b.listener.port for b in bound}


async def _open(port: int) -> trio.SocketStream:
    """A connection that has been answered once (so it is admitted and served)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(FRAME)
    with trio.fail_after(10):
        assert await stream.receive_some(4), "answered"
    await stream.receive_some(65536)  # the rest of the small answer
    return stream


async def _closed_unanswered(stream: trio.SocketStream) -> bool:
    try:
        await stream.send_all(FRAME)
        with trio.fail_after(10):
            return await stream.receive_some(4) == b""
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return True


async def _until(predicate) -> None:
    with trio.fail_after(10):
        while not predicate():
            await trio.sleep(0.01)


async def _answered_now(stream: trio.SocketStream) -> bool:
    with trio.move_on_after(0.05):
        return bool(await stream.receive_some(4))
    return False


async def test_a_connection_over_the_per_ip_limit_is_closed_at_once(tmp_path, nursery):
    broker, ports = await _serve(tmp_path, nursery, **{"max.connections.per.ip": "2"})
    port = ports["PLAINTEXT"]
    first, second = await _open(port), await _open(port)
    extra = await trio.open_tcp_stream("127.0.0.1", port)
    assert await _closed_unanswered(extra), "a third connection from 127.0.0.1 is closed unserved"
    quotas = broker.connection_quotas
    assert quotas.refused_per_ip == 1 and quotas.ip_counts == {"127.0.0.1": 2}
    await first.aclose()
    await _until(lambda: quotas.ip_counts.get("127.0.0.1") == 1)
    third = await _open(port)  # room again once one closed
    for s in (second, third, extra):
        await s.aclose()
    await _until(lambda: quotas.total == 0)


async def test_overrides_give_an_address_or_a_host_name_its_own_limit(tmp_path, nursery):
    broker, ports = await _serve(
        tmp_path,
        nursery,
        **{"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:2, 10.9.9.9:7"},
    )
    port = ports["PLAINTEXT"]
    opened = [await _open(port), await _open(port)]
    assert await _closed_unanswered(await trio.open_tcp_stream("127.0.0.1", port))
    # dynamic: a host name resolves to its addresses; the default applies to the others
    await broker.admin.set_broker_configs("", {"max.connections.per.ip.overrides": "localhost:3"})
    opened.append(await _open(port))
    assert await _closed_unanswered(await trio.open_tcp_stream("127.0.0.1", port))
    await broker.admin.set_broker_configs(
        "", {"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "10.9.9.9:7"}
    )
    assert await _closed_unanswered(await trio.open_tcp_stream("127.0.0.1", port))
    assert broker.connection_quotas.refused_per_ip == 3
    for s in opened:
        await s.aclose()
    nursery.cancel_scope.cancel()


async def test_at_max_connections_a_new_connection_waits_until_one_closes(tmp_path, nursery):
    broker, ports = await _serve(tmp_path, nursery, **{"max.connections": "2"})
    port = ports["PLAINTEXT"]
    first, second = await _open(port), await _open(port)
    waiting = await trio.open_tcp_stream("127.0.0.1", port)  # the kernel completes the handshake
    await waiting.send_all(FRAME)
    state = broker.connection_quotas.state("PLAINTEXT")
    await _until(lambda: state.blocked_since is not None)
    assert not await _answered_now(waiting), "not served while two are open"
    await first.aclose()
    with trio.fail_after(10):
        assert await waiting.receive_some(4), "served once a connection closed"
    assert broker.connection_quotas.blocked == 1 and broker.connection_quotas.total == 2
    metrics = broker.connection_quotas.listener_metrics()["PLAINTEXT"]
    assert 0 < metrics["blocked_fraction"] <= 1
    # raised at run time: a waiting listener accepts at once
    third = await trio.open_tcp_stream("127.0.0.1", port)
    await third.send_all(FRAME)
    await _until(lambda: state.blocked_since is not None)
    await broker.admin.set_broker_configs(str(broker.node_id), {"max.connections": "3"})
    with trio.fail_after(10):
        assert await third.receive_some(4)
    for s in (second, waiting, third):
        await s.aclose()
    nursery.cancel_scope.cancel()


async def test_a_listener_limit_stops_that_listener_only(tmp_path, nursery):
    broker, ports = await _serve(
        tmp_path,
        nursery,
        "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        **{"listener.name.external.max.connections": "1"},
    )
    kept = await _open(ports["EXTERNAL"])
    waiting = await trio.open_tcp_stream("127.0.0.1", ports["EXTERNAL"])
    await waiting.send_all(FRAME)
    await _until(lambda: broker.connection_quotas.state("EXTERNAL").blocked_since is not None)
    internal = [await _open(ports["INTERNAL"]) for _ in range(3)]
    assert not await _answered_now(waiting)
    await broker.admin.set_broker_configs("", {"listener.name.external.max.connections": "2"})
    with trio.fail_after(10):
        assert await waiting.receive_some(4)
    for s in (kept, waiting, *internal):
        await s.aclose()
    nursery.cancel_scope.cancel()


async def test_the_inter_broker_listener_takes_room_from_the_least_recently_used_connection(tmp_path, nursery):
    broker, ports = await _serve(
        tmp_path, nursery, "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0", **{"max.connections": "2"}
    )
    idle = await _open(ports["EXTERNAL"])
    busy = await _open(ports["EXTERNAL"])
    await busy.send_all(FRAME)  # busy was used last
    with trio.fail_after(10):
        assert await busy.receive_some(65536)
    internal = await _open(ports["INTERNAL"])  # exempt: served although two are open
    assert await _closed_unanswered(idle), "the least recently used client connection made room"
    await busy.send_all(FRAME)
    with trio.fail_after(10):
        assert await busy.receive_some(65536), "the other one stays"
    quotas = broker.connection_quotas
    await _until(lambda: quotas.total == 2)
    assert quotas.closed_excess == 1 and quotas.state("EXTERNAL").closed_excess == 1
    # a lower limit set at run time closes the least recently used connection too
    await broker.admin.set_broker_configs("", {"max.connections": "1"})
    assert await _closed_unanswered(busy)
    await _until(lambda: quotas.total == 1)
    await internal.aclose()
    nursery.cancel_scope.cancel()


def test_ip_overrides_are_read_as_kafka_reads_them():
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides(" 127.0.0.1 : 5 , ::1:6 ,") == {"127.0.0.1": 5, "::1": 6}, (
        "split at the last colon; a trailing comma is dropped"
    )
    assert parse_ip_overrides("host:+3") == {"host": 3}
    for raw, message in [
        ("abc", "Error parsing configuration property 'max.connections.per.ip.overrides': begin 0, end -1, length 3"),
        (
            "a:1,,b:2",
            "Error parsing configuration property 'max.connections.per.ip.overrides': begin 0, end -1, length 0",
        ),
        ("a:x", 'For input string: "x"'),
        ("a:99999999999", 'For input string: "99999999999"'),
    ]:
        with pytest.raises(ValueError) as caught:
            parse_ip_overrides(raw)
        assert str(caught.value) == message


@pytest.mark.parametrize(
    "props, complaint",
    [
        ({"max.connections.per.ip": "0"}, "max.connections.per.ip can be set to zero only if"),
        ({"max.connections.per.ip.overrides": "localhost"}, "begin 0, end -1"),
        ({"max.connections": "-1"}, "must be at least 0"),
        ({"listener.name.plaintext.max.connections": "-1"}, "must be at least 0"),
        ({"listener.name.plaintext.max.connections": "many"}, "not a number"),
    ],
)
def test_invalid_limits_stop_the_start(tmp_path, props, complaint):
    with pytest.raises(ConfigError) as caught:
        BrokerConfig({"log.dirs": str(tmp_path), **props})
    assert complaint in str(caught.value)


async def test_dynamic_limits_are_checked_as_kafka_checks_them(tmp_path, nursery):
    """The answers of Kafka 4.0 to the same IncrementalAlterConfigs (validate_only)."""
    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)

        async def alter(*configs, name="0"):
            body = {
                "resources": [
                    {
                        "resource_type": 4,
                        "resource_name": name,
                        "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs],
                    }
                ],
                "validate_only": True,
            }
            result = (await client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)).responses[0]
            return result.error_code, result.error_message

        bad = ErrorCode.INVALID_REQUEST
        dynamic_zero = (
            "Invalid value org.apache.kafka.common.config.ConfigException: Invalid {} 0 for configuration "
            "Invalid dynamic configuration"
        )
        for configs, answer in [
            (
                (("max.connections", "-1"),),
                (bad, "Invalid value -1 for configuration max.connections: Value must be at least 0"),
            ),
            (
                (("max.connections", "abc"),),
                (bad, "Invalid value abc for configuration max.connections: Not a number of type INT"),
            ),
            ((("max.connections", "0"),), (bad, dynamic_zero.format("max.connections"))),
            ((("listener.name.plaintext.max.connections", "0"),), (bad, dynamic_zero.format("max.connections"))),
            ((("max.connection.creation.rate", "0"),), (bad, dynamic_zero.format("max.connection.creation.rate"))),
            (
                (("listener.name.plaintext.max.connections", "-3"),),
                (bad, "Invalid value -3 for configuration max.connections: Value must be at least 0"),
            ),
            (
                (("max.connections.per.ip", "0"),),
                (
                    bad,
                    "requirement failed: max.connections.per.ip can be set to zero only if "
                    "max.connections.per.ip.overrides property is set.",
                ),
            ),
            (
                (("max.connections.per.ip", "0"), ("max.connections", "0")),
                (
                    bad,
                    "requirement failed: max.connections.per.ip can be set to zero only if "
                    "max.connections.per.ip.overrides property is set.",
                ),
            ),
            (
                (("max.connections", "0"), ("max.connections.per.ip", "abc")),
                (bad, "Invalid value abc for configuration max.connections.per.ip: Not a number of type INT"),
            ),
            (
                (("max.connections.per.ip.overrides", "abc"),),
                (
                    bad,
                    "Error parsing configuration property 'max.connections.per.ip.overrides': "
                    "begin 0, end -1, length 3",
                ),
            ),
            ((("max.connections.per.ip.overrides", "127.0.0.1:x"),), (bad, 'For input string: "x"')),
            ((("max.connections.per.ip", "0"), ("max.connections.per.ip.overrides", "127.0.0.1:5")), (0, None)),
            ((("max.connections", "100"), ("listener.name.plaintext.max.connections", "50")), (0, None)),
            ((("max.connections.per.ip.overrides", "127.0.0.1:-1,no.such.host.invalid:5"),), (0, None)),
        ]:
            assert await alter(*configs) == answer, configs
    finally:
        b.close()


async def test_limits_set_dynamically_are_described(tmp_path, nursery):
    b = make_broker(tmp_path, max_connections_per_ip=10)
    try:
        client = open_client(b, nursery)
        body = {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "0",
                    "configs": [
                        {"name": "max.connections.per.ip.overrides", "config_operation": 0, "value": "127.0.0.1:5"},
                        {"name": "listener.name.plaintext.max.connections", "config_operation": 0, "value": "7"},
                    ],
                }
            ],
            "validate_only": False,
        }
        assert (await client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)).responses[0].error_code == 0
        described = await client.request(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {
                        "resource_type": 4,
                        "resource_name": "0",
                        "configuration_keys": [
                            "max.connections.per.ip.overrides",
                            "listener.name.plaintext.max.connections",
                            "max.connections.per.ip",
                        ],
                    }
                ],
                "include_synonyms": True,
                "include_documentation": False,
            },
        )
        entries = {c.name: c for c in described.results[0].configs}
        assert entries["max.connections.per.ip.overrides"].value == "127.0.0.1:5"
        assert entries["max.connections.per.ip.overrides"].config_type == 2  # STRING
        assert entries["max.connections.per.ip.overrides"].read_only is False
        assert entries["listener.name.plaintext.max.connections"].value == "7"
        assert [s.name for s in entries["listener.name.plaintext.max.connections"].synonyms] == [
            "listener.name.plaintext.max.connections",
            "max.connections",
        ]
        assert (entries["max.connections.per.ip"].value, entries["max.connections.per.ip"].read_only) == ("10", False)
        quotas = b.connection_quotas
        assert quotas.listener_max("PLAINTEXT") == 7 and quotas.max_connections() == 2**31 - 1
    finally:
        b.close()


async def test_metrics_show_connections_refusals_and_replication_byte_rates(tmp_path, nursery):
    from prometheus_client.parser import text_string_to_metric_families

    from strom.broker.console.metrics import collect, render
    from strom.broker.console.source import BrokerSource

    broker, ports = await _serve(tmp_path, nursery, **{"max.connections.per.ip": "1"})
    kept = await _open(ports["PLAINTEXT"])
    assert await _closed_unanswered(await trio.open_tcp_stream("127.0.0.1", ports["PLAINTEXT"]))
    broker.leader_quota.record(3000, trio.current_time())
    text = render(await collect(BrokerSource(broker))).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    listener = (("listener", "PLAINTEXT"),)
    assert samples[("kafka_server_socketservermetrics_connection_count", listener)] == 1
    assert (
        samples[
            (
                "kafka_server_socketservermetrics_connection_rejected_total",
                (*listener, ("reason", "max.connections.per.ip")),
            )
        ]
        == 1
    )
    assert samples[("kafka_server_socketservermetrics_connection_accept_rate", listener)] > 0
    assert samples[("kafka_network_acceptor_acceptorblockedpercent", listener)] == 0
    assert samples[("kafka_server_leaderreplication_byte_rate", ())] > 0
    assert samples[("kafka_server_followerreplication_byte_rate", ())] == 0
    await kept.aclose()
    nursery.cancel_scope.cancel()


def test_strom_serve_exits_non_zero_on_an_invalid_limit(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from strom.broker import cli

    monkeypatch.setattr(cli.logs, "setup", lambda level: None)  # leave the test run's logging alone
    main = cli.main

    result = CliRunner().invoke(
        main,
        [
            "serve",
            "--override",
            f"log.dirs={tmp_path}",
            "--override",
            "max.connections.per.ip.overrides=127.0.0.1:lots",
        ],
    )
    assert result.exit_code != 0
    assert (
        "invalid configuration: max.connections.per.ip.overrides='127.0.0.1:lots': For input string: \"lots\""
        in result.output
    )
