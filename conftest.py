"""How `python -m pytest` spreads the suite over pytest-xdist workers (pyproject.toml's addopts:
``-n auto --dist loadgroup``).

* How many workers: :func:`pytest_xdist_auto_num_workers`. The whole suite (or a folder) runs on
  ``2 x cores`` workers (at least 2, at most 8): most tests wait on brokers, ZooKeeper and client
  processes, not on a core. A run of one file or of test ids in one file (``python -m pytest -q
  some/test_x.py``, ``...::test_y``) and ``--pdb`` stay serial in the pytest process itself, as
  without xdist.
  ``-n N`` on the command line, or ``PYTEST_XDIST_AUTO_NUM_WORKERS=N``, sets the number; ``-n 0`` or
  ``-p no:xdist`` runs serially.
* What runs together: :class:`ModuleScheduling`. The unit handed to a worker is a test *module*:
  its tests run in file order on one worker, so module and session fixtures (a module's ZooKeeper
  and cluster, a reference Kafka, a shared broker) are built once, as in a serial run. Tests with
  the same ``pytest.mark.xdist_group("name")`` (on a test, or a module's ``pytestmark``) form one
  unit instead, also across modules. Of the :data:`HEAVY` units (big JVMs, the clients' suites) at
  most :data:`MAX_HEAVY_AT_ONCE` run at once.
* In which order: the slowest units first (:data:`SLOW_FIRST`, measured), then the others by their
  number of tests, so a long module does not start last and stretch the run.
* Across pytest processes: ``.ci/run`` runs the clients' suites in a pytest process of their own
  beside the rest. With ``STROM_HEAVY_SLOTS`` set to a directory, a heavy unit also takes one of
  :data:`MAX_HEAVY_AT_ONCE` slot files there (a lock held while it runs), so the processes
  together still run at most that many (:func:`pytest_runtest_protocol`).

Hypothesis runs without its per-example deadline and its too-slow health check: both measure
time, which on a loaded machine (parallel workers, brokers, JVMs) says nothing about the code.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("strom", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("strom")

# Heavy units: modules that start a big JVM (the reference Kafka, Spark, Kafka's Java clients,
# Connect) and the clients' suite runs (compat_tests/librdkafka/test_librdkafka_suite.py and
# compat_tests/kcat_suite/test_kcat_suite.py mark each run with its xdist_group). At most
# MAX_HEAVY_AT_ONCE of them run at a time: on 2 cores, four at once starve one another's timeouts
# (librdkafka's own tests time their steps), two keep the rest moving.
HEAVY: frozenset[str] = frozenset(
    {
        # Kafka 4.0 reference brokers (differential tests)
        "compat_tests/differential/test_differential.py",
        "compat_tests/differential/test_transactions_differential.py",
        "compat_tests/differential/test_transactions_compaction_differential.py",
        "compat_tests/differential/test_security_differential.py",
        # the Kafka 4.3.1 reference broker, and the Java 4.3.1 client
        "compat_tests/differential/test_differential_43.py",
        "compat_tests/features/test_kafka43_clients.py",
        # Spark drivers (PySpark 4.2 in this interpreter, Spark 4.0's JVM connector)
        "compat_tests/spark/test_spark.py",
        "compat_tests/spark_jvm/test_spark_kafka_connector.py",
        "compat_tests/spark/test_spark_jvm_requests.py",
        # Kafka's Java clients and Connect
        "compat_tests/java/test_java_client.py",
        "compat_tests/kafka_tools/test_kafka_tools.py",
        "compat_tests/connect/test_connect_and_mirror_maker.py",
        "compat_tests/features/test_transactions_java.py",
        "compat_tests/features/test_group_migration.py",
        # the clients' own suites, each with four brokers (or 3-broker clusters) of its own
        "suite-librdkafka-classic",
        "suite-librdkafka-consumer",
        "suite-librdkafka-cluster",
        "suite-kcat",
    }
)
MAX_HEAVY_AT_ONCE = 2

# Units that take longest, slowest first (measured in a parallel run on 2 cores): they start first,
# so none of them starts last and stretches the run. The others follow, most tests first.
SLOW_FIRST: tuple[str, ...] = (
    "suite-librdkafka-cluster",  # 651 s
    "suite-librdkafka-classic",  # 437 s
    "compat_tests/features/test_kafka4_admin_tools.py",  # 309 s
    "compat_tests/spark/test_spark.py",  # 304 s
    "compat_tests/features/test_group_migration.py",  # 223 s
    "compat_tests/spark_jvm/test_spark_kafka_connector.py",  # 221 s
    "compat_tests/differential/test_differential.py",  # 211 s
    "suite-librdkafka-consumer",  # 181 s
    "tools/tests/test_benchmark.py",  # 157 s
    "compat_tests/features/test_security.py",  # 140 s
    "compat_tests/connect/test_connect_and_mirror_maker.py",  # 122 s
    "compat_tests/differential/test_transactions_compaction_differential.py",  # 115 s
    "compat_tests/cluster/test_exactly_once_pipeline.py",  # 52-118 s alone (issue 21)
    "compat_tests/cluster/test_cluster.py",  # 112 s
    "compat_tests/cluster/test_cluster_partitions.py",  # 73-120 s alone (issue 21)
    "compat_tests/features/test_transactions_java.py",  # 101 s
    "compat_tests/features/test_codecs_roundtrip.py",  # 99 s
)

MAX_AUTO_WORKERS = 8


def _one_file(config: pytest.Config) -> bool:
    """True when the command line names tests of one file only (the file, or test ids in it)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS or not config.args:
        return False
    files = {Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve() for arg in config.args}
    return len(files) == 1 and next(iter(files)).is_file()


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    if _one_file(config):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(MAX_AUTO_WORKERS, 2 * cores))


