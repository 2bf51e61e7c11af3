"""What the clients' own test suites share (librdkafka's in compat_tests/librdkafka, kcat's in
compat_tests/kcat_suite): how many workers and how long a run may take, skipping where a suite is
not built, and the report naming every allow-listed test that did not pass.

The suites are built by ``.ci/run`` (each folder's ``build.sh``); where they are not built their
tests skip, unless STROM_COMPAT_REQUIRE_ALL is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from compat_tests.librdkafka.suite import PASSED, SuiteError, SuiteResults, read_allowlist, read_results

WORKERS = int(os.environ.get("STROM_SUITE_WORKERS", "4"))
SUITE_TIMEOUT_S = 1500
# Each suite run is its own xdist_group: on pytest-xdist workers they run in parallel with the rest,
# at most two heavy units at once (the root conftest.py's HEAVY).


def tree_or_skip(find: Callable[[], Path]) -> Path:
    """The suite's built tree, else a skip (a failure under STROM_COMPAT_REQUIRE_ALL)."""
    try:
        return find()
    except SuiteError as exc:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL"):
            raise
        pytest.skip(str(exc))


def report(results: SuiteResults, allowed: list[str]) -> str:
    failed = results.failed_of(allowed)
    lines = [f"{len(failed)} allow-listed test(s) did not pass:"]
    for name in failed:
        r = results.tests.get(name)
        lines.append(f"  {name}: {r.state} {r.detail}" if r else f"  {name}: not reported by the run")
    return "\n".join(lines)


def check_recorded_results_pass(allowlist: Path, recorded: Path) -> None:
    """The recorded results (the README's table) pass every allow-listed test."""
    results = read_results(recorded)
    allowed = read_allowlist(allowlist)
    assert allowed, "an empty allow-list tests nothing"
    assert not results.failed_of(allowed), report(results, allowed)


def check_findings_name_every_test_not_passing(recorded: Path, findings: Path) -> None:
    text = findings.read_text()
    results = read_results(recorded)
    unexplained = [n for n, r in results.tests.items() if r.state != PASSED and n not in text]
    assert not unexplained, f"not in {findings.name}: {', '.join(sorted(unexplained))}"
