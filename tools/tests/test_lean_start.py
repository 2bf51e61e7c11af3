"""A default standalone start loads none of the optional heavy modules: the web console
(hypercorn, starlette, jinja2), TLS certificate tooling (cryptography), ZooKeeper (kazoo),
clustering, the CLI tools, fault injection. Each is imported where it is first used, so a test
session's first broker and `strom serve` do not pay for them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

HEAVY = [
    "hypercorn",
    "starlette",
    "jinja2",
    "cryptography",
    "kazoo",
    "strom.broker.console",
    "strom.broker.cluster",
    "strom.tools",
]
# the embedded broker also leaves the CLI and fault injection alone until a test uses them
EMBEDDED_ALSO = ["click", "strom.testing.faults", "strom.testing.control_endpoint"]
# a broker started without control.listener has no test hook loaded (strom.testing)
SERVE_ALSO = ["strom.testing"]


def test_embedded_broker_start_loads_no_optional_module(tmp_path):
    script = textwrap.dedent(f"""
        import json, socket, sys
        from strom.protocol.connection import CLIENT, NEED_DATA, Connection, Response
        from strom.testing import broker
        with broker() as b:
            host, port = b.bootstrap_servers.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as s:  # one ApiVersions v0
                conn = Connection(CLIENT)
                s.sendall(conn.send_request(18, 0, {{}}))
                while (event := conn.next_event()) is NEED_DATA:
                    conn.receive_data(s.recv(65536))
                assert isinstance(event, Response) and event.body.error_code == 0
        print(json.dumps(sorted(m for m in sys.modules
                                if any(m == h or m.startswith(h + ".") for h in {HEAVY + EMBEDDED_ALSO!r}))))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_strom_serve_start_loads_no_optional_module(tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "strom.broker",
            "serve",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
            "--ready-file",
            str(ready),
            "--log-level",
            "WARNING",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"},
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "strom serve did not start"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    assert "strom.broker.server.root" in imported  # the check sees the broker's own imports
    assert sorted(m for m in imported if any(m == h or m.startswith(h + ".") for h in HEAVY + SERVE_ALSO)) == []
