"""The clients' own test suites (librdkafka's, kcat's) against brokers these tests start.

Each suite runs its allow-listed tests (``compat_tests/<suite>/allowlist.txt``) on four
workers, each with its own Strom broker on 127.0.0.1; the test fails naming every
allow-listed test that did not pass. The suites are built by ``.ci/run`` (their
``build.sh``); where they are not built the tests skip, unless STROM_COMPAT_REQUIRE_ALL is set.
The README's compatibility table must match the recorded results.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from compat_tests.kcat_suite import runner as kcat_runner
from compat_tests.librdkafka import runner as rdk_runner
from compat_tests.librdkafka.suite import (
    FAILED, PASSED, SKIPPED, TIMEOUT, Outcome, SuiteError, SuiteResults, read_allowlist,
    read_results,
)
from strom.tools import compat_table

WORKERS = int(os.environ.get("STROM_SUITE_WORKERS", "4"))
SUITE_TIMEOUT_S = 1500


def _tree_or_skip(find) -> Path:
    try:
        return find()
    except SuiteError as exc:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL"):
            raise
        pytest.skip(str(exc))


def _report(results: SuiteResults, allowed: list[str]) -> str:
    failed = results.failed_of(allowed)
    lines = [f"{len(failed)} allow-listed test(s) did not pass:"]
    for name in failed:
        r = results.tests.get(name)
        lines.append(f"  {name}: {r.state} {r.detail}" if r else f"  {name}: not reported by the run")
    return "\n".join(lines)


@pytest.mark.timeout(SUITE_TIMEOUT_S)
def test_librdkafka_allowlisted_tests_pass(tmp_path: Path) -> None:
    tree = _tree_or_skip(rdk_runner.find_tree)
    allowed = read_allowlist(rdk_runner.ALLOWLIST)
    numbers = rdk_runner.allowlisted_numbers(allowed)
    results = rdk_runner.run(numbers, workers=WORKERS, tree=tree, expected=rdk_runner.expected_durations())
    results = _rerun_failed_alone(results, allowed, tree)
    assert not results.failed_of(allowed), _report(results, allowed)


def _rerun_failed_alone(results: SuiteResults, allowed: list[str], tree: Path) -> SuiteResults:
    """A few of librdkafka's tests time their own steps (0018's group termination, 0086's purge of
    requests in flight) and miss now and then under four workers plus the rest of CI on two
    cores. Each allow-listed test that failed runs once more, alone; the first failure is still
    shown, as a warning, so a test that fails often stays visible."""
    failed = results.failed_of(allowed)
    if not failed:
        return results
    again = rdk_runner.run(sorted({name[:4] for name in failed}), workers=1, tree=tree)
    for name in failed:
        first, second = results.tests.get(name), again.tests.get(name)
        warnings.warn(f"librdkafka {name} did not pass under load "
                      f"({first.state + ' ' + first.detail if first else 'not reported'}); "
                      f"run again alone: {second.state if second else 'not reported'}")
    return replace(results, tests={**results.tests, **again.tests})


@pytest.mark.timeout(SUITE_TIMEOUT_S)
def test_kcat_allowlisted_tests_pass() -> None:
    tree = _tree_or_skip(kcat_runner.find_tree)
    allowed = read_allowlist(kcat_runner.ALLOWLIST)
    results = kcat_runner.run(kcat_runner.scripts(tree), workers=WORKERS, tree=tree)
    assert not results.failed_of(allowed), _report(results, allowed)


# -- recorded results, allow-lists and the README (no broker needed) ---------------------

@pytest.mark.parametrize("runner", [rdk_runner, kcat_runner], ids=["librdkafka", "kcat"])
def test_recorded_results_pass_every_allowlisted_test(runner) -> None:
    recorded = read_results(runner.RECORDED)
    allowed = read_allowlist(runner.ALLOWLIST)
    assert allowed, "an empty allow-list tests nothing"
    assert not recorded.failed_of(allowed), _report(recorded, allowed)


@pytest.mark.parametrize("runner", [rdk_runner, kcat_runner], ids=["librdkafka", "kcat"])
def test_every_test_not_passing_is_named_in_findings(runner) -> None:
    findings = (runner.HERE / "FINDINGS.md").read_text()
    recorded = read_results(runner.RECORDED)
    unexplained = [n for n, r in recorded.tests.items() if r.state != PASSED and n not in findings]
    assert not unexplained, f"not in FINDINGS.md: {', '.join(sorted(unexplained))}"


def test_readme_table_is_current() -> None:
    table = compat_table.render(compat_table.load())
    assert compat_table.is_current(compat_table.README.read_text(), table), (
        "README.md's client-suites table is stale: run python tools/compat_table.py"
    )


def test_table_rows_count_passed_of_run_and_skipped() -> None:
    results = SuiteResults("s", "libx", "1.2.3", {
        "a": Outcome(PASSED), "b": Outcome(PASSED), "c": Outcome(FAILED),
        "d": Outcome(TIMEOUT), "e": Outcome(SKIPPED),
    })
    assert compat_table.row(results) == "| libx | 1.2.3 | 2 of 4 | 1 |"


def test_table_replaces_only_its_own_section() -> None:
    table_a = compat_table.render([SuiteResults("s", "libx", "1", {"a": Outcome(PASSED)})])
    table_b = compat_table.render([SuiteResults("s", "libx", "1", {"a": Outcome(FAILED)})])
    readme = "# T\n\nintro\n\n## Layout\n\nstuff\n"
    with_a = compat_table.replace_table(readme, table_a)
    assert with_a.startswith("# T\n\nintro\n\n") and with_a.endswith("## Layout\n\nstuff\n")
    assert compat_table.is_current(with_a, table_a)
    assert not compat_table.is_current(with_a, table_b)
    with_b = compat_table.replace_table(with_a, table_b)
    assert with_b == with_a.replace(table_a, table_b)


def test_table_refuses_a_readme_with_one_marker() -> None:
    with pytest.raises(compat_table.TableError):
        compat_table.replace_table(f"# T\n{compat_table.BEGIN}\n", "table")


def test_librdkafka_summary_lines_are_parsed() -> None:
    text = (
        "TEST 20250101 (bare, scenario default) SUMMARY\n"
        "|\x1b[32m 0001_multiobj                            |     PASSED |   1.250s \x1b[0m|\n"
        "|\x1b[31m 0017_compression                         |     FAILED |   3.000s \x1b[0m|"
        "\x1b[31m Produce failed: Broker: Unknown\x1b[0m\n"
        "|\x1b[36m 0103_transactions                        |    SKIPPED |   0.000s \x1b[0m|"
        "\x1b[36m not applicable\x1b[0m\n"
    )
    found = rdk_runner.parse_summary(text)
    assert found["0001_multiobj"] == Outcome(PASSED, 1.25, "")
    assert found["0017_compression"].state == FAILED
    assert "Produce failed" in found["0017_compression"].detail
    assert found["0103_transactions"].state == SKIPPED


def test_allowlist_rejects_duplicates_and_spaces(tmp_path: Path) -> None:
    path = tmp_path / "allow.txt"
    path.write_text("# comment\n0001_a  # producing\n\n0002_b\n")
    assert read_allowlist(path) == ["0001_a", "0002_b"]
    path.write_text("0001_a\n0001_a\n")
    with pytest.raises(SuiteError, match="more than once"):
        read_allowlist(path)
    path.write_text("0001_a 0002_b\n")
    with pytest.raises(SuiteError, match="one test name per line"):
        read_allowlist(path)


def test_kcat_outcome_reads_skips_and_failures() -> None:
    assert kcat_runner.outcome_of(0, "all good\n", 10).state == PASSED
    skipped = kcat_runner.outcome_of(0, "x | TEST SKIPPED: No schema-registry\n", 10)
    assert skipped.state == SKIPPED and "schema-registry" in skipped.detail
    assert kcat_runner.outcome_of(1, "boom\n", 10).state == FAILED
    assert kcat_runner.outcome_of(None, "", 10).state == TIMEOUT


def test_a_failed_allowlisted_test_runs_once_more_alone(monkeypatch) -> None:
    first = SuiteResults("librdkafka", "librdkafka", "2", {
        "0001_a": Outcome(PASSED), "0018_b": Outcome(TIMEOUT, detail="timed out"), "0086_c": Outcome(FAILED)})
    asked = []

    def rerun(numbers, *, workers, tree):
        asked.append((numbers, workers))
        return SuiteResults("librdkafka", "librdkafka", "2",
                            {"0018_b": Outcome(PASSED), "0086_c": Outcome(FAILED, detail="again")})

    monkeypatch.setattr(rdk_runner, "run", rerun)
    with pytest.warns(UserWarning) as warned:
        merged = _rerun_failed_alone(first, ["0001_a", "0018_b", "0086_c"], Path("."))
    assert [str(w.message).split(" did not")[0] for w in warned] == ["librdkafka 0018_b", "librdkafka 0086_c"]
    assert asked == [(["0018", "0086"], 1)]
    assert merged.failed_of(["0001_a", "0018_b", "0086_c"]) == ["0086_c"]
    assert _rerun_failed_alone(merged, ["0001_a", "0018_b"], Path(".")) is merged  # nothing failed: no rerun
    assert len(asked) == 1
