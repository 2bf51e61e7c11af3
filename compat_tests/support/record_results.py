"""Record the outcomes of a compat test folder as ``results.json`` (the client-suites format) for the
README's compatibility table (``tools/dev/compat_table.py``), when ``STROM_RECORD_COMPAT=1``.

A folder's conftest.py says ``pytest_runtest_makereport, pytest_sessionfinish = recorder(...)``.
Each test's outcome is its call phase (or its setup, when that failed or skipped).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compat_tests.librdkafka.suite import FAILED, PASSED, SKIPPED, Outcome, SuiteResults, write_results

RECORD_ENV = "STROM_RECORD_COMPAT"


def recording() -> bool:
    return os.environ.get(RECORD_ENV) == "1"


def recorder(directory: Path, suite: str, client: str, version: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    outcomes: dict[str, Outcome] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if Path(str(item.fspath)).parent == directory and (
            report.when == "call" or (report.when == "setup" and not report.passed)
        ):
            state = PASSED if report.passed else SKIPPED if report.skipped else FAILED
            detail = "" if report.passed else str(report.longrepr)[-300:]
            outcomes[item.name] = Outcome(state, round(report.duration, 3), detail)
        return report

    def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
        if outcomes and recording():
            write_results(SuiteResults(suite, client, version, dict(outcomes)), directory / "results.json")

    return pytest_runtest_makereport, pytest_sessionfinish
