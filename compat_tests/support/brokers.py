"""Real Strom brokers (``strom serve`` processes on 127.0.0.1) for the compat tests: the defaults
they start with and a factory that remembers what it started, so a fixture stops them all.

compat_tests/conftest.py builds its ``broker``, ``shared_broker`` and ``make_broker`` fixtures from
these; a test that needs a broker differently configured uses ``make_broker(overrides)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from strom.tools.broker_process import BrokerProcess

DEFAULT_OVERRIDES: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
}


def start_broker(workdir: Path, overrides: Mapping[str, str]) -> BrokerProcess:
    """A started broker in ``workdir`` with :data:`DEFAULT_OVERRIDES` and ``overrides`` over them."""
    return BrokerProcess(workdir, {**DEFAULT_OVERRIDES, **overrides}).start()


class BrokerFactory:
    """Starts brokers with extra config; remembers them so the fixture stops them all."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.started: list[BrokerProcess] = []

    def __call__(self, overrides: Mapping[str, str] | None = None) -> BrokerProcess:
        workdir = self.base / f"broker-{len(self.started)}"
        b = BrokerProcess(workdir, {**DEFAULT_OVERRIDES, **(overrides or {})})
        self.started.append(b)
        return b.start()

    def stop_all(self) -> None:
        for b in self.started:
            b.stop()


def brokers_in(value: object) -> list[BrokerProcess]:
    """The brokers a fixture value holds: a broker itself, or what a factory started."""
    if isinstance(value, BrokerProcess):
        return [value]
    return list(getattr(value, "started", []))
