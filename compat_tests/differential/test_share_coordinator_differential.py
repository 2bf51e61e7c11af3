"""The share coordinator's scenarios (`scenarios_share_coordinator.py`) against the reference
Kafka 4.3.1 (``kafka-reference-4.3.sh``) and Strom, the answers compared field by field.

Every difference must be one of EXPLAINED (a glob over ``scenario#step:path``, as FINDINGS.md's
``match:`` lines), each with the reason; none is unexplained.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.differential.harness import Target, differences, glob, run_both
from compat_tests.differential.report import STROM_OVERRIDES
from compat_tests.differential.scenarios_share_coordinator import share_coordinator_scenarios
from compat_tests.support.jvm import skip_unless_available
from compat_tests.support.paths import SHARED_JVM
from strom.tools.broker_process import BrokerProcess

REFERENCE_43 = SHARED_JVM / "kafka-reference-4.3.sh"
CLIENT_43 = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"

EXPLAINED: dict[str, str] = {
    # Kafka 4.3 answers a FindCoordinator v3 for a share key (a key type v3 does not know) with
    # INVALID_REQUEST; so does Strom. Nothing to explain yet: kept as the place for findings.
}


def _start_reference(work: Path) -> int:
    env = {**os.environ, "CLASSPATH": str(CLIENT_43)}  # libs/ holds the client as a link some copies lost
    out = subprocess.run(
        ["bash", str(REFERENCE_43), "start", str(work)], capture_output=True, text=True, timeout=180, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"the reference Kafka 4.3 did not start: {out.stderr[-2000:]}")
    return int(out.stdout.split()[-2])


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    if not REFERENCE_43.exists() or shutil.which("java") is None:
        skip_unless_available(f"no java or no reference Kafka 4.3 at {REFERENCE_43}")
    work = tmp_path_factory.mktemp("share-differential")
    try:
        kafka_port = _start_reference(work / "kafka")
    except RuntimeError as exc:
        subprocess.run(["bash", str(REFERENCE_43), "stop", str(work / "kafka")], capture_output=True, timeout=120)
        skip_unless_available(str(exc))
        raise
    strom = BrokerProcess(work / "strom", STROM_OVERRIDES).start()
    try:
        yield kafka_port, strom.port
    finally:
        strom.stop()
        subprocess.run(["bash", str(REFERENCE_43), "stop", str(work / "kafka")], capture_output=True, timeout=120)


def test_share_coordinator_answers_as_kafka_4_3(ports: tuple[int, int]) -> None:
    scenarios = share_coordinator_scenarios()
    kafka, strom = Target("kafka", "127.0.0.1", ports[0]), Target("strom", "127.0.0.1", ports[1])
    try:
        kafka_raw, strom_raw = run_both(kafka, strom, scenarios)
    finally:
        kafka.close()
        strom.close()
    diffs = differences(scenarios, kafka_raw, strom_raw, kafka, strom)
    unexplained = [d for d in diffs if not any(glob(p).fullmatch(d.where) for p in EXPLAINED)]
    assert not unexplained, "\n".join(f"{d.where}: kafka={d.kafka!r} strom={d.strom!r}" for d in unexplained[:40])
