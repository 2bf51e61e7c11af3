"""Run a real ZooKeeper (Debian's ``zookeeper`` package) as a child process for tests.

``ZooKeeperServer(workdir)`` writes ``workdir/zoo.cfg`` (standalone, 127.0.0.1 only, a port
the OS picked, no admin server, ``tickTime=500`` so sessions can be as short as 1 s) and
runs ``java ... org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`` with the
package's jar. ``start()`` returns once the server serves requests (``srvr`` reports its mode). ``stop()``
sends SIGTERM, then SIGKILL; ``kill()`` sends SIGKILL at once; both touch only the child's
own pid, and ``start()`` again reuses the port and data dir. Output goes to
``workdir/zookeeper.log`` (``log_tail()`` for test reports).

``zookeeper_fixture`` is a generator for a pytest fixture; register it in a conftest with::

    from strom.testing.zookeeper import zookeeper_fixture
    zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)

It skips the test with the reason when Java or the package is missing, and fails instead
when ``STROM_COMPAT_REQUIRE_ALL=1`` (CI installs the package: ``apt-get install zookeeper``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

HOST = "127.0.0.1"
ZOOKEEPER_JAR_CANDIDATES = (Path("/usr/share/java/zookeeper.jar"), Path("/usr/share/zookeeper/zookeeper.jar"))
LOGGER_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 500
MIN_SESSION_TIMEOUT_MS = 1000
MAX_SESSION_TIMEOUT_MS = 30000
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05
LOG_TAIL_CHARS = 20_000


class ZooKeeperError(RuntimeError):
    """ZooKeeper could not be started, or is not installed."""


def zookeeper_jar() -> Path | None:
    return next((jar for jar in ZOOKEEPER_JAR_CANDIDATES if jar.is_file()), None)


def unavailable() -> str | None:
    """Why a real ZooKeeper cannot run here (None when it can)."""
    if shutil.which("java") is None:
        return "`java` is not installed (Debian's zookeeper package brings it)"
    if zookeeper_jar() is None:
        return "Debian's `zookeeper` package is not installed (apt-get install zookeeper)"
    return None


def require_all() -> bool:
    """In CI a missing ZooKeeper fails the tests instead of skipping them."""
    return os.environ.get("STROM_COMPAT_REQUIRE_ALL", "") not in ("", "0")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``stat``) and return the answer."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """One standalone ZooKeeper child process with its own config, data dir and log."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:<port>``; append ``/chroot`` for a chrooted client."""
        if self.port is None:
            raise ZooKeeperError("ZooKeeper has not been started")
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ZooKeeperServer:
        reason = unavailable()
        if reason is not None:
            raise ZooKeeperError(reason)
        if self._process is not None:
            raise ZooKeeperError("ZooKeeper is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = free_port()
        config = self._write_config()
        self._log = open(self.workdir / "zookeeper.log", "ab")
        self._process = subprocess.Popen(
            self._command(config),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``; only this server's own process."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        self._end(signal.SIGKILL)

    def log_tail(self) -> str:
        path = self.workdir / "zookeeper.log"
        return path.read_text("utf-8", "replace")[-LOG_TAIL_CHARS:] if path.exists() else ""

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> Path:
        data_dir = self.workdir / "data"
        data_dir.mkdir(exist_ok=True)
        lines = {
            "tickTime": TICK_MS,
            "dataDir": data_dir,
            "clientPort": self.port,
            "clientPortAddress": HOST,
            "admin.enableServer": "false",
            "minSessionTimeout": MIN_SESSION_TIMEOUT_MS,
            "maxSessionTimeout": MAX_SESSION_TIMEOUT_MS,
            "4lw.commands.whitelist": "ruok,stat,srvr",
            "maxClientCnxns": 0,
        }
        path = self.workdir / "zoo.cfg"
        path.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        return path

    def _command(self, config: Path) -> list[str]:
        classpath = [str(zookeeper_jar())]
        if LOGGER_JAR.is_file():
            classpath.append(str(LOGGER_JAR))
        return [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            f"-Dzookeeper.log.dir={self.workdir}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            os.pathsep.join(classpath),
            MAIN_CLASS,
            str(config),
        ]

    def _wait_ready(self) -> None:
        assert self._process is not None and self.port is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ZooKeeperError(f"ZooKeeper exited with {self._process.returncode}:\n{self.log_tail()}")
            try:
                # ``ruok`` says imok before the server serves; ``srvr`` reports a Mode once it does.
                if "Mode:" in four_letter_word(self.port, "srvr"):
                    return
            except OSError:
                pass
            time.sleep(POLL_INTERVAL_S)
        raise ZooKeeperError(f"ZooKeeper did not answer within {READY_TIMEOUT_S}s:\n{self.log_tail()}")

    def _end(self, sig: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def zookeeper_fixture(tmp_path_factory) -> Iterator[ZooKeeperServer]:  # type: ignore[no-untyped-def]
    """A running ZooKeeper for the fixture's scope; stopped afterwards, also on failure."""
    import pytest

    reason = unavailable()
    if reason is not None:
        if require_all():
            pytest.fail(f"ZooKeeper is required (STROM_COMPAT_REQUIRE_ALL=1): {reason}")
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()
