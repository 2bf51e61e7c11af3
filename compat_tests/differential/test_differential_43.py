"""The differential run against Kafka 4.3.1 in CI: the scenarios of ``scenarios_43.py`` against a
fresh reference Kafka 4.3.1 and a fresh Strom (one start of each for the module), and every
difference explained in FINDINGS-4.3.md.

Skipped where Java or the reference Kafka (../shared/jvm) is absent, unless
STROM_COMPAT_REQUIRE_ALL=1 (CI), where that fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.differential.harness import parse_findings, served_within
from compat_tests.differential.report import REFERENCES, Outcome, reference_available, run_fresh
from compat_tests.differential.scenarios import all_scenarios
from compat_tests.differential.scenarios_43 import NEWER_THAN_4_0, all_scenarios_43
from strom.protocol.schema import ApiKey

ROOT = Path(__file__).resolve().parents[2]

KAFKA_4_3 = REFERENCES["4.3"]
# Versions Strom serves that neither reference does: Kafka 4.4's (broker/tests/test_kafka43_versions.py)
ONLY_IN_KAFKA_4_4 = {(18, 5), (28, 6)}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    why = reference_available(KAFKA_4_3.script)
    if why:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL") == "1":
            pytest.fail(f"differential tests cannot run: {why}")
        pytest.skip(why)
    yield run_fresh(tmp_path_factory.mktemp("differential-4.3"), KAFKA_4_3)


# Compared with Kafka 4.3.1 by a differential module of their own (a streams group's heartbeats
# need a harness that settles the group's assignment delays on both sides first).
COMPARED_ELSEWHERE = {
    (ApiKey.STREAMS_GROUP_HEARTBEAT, 0): "compat_tests/features/test_streams_group_differential.py",
    (ApiKey.STREAMS_GROUP_DESCRIBE, 0): "compat_tests/features/test_streams_group_differential.py",
}


def test_the_two_references_cover_every_version_strom_serves() -> None:
    from strom.broker.apis import SUPPORTED_RANGE

    sent = {(st.api, st.version) for s in all_scenarios() + all_scenarios_43() for st in s.steps if st.raw is None}
    missing = [
        (api, v)
        for api, (lo, hi) in SUPPORTED_RANGE.items()
        for v in range(lo, hi + 1)
        if (api, v) not in sent and (api, v) not in ONLY_IN_KAFKA_4_4 and (api, v) not in COMPARED_ELSEWHERE
    ]
    assert all((ROOT / where).is_file() for where in COMPARED_ELSEWHERE.values())
    assert not missing, f"(api key, version) pairs Strom serves that no scenario sends: {missing}"
    assert NEWER_THAN_4_0 and all(served_within("4.3")[api][1] == hi for api, (_, hi) in NEWER_THAN_4_0.items())


def test_every_difference_from_kafka_4_3_is_explained(outcome: Outcome) -> None:
    lines = [f"{d.where}: kafka={d.kafka!r} strom={d.strom!r}" for d in outcome.unexplained]
    assert not lines, (
        f"{len(lines)} differences from Kafka 4.3.1 not explained in {KAFKA_4_3.findings.name} (fix Strom, or "
        "add a finding; `python -m compat_tests.differential.report --reference 4.3` writes REPORT-4.3.md):\n"
        + "\n".join(lines[:40])
    )


def test_most_scenarios_answer_exactly_as_kafka_4_3(outcome: Outcome) -> None:
    """Guards the normalisation: a harness that compared nothing would 'pass' with no differences."""
    differing = {d.scenario for d, _ in outcome.explained}
    assert outcome.scenarios >= 20 and len(differing) < outcome.scenarios * 0.6
    assert outcome.steps > outcome.scenarios


def test_findings_4_3_parse() -> None:
    findings = parse_findings(KAFKA_4_3.findings.read_text())
    assert findings and all(f.patterns for f in findings), "every finding needs at least one match: line"
