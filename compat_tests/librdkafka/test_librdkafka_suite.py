"""librdkafka's own test suite against brokers these tests start.

It runs its allow-listed tests (``allowlist.txt`` here) on four workers, each with its own Strom
broker on 127.0.0.1; the test fails naming every allow-listed test that did not pass. The suite
also runs in two more modes, each with its own allow-list, recorded results and findings:
``consumer`` (librdkafka 2.14.2 with ``TEST_CONSUMER_GROUP_PROTOCOL=consumer``, the KIP-848 group
protocol) and ``cluster`` (the tests that need three brokers, against ZooKeeper and three Strom
brokers per worker). The suite is built by ``.ci/run`` (``build.sh``, ``build_kip848.sh``).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from compat_tests.librdkafka import runner as rdk_runner
from compat_tests.librdkafka.suite import (
    FAILED,
    PASSED,
    SKIPPED,
    TIMEOUT,
    Outcome,
    SuiteError,
    SuiteResults,
    read_allowlist,
)
from compat_tests.support.suites import (
    SUITE_TIMEOUT_S,
    WORKERS,
    check_findings_name_every_test_not_passing,
    check_recorded_results_pass,
    report,
    tree_or_skip,
)

pytestmark = pytest.mark.usefixtures("suite_runs_dir")


def _librdkafka_allowlist_passes(mode: rdk_runner.Mode, workers: int) -> None:
    tree = tree_or_skip(lambda: rdk_runner.find_tree(mode.tree_root))
    if mode.brokers > 1:
        from strom.testing import zookeeper_available

        reason = zookeeper_available()
        if reason is not None:
            if os.environ.get("STROM_COMPAT_REQUIRE_ALL"):
                raise AssertionError(f"the {mode.name} mode needs ZooKeeper: {reason}")
            pytest.skip(reason)
    allowed = read_allowlist(mode.allowlist)
    numbers = rdk_runner.allowlisted_numbers(allowed)
    results = rdk_runner.run(
        numbers, workers=workers, tree=tree, expected=rdk_runner.expected_durations(mode), mode=mode
    )
    results = _rerun_failed_alone(results, allowed, tree, mode)
    assert not results.failed_of(allowed), report(results, allowed)


@pytest.mark.timeout(SUITE_TIMEOUT_S)
@pytest.mark.xdist_group("suite-librdkafka-classic")
def test_librdkafka_allowlisted_tests_pass(tmp_path: Path) -> None:
    _librdkafka_allowlist_passes(rdk_runner.CLASSIC, WORKERS)


@pytest.mark.timeout(SUITE_TIMEOUT_S)
@pytest.mark.xdist_group("suite-librdkafka-consumer")
def test_librdkafka_consumer_protocol_allowlisted_tests_pass() -> None:
    """librdkafka 2.14.2's group tests with group.protocol=consumer (KIP-848) against Strom."""
    _librdkafka_allowlist_passes(rdk_runner.CONSUMER, WORKERS)


@pytest.mark.timeout(SUITE_TIMEOUT_S)
@pytest.mark.xdist_group("suite-librdkafka-cluster")
def test_librdkafka_three_broker_allowlisted_tests_pass() -> None:
    """The tests that create topics with replication factor 3 (transactions among them) against
    ZooKeeper and three Strom brokers; two workers, each with its own cluster."""
    _librdkafka_allowlist_passes(rdk_runner.CLUSTER, min(WORKERS, 2))


def _rerun_failed_alone(
    results: SuiteResults, allowed: list[str], tree: Path, mode: rdk_runner.Mode = rdk_runner.CLASSIC
) -> SuiteResults:
    """A few of librdkafka's tests time their own steps (0018's group termination, 0086's purge of
    requests in flight) and miss now and then under four workers plus the rest of CI on two
    cores. Each allow-listed test that failed runs once more, alone; the first failure is still
    shown, as a warning, so a test that fails often stays visible."""
    failed = results.failed_of(allowed)
    if not failed:
        return results
    again = rdk_runner.run(sorted({name[:4] for name in failed}), workers=1, tree=tree, mode=mode)
    for name in failed:
        first, second = results.tests.get(name), again.tests.get(name)
        warnings.warn(
            f"librdkafka ({mode.name}) {name} did not pass under load "
            f"({first.state + ' ' + first.detail if first else 'not reported'}); "
            f"run again alone: {second.state if second else 'not reported'}",
            stacklevel=2,
        )
    return replace(results, tests={**results.tests, **again.tests})


# -- recorded results, allow-lists and the runner (no broker needed) ---------------------

