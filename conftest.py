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
  and cluster, a reference Kafka, a shared broker) are built once, as in a serial run. Modules that
  start big JVMs or many processes are put in :data:`GROUPS`: the modules of a group run one after
  another on one worker, so at most one of each group runs at a time, and of the :data:`HEAVY`
  units (these groups and the clients' suites) at most :data:`MAX_HEAVY_AT_ONCE` run at once. A
  module may also join a group with ``pytestmark = pytest.mark.xdist_group("name")``.
* In which order: the slowest units first (:data:`SLOW_FIRST`, measured), then the others by their
  number of tests, so a long module does not start last and stretch the run.

Hypothesis runs without its per-example deadline and its too-slow health check: both measure
time, which on a loaded machine (parallel workers, brokers, JVMs) says nothing about the code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("strom", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("strom")

# Modules that start a big JVM (the reference Kafka, Spark, Kafka's Java clients and tools,
# Connect) or run a client's whole test suite, by group: one module of a group at a time.
GROUPS: dict[str, str] = {
    # Kafka 4.0 reference brokers (differential tests)
    "compat_tests/differential/test_differential.py": "jvm-reference-kafka",
    "compat_tests/test_transactions_differential.py": "jvm-reference-kafka",
    "compat_tests/test_transactions_compaction_differential.py": "jvm-reference-kafka",
    "compat_tests/test_security_differential.py": "jvm-reference-kafka",
    # Spark drivers (PySpark 4.2 in this interpreter, Spark 4.0's JVM connector)
    "compat_tests/test_spark.py": "jvm-spark",
    "compat_tests/spark_jvm/test_spark_kafka_connector.py": "jvm-spark",
    "compat_tests/test_spark_jvm_requests.py": "jvm-spark",
    # Kafka's Java clients, tools and Connect
    "compat_tests/java/test_java_client.py": "jvm-java-clients",
    "compat_tests/kafka_tools/test_kafka_tools.py": "jvm-java-clients",
    "compat_tests/connect/test_connect_and_mirror_maker.py": "jvm-java-clients",
    "compat_tests/test_transactions_java.py": "jvm-java-clients",
    "compat_tests/test_group_migration.py": "jvm-java-clients",
    "compat_tests/test_kafka4_admin_tools.py": "jvm-java-clients",
}

# Units that take longest, slowest first (serial durations measured on 2 cores); they start first.
SLOW_FIRST: tuple[str, ...] = (
    "compat_tests/test_client_suites.py",
    "jvm-java-clients",
    "jvm-spark",
    "jvm-reference-kafka",
    "tools/tests/test_benchmark.py",
)

# Units of which at most MAX_HEAVY_AT_ONCE run at a time (on 2 cores, two JVM-heavy or suite
# modules at once keep the rest of the run moving; four at once starve their own timeouts).
HEAVY = frozenset(GROUPS.values()) | {"compat_tests/test_client_suites.py"}
MAX_HEAVY_AT_ONCE = 2

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
    """The scheduling unit of a test: its ``xdist_group`` mark's name, its module's group, or its module."""
    if "@" in nodeid:  # --dist loadgroup appends a test's xdist_group name
        return nodeid.rsplit("@", 1)[1]
    module = nodeid.split("::", 1)[0]
    return GROUPS.get(module, module)


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
            return sum(1 for other, work in self.assigned_work.items() if other is not node
                       for unit, tests in work.items() if unit in HEAVY and not all(tests.values()))

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
