"""Listening before the broker loads: connections made meanwhile wait in the backlog and are served."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from strom.broker.config import BrokerConfig, ConfigError, Listener
from strom.broker.server.listen import bind_listener, bind_listeners
from strom.broker.server.root import BrokerServer
from strom.protocol.connection import CLIENT, NEED_DATA, Connection, Response
from strom.protocol.schema import ApiKey


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_port_zero_gets_a_port_and_connections_complete_before_accept() -> None:
    bound = bind_listener(Listener("PLAINTEXT", "127.0.0.1", 0))
    try:
        assert bound.port != 0
        assert [s.getsockname()[1] for s in bound.sockets] == [bound.port]
        with socket.create_connection(("127.0.0.1", bound.port), timeout=5) as client:
            client.sendall(b"early bytes")
            conn, _ = bound.sockets[0].accept()
            with conn:
                conn.settimeout(5)
                assert conn.recv(64) == b"early bytes"
    finally:
        bound.close()


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 loopback on this machine")
def test_ipv6_loopback() -> None:
    bound = bind_listener(Listener("PLAINTEXT", "::1", 0))
    try:
        with socket.create_connection(("::1", bound.port), timeout=5):
            pass
    finally:
        bound.close()


def test_port_in_use_says_what_to_do_and_leaves_nothing_bound() -> None:
    first = bind_listener(Listener("PLAINTEXT", "127.0.0.1", 0))
    free = bind_listener(Listener("PLAINTEXT", "127.0.0.1", 0))
    free_port = free.port
    free.close()
    try:
        with pytest.raises(ConfigError, match="choose another port"):
            bind_listeners(
                [Listener("PLAINTEXT", "127.0.0.1", free_port), Listener("PLAINTEXT", "127.0.0.1", first.port)]
            )
        # the first listener of the failed call was closed again: its port can be bound
        again = bind_listener(Listener("PLAINTEXT", "127.0.0.1", free_port))
        again.close()
    finally:
        first.close()


def test_serve_on_a_taken_port_exits_non_zero_with_the_reason(tmp_path) -> None:
    taken = bind_listener(Listener("PLAINTEXT", "127.0.0.1", 0))
    try:
        # a child process with a deadline: a broker that did start would be killed, not served forever
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "strom.broker",
                "serve",
                "--override",
                f"listeners=PLAINTEXT://127.0.0.1:{taken.port}",
                "--override",
                f"log.dirs={tmp_path}",
            ],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        taken.close()
    assert result.returncode != 0
    assert "choose another port" in result.stderr + result.stdout


async def test_a_request_sent_before_the_broker_serves_is_answered(tmp_path) -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)})
    prebound = bind_listeners(config.listeners)
    client = socket.create_connection(("127.0.0.1", prebound[0].port), timeout=10)
    try:
        # the request waits in the socket while the broker is not even constructed
        conn = Connection(CLIENT, client_id="test")
        client.sendall(conn.send_request(ApiKey.API_VERSIONS, 0, {}, correlation_id=7))
        broker = BrokerServer(config)
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(broker.run, prebound)
            assert bound[0].listener.port == prebound[0].port
            while (event := conn.next_event()) is NEED_DATA:
                conn.receive_data(await trio.to_thread.run_sync(client.recv, 65536))
            assert isinstance(event, Response), f"broker closed the connection: {event}"
            assert (event.correlation_id, event.body.error_code) == (7, 0)
            nursery.cancel_scope.cancel()
    finally:
        client.close()
