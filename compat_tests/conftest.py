"""Fixtures that run a real Strom broker on 127.0.0.1 for the compat tests.

``broker`` is a fresh broker per test, ``shared_broker`` one per test module, and
``make_broker(**overrides)`` starts brokers with extra Kafka config keys (for example
``{"auto.create.topics.enable": "false"}``). All are stopped in finalizers, also when a
test fails, and a failing test's report carries the broker's stdout/stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Mapping

import pytest

from strom.tools.broker_process import BrokerProcess

COMPAT_TEST_TIMEOUT_S = 900
# A user's project with its own pytest.ini, run as a subprocess by test_sample_project.py.
collect_ignore = ["sample_project"]
DEFAULT_OVERRIDES = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
}

MakeBroker = Callable[..., BrokerProcess]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A hung client must not hang CI: bound every compat test when pytest-timeout is here."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(COMPAT_TEST_TIMEOUT_S))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        brokers = getattr(item, "funcargs", {}).values()
        for value in brokers:
            for b in _brokers_in(value):
                report.sections.append((f"strom broker log ({b.workdir})", b.log_tail()))
    return report


def _brokers_in(value: object) -> list[BrokerProcess]:
    if isinstance(value, BrokerProcess):
        return [value]
    return list(getattr(value, "started", []))


def _start(workdir: Path, overrides: Mapping[str, str]) -> BrokerProcess:
    return BrokerProcess(workdir, {**DEFAULT_OVERRIDES, **overrides}).start()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh standalone broker for one test."""
    b = _start(tmp_path / "broker", {})
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every test of a module; tests use their own topics."""
    b = _start(tmp_path_factory.mktemp("shared-broker"), {})
    try:
        yield b
    finally:
        b.stop()


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


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()
