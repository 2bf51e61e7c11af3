"""Run a real Strom broker as a child process (the benchmark, the pipeline and the black-box tests use it).

The broker is started as ``sys.executable -m strom.broker serve`` with a ready file; it writes
that file (JSON, ``{"host", "port", "pid", "listeners"}``) once it listens. Everything
binds to 127.0.0.1; the first start asks the OS for a port, restarts reuse it so a
client that is still running can reconnect to the same address.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HOST = "127.0.0.1"
READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.05
LOG_TAIL_CHARS = 20_000


class BrokerProcessError(RuntimeError):
    """The broker process did not start, or exited when it should be running."""


@dataclass(frozen=True)
class ReadyInfo:
    """Content of the ready file the broker writes once it listens."""

    host: str
    port: int
    pid: int
    listeners: tuple[str, ...]
    control: str | None = None  # host:port of the test control endpoint, when it runs

    @classmethod
    def from_json(cls, text: str) -> ReadyInfo:
        try:
            doc = json.loads(text)
            return cls(
                host=str(doc["host"]),
                port=int(doc["port"]),
                pid=int(doc["pid"]),
                listeners=tuple(doc.get("listeners", ())),
                control=doc.get("control"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BrokerProcessError(f"malformed ready file: {text!r}") from exc


class BrokerProcess:
    """One Strom broker child process, with its own log dir and captured output.

    ``overrides`` are Kafka config keys passed as ``--override key=value``; the
    fixture always sets ``listeners``, ``log.dirs`` and the ready file itself.
    stdout and stderr go to ``<workdir>/broker.out`` / ``broker.err`` (appended across
    restarts, so the log tells the whole story of a test).
    """

    def __init__(self, workdir: Path, overrides: Mapping[str, str] | None = None, *, port: int = 0) -> None:
        self.workdir = Path(workdir)
        self.log_dir = self.workdir / "data"
        self.ready_file = self.workdir / "ready.json"
        self.stdout_path = self.workdir / "broker.out"
        self.stderr_path = self.workdir / "broker.err"
        self.overrides: dict[str, str] = dict(overrides or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._files: list[IO[bytes]] = []
        self.info: ReadyInfo | None = None
        self._port = port

    # -- addresses -------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self.info is None:
            raise BrokerProcessError("broker is not running")
        return self.info.port

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the running broker."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise BrokerProcessError("broker is not running")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle -------------------------------------------------------------------
    def command(self) -> list[str]:
        settings = {
            "log.dirs": str(self.log_dir),
            **self.overrides,
            "listeners": f"PLAINTEXT://{HOST}:{self._port}",
        }
        cmd = [sys.executable, "-m", "strom.broker", "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd + ["--ready-file", str(self.ready_file)]

    def start(self, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        if self.running:
            raise BrokerProcessError("broker already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        self._close_files()
        out = open(self.stdout_path, "ab")
        err = open(self.stderr_path, "ab")
        self._files = [out, err]
        self._proc = subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.info = self._wait_ready(timeout)
        self._port = self.info.port
        return self

    def _wait_ready(self, timeout: float) -> ReadyInfo:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                return ReadyInfo.from_json(self.ready_file.read_text())
            code = self._proc.poll()
            if code is not None:
                raise BrokerProcessError(f"broker exited with code {code} before it was ready\n{self.log_tail()}")
            time.sleep(POLL_INTERVAL_S)
        self.kill()
        raise BrokerProcessError(f"broker not ready within {timeout:.0f}s (no {self.ready_file})\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        self.info = None
        self._close_files()
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL the broker (the crash test): nothing gets flushed or closed cleanly."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._proc = None
        self.info = None
        self._close_files()
        return proc.returncode

    def restart(self, *, crash: bool = False, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        """Stop (or SIGKILL with ``crash``) and start again on the same port and log dir."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start(timeout)

    def _close_files(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    # -- diagnostics -----------------------------------------------------------------
    def log_tail(self, limit: int = LOG_TAIL_CHARS) -> str:
        parts = []
        for path in (self.stdout_path, self.stderr_path):
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- {path.name} ---\n{text[-limit:]}")
        return "\n".join(parts)

    def __enter__(self) -> BrokerProcess:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.bootstrap if self.info else "stopped"
        return f"BrokerProcess({where}, workdir={str(self.workdir)!r})"