# (allow-list, recorded results, findings) of each mode
_RECORDS = [(rdk_runner.ALLOWLIST, rdk_runner.RECORDED, rdk_runner.HERE / "FINDINGS.md")]
_RECORDS += [(m.allowlist, m.recorded, m.findings) for m in (rdk_runner.CONSUMER, rdk_runner.CLUSTER)]
_RECORD_IDS = ["librdkafka", "librdkafka-consumer", "librdkafka-cluster"]


@pytest.mark.parametrize("allowlist, recorded, findings", _RECORDS, ids=_RECORD_IDS)
def test_recorded_results_pass_every_allowlisted_test(allowlist: Path, recorded: Path, findings: Path) -> None:
    check_recorded_results_pass(allowlist, recorded)


@pytest.mark.parametrize("allowlist, recorded, findings", _RECORDS, ids=_RECORD_IDS)
def test_every_test_not_passing_is_named_in_findings(allowlist: Path, recorded: Path, findings: Path) -> None:
    check_findings_name_every_test_not_passing(recorded, findings)


def test_consumer_mode_runs_librdkafka_with_the_consumer_group_protocol(tmp_path: Path) -> None:
    """The consumer mode's environment selects KIP-848 in librdkafka's test harness; its tests are
    the broker tests that subscribe (not the mock-cluster ones newer suites leave unflagged)."""
    env = rdk_runner._env(tmp_path, tmp_path / "test.conf", rdk_runner.CONSUMER)
    assert env["TEST_CONSUMER_GROUP_PROTOCOL"] == "consumer" and env["TEST_KAFKA_VERSION"] == "4.0.0"
    assert "TEST_CONSUMER_GROUP_PROTOCOL" not in rdk_runner._env(tmp_path, tmp_path / "c", rdk_runner.CLASSIC)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.c").write_text(
        "_TEST(0001_a, 0),\n_TEST(0002_b, 0),\n_TEST(0003_c_mock, 0),\n_TEST(0004_d, TEST_F_LOCAL),\n"
    )
    (tests / "0001-a.c").write_text("rd_kafka_produce(rk);\n")
    (tests / "0002-b.c").write_text("test_consumer_subscribe(rk, topic);\n")
    (tests / "0003-c_mock.c").write_text("test_consumer_subscribe(rk, topic);\n")
    (tests / "0004-d.c").write_text("test_consumer_subscribe(rk, topic);\n")
    assert rdk_runner.CONSUMER.numbers(tmp_path) == ["0002"], "group tests only, no mock or local ones"
    assert rdk_runner.CLASSIC.numbers(tmp_path) == ["0001", "0002"]


def test_a_killed_runner_names_the_tests_that_timed_out() -> None:
    late = rdk_runner._timed_out("0113", {}, 300, ["0113_cooperative_rebalance"])
    assert {n: r.state for n, r in late.items()} == {"0113_cooperative_rebalance": TIMEOUT}
    assert list(rdk_runner._timed_out("0113", {}, 300)) == ["0113_?"]
    some = rdk_runner._timed_out("0045", {"0045_a": Outcome(PASSED), "0045_b": Outcome(FAILED)}, 300, ["0045_c"])
    assert {n: r.state for n, r in some.items()} == {"0045_a": PASSED, "0045_b": TIMEOUT}


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


def test_a_failed_allowlisted_test_runs_once_more_alone(monkeypatch) -> None:
    first = SuiteResults(
        "librdkafka",
        "librdkafka",
        "2",
        {"0001_a": Outcome(PASSED), "0018_b": Outcome(TIMEOUT, detail="timed out"), "0086_c": Outcome(FAILED)},
    )
    asked = []

    def rerun(numbers, *, workers, tree, mode):
        asked.append((numbers, workers))
        return SuiteResults(
            "librdkafka", "librdkafka", "2", {"0018_b": Outcome(PASSED), "0086_c": Outcome(FAILED, detail="again")}
        )

    monkeypatch.setattr(rdk_runner, "run", rerun)
    with pytest.warns(UserWarning) as warned:
        merged = _rerun_failed_alone(first, ["0001_a", "0018_b", "0086_c"], Path("."))
    assert [str(w.message).split(" did not")[0] for w in warned] == [
        "librdkafka (classic) 0018_b",
        "librdkafka (classic) 0086_c",
    ]
    assert asked == [(["0018", "0086"], 1)]
    assert merged.failed_of(["0001_a", "0018_b", "0086_c"]) == ["0086_c"]
    assert _rerun_failed_alone(merged, ["0001_a", "0018_b"], Path(".")) is merged  # nothing failed: no rerun
    assert len(asked) == 1
