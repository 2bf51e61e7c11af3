"""kcat's own tests against brokers these tests start: its allow-listed tests (``allowlist.txt``
here) on four workers, each with its own Strom broker on 127.0.0.1; the test fails naming every
allow-listed test that did not pass. The tests are fetched by ``.ci/run`` (``build.sh``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compat_tests.kcat_suite import runner as kcat_runner
from compat_tests.librdkafka.suite import FAILED, PASSED, SKIPPED, TIMEOUT, read_allowlist
from compat_tests.support.suites import (
    SUITE_TIMEOUT_S,
    WORKERS,
    check_findings_name_every_test_not_passing,
    check_recorded_results_pass,
    report,
    tree_or_skip,
)

pytestmark = pytest.mark.usefixtures("suite_runs_dir")


def test_a_suite_run_keeps_its_brokers_in_the_session_s_own_directory(monkeypatch, tmp_path: Path) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(kcat_runner, "run_pool", lambda cases, run_case, **kw: seen.append(kw["workdir"]) or {})
    monkeypatch.setattr(kcat_runner, "version_of", lambda tree: "1.7.1")
    kcat_runner.run([], workers=1, tree=tmp_path)
    assert seen == [Path(os.environ["STROM_SUITES_RUNS"]) / "kcat"]
    assert kcat_runner.WORK_ROOT not in seen[0].parents, "not the work dir every checkout shares"


@pytest.mark.timeout(SUITE_TIMEOUT_S)
@pytest.mark.xdist_group("suite-kcat")
def test_kcat_allowlisted_tests_pass() -> None:
    tree = tree_or_skip(kcat_runner.find_tree)
    allowed = read_allowlist(kcat_runner.ALLOWLIST)
    results = kcat_runner.run(kcat_runner.scripts(tree), workers=WORKERS, tree=tree)
    assert not results.failed_of(allowed), report(results, allowed)


# -- recorded results and the allow-list (no broker needed) ------------------------------


def test_recorded_results_pass_every_allowlisted_test() -> None:
    check_recorded_results_pass(kcat_runner.ALLOWLIST, kcat_runner.RECORDED)


def test_every_test_not_passing_is_named_in_findings() -> None:
    check_findings_name_every_test_not_passing(kcat_runner.RECORDED, kcat_runner.HERE / "FINDINGS.md")


def test_kcat_outcome_reads_skips_and_failures() -> None:
    assert kcat_runner.outcome_of(0, "all good\n", 10).state == PASSED
    skipped = kcat_runner.outcome_of(0, "x | TEST SKIPPED: No schema-registry\n", 10)
    assert skipped.state == SKIPPED and "schema-registry" in skipped.detail
    assert kcat_runner.outcome_of(1, "boom\n", 10).state == FAILED
    assert kcat_runner.outcome_of(None, "", 10).state == TIMEOUT
