"""The machine's own limits, measured in the same run as the broker benchmark.

Each function measures one reference the benchmark divides a broker figure by: loopback TCP
throughput and round-trip time on 127.0.0.1, sequential write + fsync on the log dir's
filesystem, the bare interpreter's start-up time and the resident memory of an interpreter that
has imported the broker but runs nothing. None of them touches the broker.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHUNK = 1 << 20
PING_SIZE = 64


class MeasurementError(RuntimeError):
    """A machine measurement could not run (socket, file or child process failure)."""


def _loopback_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname()[:2])
        peer, _ = server.accept()
    for sock in (client, peer):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, peer


def loopback_throughput(total_bytes: int) -> float:
    """Bytes per second one sender thread pushes through 127.0.0.1 to one receiver."""
    sender, receiver = _loopback_pair()
    block = b"\x5a" * CHUNK
    chunks = max(1, total_bytes // CHUNK)

    def send() -> None:
        for _ in range(chunks):
            sender.sendall(block)
        sender.shutdown(socket.SHUT_WR)

    buf = bytearray(CHUNK)
    received = 0
    try:
        thread = threading.Thread(target=send, daemon=True)
        start = time.perf_counter()
        thread.start()
        while (n := receiver.recv_into(buf)) > 0:
            received += n
        elapsed = time.perf_counter() - start
        thread.join()
    except OSError as exc:
        raise MeasurementError(f"loopback throughput: {exc}") from exc
    finally:
        sender.close()
        receiver.close()
    if received != chunks * CHUNK:
        raise MeasurementError(f"loopback throughput: received {received} of {chunks * CHUNK} bytes")
    return received / elapsed


def _recv_exact(sock: socket.socket, n: int) -> None:
    while n > 0:
        data = sock.recv(n)
        if not data:
            raise MeasurementError("loopback round trip: peer closed")
        n -= len(data)


def loopback_rtt(round_trips: int) -> float:
    """Median seconds for a 64-byte ping and its echo over 127.0.0.1 (one echo thread)."""
    client, peer = _loopback_pair()
    ping = b"p" * PING_SIZE

    def echo() -> None:
        try:
            for _ in range(round_trips):
                _recv_exact(peer, PING_SIZE)
                peer.sendall(ping)
        except (OSError, MeasurementError):
            pass

    samples = []
    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    try:
        for _ in range(round_trips):
            start = time.perf_counter()
            client.sendall(ping)
            _recv_exact(client, PING_SIZE)
            samples.append(time.perf_counter() - start)
    except OSError as exc:
        raise MeasurementError(f"loopback round trip: {exc}") from exc
    finally:
        client.close()
        peer.close()
        thread.join()
    return statistics.median(samples)


def disk_write(directory: Path, total_bytes: int) -> float:
    """Bytes per second of sequential 1 MiB writes plus a final fsync in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "strom-bench-disk.tmp"
    block = os.urandom(CHUNK)
    chunks = max(1, total_bytes // CHUNK)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            start = time.perf_counter()
            for _ in range(chunks):
                os.write(fd, block)
            os.fsync(fd)
            elapsed = time.perf_counter() - start
        finally:
            os.close(fd)
    except OSError as exc:
        raise MeasurementError(f"disk write in {directory}: {exc}") from exc
    finally:
        path.unlink(missing_ok=True)
    return chunks * CHUNK / elapsed


def _run_python(code: str) -> str:
    try:
        # from a neutral directory, as a user runs it: a source checkout in the working directory
        # would make modules importable that an installed strom does not have
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            cwd=tempfile.gettempdir(),
            text=True,
            timeout=60,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        raise MeasurementError(f"python -c {code!r} failed: {exc.stderr.strip()[-500:]}") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise MeasurementError(f"python -c {code!r}: {exc}") from exc
    return done.stdout


def interpreter_startup(runs: int) -> float:
    """Median seconds from spawning ``python -c pass`` to its exit."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        _run_python("pass")
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


BASELINE_RSS_CODE = (
    "import strom.broker.server.root, strom.broker.cli\n"
    "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')))\n"
)


def baseline_rss() -> int:
    """Resident bytes of an interpreter that imported the broker's modules and does nothing else."""
    out = _run_python(BASELINE_RSS_CODE).strip()
    try:
        return int(out) * 1024
    except ValueError as exc:
        raise MeasurementError(f"unexpected VmRSS output {out!r}") from exc


def proc_status_bytes(pid: int, key: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError as exc:
        raise MeasurementError(f"/proc/{pid}/status: {exc}") from exc
    raise MeasurementError(f"/proc/{pid}/status has no {key}")
