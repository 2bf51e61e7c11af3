"""The README's client-suites table (tools/dev/compat_table.py) from the suites' recorded results."""

from __future__ import annotations

import pytest

from compat_tests.librdkafka.suite import FAILED, PASSED, SKIPPED, TIMEOUT, Outcome, SuiteResults
from strom.tools.dev import compat_table


def test_readme_table_is_current() -> None:
    table = compat_table.render(compat_table.load())
    assert compat_table.is_current(compat_table.README.read_text(), table), (
        "README.md's client-suites table is stale: run python tools/dev/compat_table.py"
    )


def test_table_rows_count_passed_of_run_and_skipped() -> None:
    results = SuiteResults(
        "s",
        "libx",
        "1.2.3",
        {
            "a": Outcome(PASSED),
            "b": Outcome(PASSED),
            "c": Outcome(FAILED),
            "d": Outcome(TIMEOUT),
            "e": Outcome(SKIPPED),
        },
    )
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
