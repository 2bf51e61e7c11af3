"""The differential run in CI: every scenario against a fresh reference Kafka 4.0 and a fresh Strom
(one start of each for the whole module), and every difference explained in FINDINGS.md.

Skipped where Java or the reference Kafka (../shared/jvm) is absent, unless
STROM_COMPAT_REQUIRE_ALL=1 (CI), where that fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.differential.harness import Difference, glob, parse_findings, served_within
from compat_tests.differential.report import FINDINGS, Outcome, reference_available, run_fresh
from compat_tests.differential.scenarios import all_scenarios
from compat_tests.librdkafka.suite import FAILED, PASSED, SuiteResults, write_results
from compat_tests.librdkafka.suite import Outcome as SuiteOutcome
from compat_tests.support.record_results import recording

MIN_SCENARIOS = 300
RESULTS = Path(__file__).resolve().parent / "results.json"


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    why = reference_available()
    if why:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL") == "1":
            pytest.fail(f"differential tests cannot run: {why}")
        pytest.skip(why)
    result = run_fresh(tmp_path_factory.mktemp("differential"))
    if recording():
        record(result)
    yield result


def record(result: Outcome) -> None:
    """Per scenario for the README's table: PASSED when answered exactly as Kafka answers, else FAILED
    with the findings that explain the differences (or UNEXPLAINED) as its detail."""
    findings: dict[str, set[str]] = {}
    for d, f in result.explained:
        findings.setdefault(d.scenario, set()).add(f.ident if f else "UNEXPLAINED")
    tests = {
        s.name: SuiteOutcome(PASSED)
        if s.name not in findings
        else SuiteOutcome(FAILED, 0.0, "differs, see FINDINGS.md: " + " ".join(sorted(findings[s.name])))
        for s in all_scenarios()
    }
    write_results(
        SuiteResults(
            "differential",
            "Kafka 4.0.0 broker, raw-frame scenarios answered identically (the rest explained in FINDINGS.md)",
            "4.0.0",
            tests,
        ),
        RESULTS,
    )


def test_at_least_300_scenarios_cover_every_api_and_version_strom_serves() -> None:
    """Up to Kafka 4.0's versions; the newer ones: test_differential_43.py."""
    served = served_within("4.0")
    scenarios = all_scenarios()
    assert len(scenarios) >= MIN_SCENARIOS
    sent = {(st.api, st.version) for s in scenarios for st in s.steps if st.raw is None}
    missing = [(api, v) for api, (lo, hi) in served.items() for v in range(lo, hi + 1) if (api, v) not in sent]
    assert not missing, f"(api key, version) pairs Strom serves that no scenario sends: {missing}"


def test_every_difference_from_kafka_is_explained(outcome: Outcome) -> None:
    assert outcome.scenarios >= MIN_SCENARIOS
    lines = [f"{d.where}: kafka={d.kafka!r} strom={d.strom!r}" for d in outcome.unexplained]
    assert not lines, (
        f"{len(lines)} differences from Kafka 4.0 not explained in {FINDINGS.name} (fix Strom, or add a "
        "finding; `python -m compat_tests.differential.report` writes REPORT.md):\n" + "\n".join(lines[:40])
    )


def test_most_scenarios_answer_exactly_as_kafka(outcome: Outcome) -> None:
    """Guards the normalisation: a harness that compared nothing would 'pass' with no differences."""
    differing = {d.scenario for d, _ in outcome.explained}
    assert len(differing) < outcome.scenarios * 0.6
    assert outcome.steps > outcome.scenarios


def test_findings_parse_and_match_literally() -> None:
    findings = parse_findings(Path(FINDINGS).read_text())
    assert findings and all(f.patterns for f in findings), "every finding needs at least one match: line"
    assert glob("a-*#0:topics.[name=x]").fullmatch("a-v1#0:topics.[name=x]")
    assert not glob("a-*#0:topics.[name=x]").fullmatch("a-v1#0:topics.xname=x]")
    d = Difference("fetch-v3-out-of-range", 0, "responses.[topic=w-one]", 1, 2)
    assert any(f.matches(d) for f in findings)


def test_error_messages_are_compared_and_empty_counts_as_none() -> None:
    from compat_tests.differential.harness import Target, compare, normalise

    target = Target("any", "127.0.0.1", 1)
    target.node_id = 0
    kafka = normalise({"error_code": 40, "error_message": "Unknown topic config name: x"}, target)
    strom = normalise({"error_code": 40, "error_message": "unknown topic config 'x'"}, target)
    assert list(compare(kafka, strom)) == [
        ("error_message", "Unknown topic config name: x", "unknown topic config 'x'")
    ]
    assert not list(compare(normalise({"error_message": ""}, target), normalise({"error_message": None}, target)))
