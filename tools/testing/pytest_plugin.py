"""pytest plugin: a Strom broker for a test suite (on when strom is installed; ``-p no:strom`` off).

Fixtures
- ``strom_broker``: the broker a test talks to (``.bootstrap_servers``, ``.faults``, ...). One
  broker per test session (per xdist worker), started on first use; a test marked
  ``@pytest.mark.strom_broker(**configs)`` gets a broker of its own with those configs instead.
- ``strom_session_broker``: the session broker itself, for fixtures of wider scope.
- ``strom_topic``: a fresh topic name per test, created with the broker's default partitions
  (``@pytest.mark.strom_topic(partitions=3, **topic_configs)`` to choose) and deleted after.
- ``strom_admin``: a confluent-kafka ``AdminClient`` for the test's broker.
- ``strom_cluster``: a cluster of its own per test, brokers in this process over an in-memory
  ZooKeeper (no Java); ``@pytest.mark.strom_cluster(size=3, **configs)`` to choose. Cluster
  actions on it (docs/testing-cluster.md).

ini options (pytest.ini / pyproject's [tool.pytest.ini_options]):
- ``strom_broker_configs``: broker configs, one ``key=value`` a line.
- ``strom_broker_mode``: ``thread`` (in this process, default) or ``process`` (``strom serve``).
- ``strom_broker_reset``: ``true`` to reset the session broker after each test: every topic and
  group the test made is deleted (``StromBroker.reset``, what was there when the session broker
  started is kept), besides faults being cleared.

Faults set by a test are cleared after it, so the next test of the session starts clean.
Importing this module loads nothing of the broker: that happens when a fixture is first used.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "strom_broker_configs",
        type="linelist",
        default=[],
        help="strom: broker configs for the strom_broker fixture, one key=value a line",
    )
    parser.addini(
        "strom_broker_reset",
        type="bool",
        default=False,
        help="strom: delete the topics and groups each test made on the session broker after it",
    )
    parser.addini(
        "strom_broker_mode",
        default="thread",
        help="strom: 'thread' (in-process broker, default) or 'process' (strom serve)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "strom_broker(**configs): give the test a broker of its own with these "
        "broker configs (dots as underscores, or a dict as first argument)",
    )
    config.addinivalue_line(
        "markers", "strom_topic(partitions=None, **configs): partitions and topic configs of the test's strom_topic"
    )
    config.addinivalue_line(  # the strom_cluster block below
        "markers", "strom_cluster(size=3, **configs): size and broker configs of the test's strom_cluster"
    )


def _ini_configs(config: pytest.Config) -> dict[str, str]:
    out = {}
    for line in config.getini("strom_broker_configs"):
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"strom_broker_configs: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def _mode(config: pytest.Config) -> str:
    mode = config.getini("strom_broker_mode") or "thread"
    if mode not in ("thread", "process"):
        raise pytest.UsageError(f"strom_broker_mode={mode!r}: use thread or process")
    return mode


@pytest.fixture(scope="session")
def strom_session_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session's broker (one per xdist worker), configured by the ini options."""
    from strom.testing.embedded import StromBroker

    broker = StromBroker(_ini_configs(request.config), mode=_mode(request.config))
    with broker:
        if request.config.getini("strom_broker_reset"):
            broker.snapshot()  # what reset() keeps
        yield broker


@pytest.fixture
def strom_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    marker = request.node.get_closest_marker("strom_broker")
    if marker is None:
        broker = request.getfixturevalue("strom_session_broker")
        if not broker.running:  # an earlier test stopped it
            broker.start()
        try:
            yield broker
        finally:
            if broker.running:
                broker.resume()
                broker.faults.clear()
                if request.config.getini("strom_broker_reset"):
                    broker.reset()
        return
    from strom.testing.embedded import StromBroker

    configs = dict(_ini_configs(request.config))
    if marker.args:
        configs.update(marker.args[0])
    options = {k: v for k, v in marker.kwargs.items() if k in ("mode", "dev", "data_dir", "keep_data")}
    kwargs = {k: v for k, v in marker.kwargs.items() if k not in options}
    options.setdefault("mode", _mode(request.config))
    with StromBroker(configs, **options, **kwargs) as broker:
        yield broker


@pytest.fixture
def strom_topic(request: pytest.FixtureRequest, strom_broker: Any) -> Iterator[str]:
    """A topic that exists for this test only."""
    marker = request.node.get_closest_marker("strom_topic")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    partitions = kwargs.pop("partitions", None)
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:180] or "topic"
    name = f"{base}-{uuid.uuid4().hex[:8]}"
    strom_broker.create_topic(name, partitions, **kwargs)
    try:
        yield name
    finally:
        if strom_broker.running:
            try:
                strom_broker.delete_topic(name)
            except Exception:  # deleted by the test itself, or the broker was stopped
                pass


@pytest.fixture
def strom_admin(strom_broker: Any) -> Any:
    """A confluent-kafka AdminClient for the test's broker."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})


# ---- strom_cluster: a multi-broker cluster in this process (strom.testing.zkcluster) ----------


@pytest.fixture
def strom_cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Brokers in this process over one in-memory ZooKeeper, started for this test and closed
    after it (also on failure): ``.bootstrap_servers``, ``.brokers[i].kill()``, ``.move_leader(...)``,
    ``.isolate(...)``, ``.wait_for_isr(...)`` and the other cluster actions."""
    from strom.testing.zkcluster import StromCluster

    marker = request.node.get_closest_marker("strom_cluster")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    configs = dict(marker.args[0]) if marker is not None and marker.args else {}
    size = int(kwargs.pop("size", 3))
    with StromCluster(size, configs, mode="thread", **kwargs) as cluster:
        yield cluster