def unit_of(nodeid: str) -> str:
    """The scheduling unit of a test: its ``xdist_group`` mark's name, else its module."""
    if "@" in nodeid:  # --dist loadgroup appends a test's xdist_group name
        return nodeid.rsplit("@", 1)[1]
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """``--dist loadgroup`` with modules (not single tests) as the unit, slow units first, at
        most :data:`MAX_HEAVY_AT_ONCE` heavy units (:data:`HEAVY`) running at a time."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _heavy_running_elsewhere(self, node) -> int:
            """Heavy units not finished on the other nodes. (The node's own run before what it is
            given now; a worker also holds back its last test until it has the next one, so
            counting its own unfinished unit would leave it waiting for itself.)"""
            return sum(
                1
                for other, work in self.assigned_work.items()
                if other is not node
                for unit, tests in work.items()
                if unit in HEAVY and not all(tests.values())
            )

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_sorted", False):  # the queue is complete before the first assignment
                self._sorted = True
                for unit in _slow_first(self.workqueue):
                    self.workqueue.move_to_end(unit)
            if self._heavy_running_elsewhere(node) >= MAX_HEAVY_AT_ONCE:
                light = next((unit for unit in self.workqueue if unit not in HEAVY), None)
                if light is None:
                    return  # the node waits: mark_test_complete offers it work when a heavy unit ends
                self.workqueue.move_to_end(light, last=False)
            super()._assign_work_unit(node)

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
            unit = self._split_scope(self.registered_collections[node][item_index])
            super().mark_test_complete(node, item_index, duration)
            if unit in HEAVY and all(self.assigned_work[node][unit].values()):
                for other in self.nodes:
                    if other is not node:
                        self._reschedule(other)

    return ModuleScheduling(config, log)


def _slow_first(units: dict[str, dict[str, bool]]) -> list[str]:
    """The units in the order the workers get them: :data:`SLOW_FIRST`, then the most tests first."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    return sorted(units, key=lambda u: (rank.get(u, len(rank)), -len(units[u])))


# -- heavy units across pytest processes (STROM_HEAVY_SLOTS) -------------------------------------

HEAVY_SLOTS_ENV = "STROM_HEAVY_SLOTS"
_held: dict[str, IO[bytes]] = {}  # heavy unit -> the slot file this process holds for it


def _acquire_slot(directory: Path) -> IO[bytes]:
    """One of MAX_HEAVY_AT_ONCE slot files in ``directory``, locked; waits while all are held."""
    directory.mkdir(parents=True, exist_ok=True)
    while True:
        for index in range(MAX_HEAVY_AT_ONCE):
            slot = open(directory / f"heavy-{index}.lock", "ab")
            try:
                fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                slot.close()
                continue
            return slot
        time.sleep(1.0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A heavy unit takes a slot before its first test and gives it back after its last one (the
    next test on this worker belongs to another unit), when STROM_HEAVY_SLOTS names a directory."""
    directory = os.environ.get(HEAVY_SLOTS_ENV)
    unit = _unit_of_item(item)
    if directory and unit in HEAVY and unit not in _held:
        _held[unit] = _acquire_slot(Path(directory))
    try:
        return (yield)
    finally:
        if unit in _held and (nextitem is None or _unit_of_item(nextitem) != unit):
            _held.pop(unit).close()  # closing the file releases its lock


def _unit_of_item(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return item.nodeid.split("::", 1)[0]
