"""The run's trace: every request and answer of the clients, every fault, and the cluster's
leadership, high-watermark and truncation changes as sampled, each with the simulated time.

Lines hold no wall-clock time, process id or temporary path, so one seed gives byte-for-byte the
same trace in every run (:meth:`Trace.digest`): the run's scratch directory, which the brokers
name in log lines and in error messages they send to clients, is written as ``<dir>``.
"""

from __future__ import annotations

import hashlib

import trio

ROOT_MARK = "<dir>"


class Trace:
    def __init__(self, root: str = "") -> None:
        self.lines: list[str] = []
        self.root = root  # the run's scratch directory: written as <dir>

    def add(self, who: str, text: str) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:
            now = 0.0
        if self.root and self.root in text:
            text = text.replace(self.root, ROOT_MARK)
        self.lines.append(f"{now:10.4f} {who:<10} {text}")

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

    def text(self, *, only: tuple[str, ...] | None = None) -> str:
        lines = self.lines if only is None else [ln for ln in self.lines if any(k in ln for k in only)]
        return "\n".join(lines)
