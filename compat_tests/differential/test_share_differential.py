"""The share-group scenarios (`scenarios_share.py`) against a fresh reference Kafka 4.3.1 and a
fresh Strom: every difference explained in FINDINGS-share.md.

Skipped where Java or ``kafka-reference-4.3.sh`` (../shared/jvm) is absent, unless
STROM_COMPAT_REQUIRE_ALL=1 (CI), where that fails. ``STROM_KAFKA43_SCRIPT`` points at another
launcher with the same interface.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from compat_tests.differential.harness import Target, differences, explain, parse_findings, run_both
from compat_tests.differential.report import STROM_OVERRIDES
from compat_tests.differential.scenarios_share import FINDINGS_SHARE, share_scenarios
from compat_tests.support.paths import SHARED_JVM
from strom.testing.zookeeper import require_all
from strom.tools.broker_process import BrokerProcess

SCRIPT = Path(os.environ.get("STROM_KAFKA43_SCRIPT", SHARED_JVM / "kafka-reference-4.3.sh"))


def test_share_scenarios_answer_as_kafka_4_3_or_are_explained(tmp_path: Path) -> None:
    why = None if shutil.which("java") else "no java on PATH"
    why = why or (None if SCRIPT.exists() else f"no reference Kafka 4.3 at {SCRIPT}")
    if why:
        if require_all():
            pytest.fail(f"required by STROM_COMPAT_REQUIRE_ALL: {why}")
        pytest.skip(why)
    work = tmp_path / "kafka43"
    started = subprocess.run(["bash", str(SCRIPT), "start", str(work)], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        strom = BrokerProcess(tmp_path / "strom", STROM_OVERRIDES).start()
        try:
            scenarios = share_scenarios()
            kafka = Target("kafka", "127.0.0.1", int(started.stdout.split()[0]))
            mine = Target("strom", "127.0.0.1", strom.port)
            try:
                kafka_raw, strom_raw = run_both(kafka, mine, scenarios)
            finally:
                kafka.close()
                mine.close()
        finally:
            strom.stop()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(work)], capture_output=True, timeout=120)
    findings = parse_findings(FINDINGS_SHARE.read_text())
    explained = explain(differences(scenarios, kafka_raw, strom_raw, kafka, mine), findings)
    lines = [f"{d.where}: kafka={d.kafka!r} strom={d.strom!r}" for d, f in explained if f is None]
    assert not lines, "differences from Kafka 4.3 not explained in FINDINGS-share.md:\n" + "\n".join(lines[:40])
    # the comparison compared something: most steps answered alike
    assert len({d.scenario for d, _ in explained}) < len(scenarios)
