"""The nemesis proxy itself (compat_tests/support/netproxy.py) against an echo server on 127.0.0.1: bytes
flow, a cut resets connections and refuses new ones, a stall holds bytes until healed, a delay
holds each chunk, and a Kafka request's client id picks the link."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from compat_tests.support.netproxy import Link, Proxy, kafka_client_id


@pytest.fixture
def echo():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve(conn):
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def loop():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(5)
    server.close()


def connect(proxy: Proxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=3)
    return sock


def roundtrip(sock: socket.socket, data: bytes = b"ping") -> bytes:
    sock.sendall(data)
    return sock.recv(4096)


@pytest.fixture
def proxy(echo):
    with Proxy("echo", echo) as p:
        yield p


def connected(proxy: Proxy) -> socket.socket:
    """A connection through the proxy that has carried one round trip."""
    sock = connect(proxy)
    assert roundtrip(sock) == b"ping"
    return sock


def test_cut_resets_and_refuses_until_healed(proxy):
    sock = connected(proxy)
    proxy.link.cut()
    sock.settimeout(3)
    try:
        assert sock.recv(10) == b""
    except ConnectionResetError:
        pass  # the reset reached us: what a cut does
    refused = connect(proxy)
    assert refused.recv(10) == b""  # accepted, then closed at once
    proxy.link.heal()
    assert roundtrip(connect(proxy)) == b"ping"


def test_stall_holds_bytes_until_healed(proxy):
    sock = connected(proxy)
    proxy.link.stall()
    sock.settimeout(0.5)
    sock.sendall(b"held")
    with pytest.raises((socket.timeout, TimeoutError)):
        sock.recv(10)
    proxy.link.heal()
    sock.settimeout(3)
    assert sock.recv(10) == b"held"


def test_delay_holds_each_chunk(proxy):
    sock = connected(proxy)
    proxy.link.delay(0.3)
    started = time.monotonic()
    assert roundtrip(sock) == b"ping"
    assert time.monotonic() - started >= 0.5  # held once each way


def test_kafka_client_id_picks_the_link(echo):
    links = {"strom-replica-1": Link("1->0"), "strom-replica-2": Link("2->0")}

    def classify(sock):
        client_id, consumed = kafka_client_id(sock)
        return links[client_id], consumed

    def request(client_id: str) -> bytes:
        raw = client_id.encode()
        body = struct.pack(">hhih", 1, 12, 7, len(raw)) + raw + b"rest"
        return struct.pack(">i", len(body)) + body

    with Proxy("kafka", echo, classify=classify) as proxy:
        one, two = connect(proxy), connect(proxy)
        links["strom-replica-1"].stall()
        one.sendall(request("strom-replica-1"))
        two.sendall(request("strom-replica-2"))
        expected = request("strom-replica-2")
        got = b""
        while len(got) < len(expected):
            got += two.recv(4096)
        assert got == expected  # the consumed header is passed on
        one.settimeout(0.5)
        with pytest.raises((socket.timeout, TimeoutError)):
            one.recv(10)
        links["strom-replica-1"].heal()
        one.settimeout(3)
        got = b""
        while len(got) < len(request("strom-replica-1")):
            got += one.recv(4096)
        assert got == request("strom-replica-1")
