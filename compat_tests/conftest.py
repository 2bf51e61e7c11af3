"""Fixtures that run a real Strom broker on 127.0.0.1 for the compat tests.

``broker`` is a fresh broker per test, ``shared_broker`` one per test module, and
``make_broker(**overrides)`` starts brokers with extra Kafka config keys (for example
``{"auto.create.topics.enable": "false"}``). All are stopped in finalizers, also when a
test fails, and a failing test's report carries the broker's stdout/stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.support.brokers import BrokerFactory, brokers_in, start_broker
from strom.testing.zookeeper import zookeeper_fixture
from strom.tools.broker_process import BrokerProcess

COMPAT_TEST_TIMEOUT_S = 900
# A user's project with its own pytest.ini, run as a subprocess by packaging/test_sample_project.py.
collect_ignore = ["packaging/sample_project"]


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
            for b in brokers_in(value):
                report.sections.append((f"strom broker log ({b.workdir})", b.log_tail()))
    return report


# One ZooKeeper per test module (the cluster tests' brokers each take a chroot of it).
zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh standalone broker for one test."""
    b = start_broker(tmp_path / "broker", {})
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every test of a module; tests use their own topics."""
    b = start_broker(tmp_path_factory.mktemp("shared-broker"), {})
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="module")
def suite_runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The client suites' brokers and outputs in this session's own temporary directory
    (``STROM_SUITES_RUNS``): a run of the same suite at the same time (another checkout, another
    session) replaces only its own. The suites' test modules use it for every test."""
    runs = tmp_path_factory.mktemp("suite-runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STROM_SUITES_RUNS", str(runs))
        yield runs
