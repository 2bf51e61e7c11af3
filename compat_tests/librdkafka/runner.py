"""Run librdkafka's own regression suite (``tests/test-runner``) against Strom brokers.

Each case is one test number (``TESTS=0001``), run as its own ``test-runner`` process so a
hang or crash costs one case, not the run. ``-L`` leaves out the tests marked local (they
never contact a broker, so they say nothing about Strom). The runner reads its settings from
a per-worker ``test.conf``::

    bootstrap.servers=127.0.0.1:PORT
    test.timeout.multiplier=M

and the broker version whose behaviour Strom offers from ``TEST_KAFKA_VERSION``. Outcomes are
parsed from the summary table ``test-runner`` prints (``| name | STATE | 1.234s | reason``).

Usage::

    python -m compat_tests.librdkafka.runner [--all | --tests 0001,0002] [--workers N]
        [--mode classic|consumer|cluster]
        [--record]   # also write the mode's results file (the README's source)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from compat_tests.librdkafka.suite import (
    FAILED,
    PASSED,
    PROJECT_ROOT,
    RESULTS_DIR,
    SKIPPED,
    TIMEOUT,
    WORK_ROOT,
    Case,
    Outcome,
    SuiteError,
    SuiteResults,
    read_allowlist,
    read_results,
    run_command,
    run_pool,
    runs_dir,
    write_results,
)
from strom.tools.broker_process import BrokerProcess

HERE = Path(__file__).resolve().parent
ALLOWLIST = HERE / "allowlist.txt"
RECORDED = HERE / "results.json"
BUILD_SCRIPT = HERE / "build.sh"
KAFKA_VERSION = "3.9.0"
KAFKA_HOME = Path(os.environ.get("KAFKA_HOME", PROJECT_ROOT.parent / "shared" / "jvm" / "kafka-4.0.0"))
TIMEOUT_MULTIPLIER = "2"
CASE_TIMEOUT_S = 300.0
# As the suite's own test clusters (tests/scenarios/default.json: 4 partitions,
# auto-creation). group.initial.rebalance.delay.ms keeps Kafka's default (3 s): the
# static-membership test relies on both members joining one generation.
BROKER_OVERRIDES = {
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    # as the suite's own clusters (trivup): an ACL authorizer that allows what no ACL names, so the
    # ACL tests (0081 CreateAcls..., 0109/0115/0119 with kafka-acls.sh) can deny a topic
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\(B")
_SUMMARY = re.compile(r"^\|\s*(\d{4}_\S+)\s*\|\s*([A-Z_]+)\s*\|\s*([0-9.]+)s\s*\|\s*(.*)$")
_STATE_MAP = {"PASSED": PASSED, "FAILED": FAILED, "SKIPPED": SKIPPED, "RUNNING": FAILED, "NOT_STARTED": SKIPPED}
_TEST_DEF = re.compile(r"_TEST\((\d{4}_\w+),\s*([^,)]*)")
_KNOWN_ISSUE = re.compile(r"\bTEST_F_KNOWN_ISSUE\b")
_SCENARIO = re.compile(r'\.scenario\s*=\s*"([^"]*)"')
SCENARIO_OVERRIDES = {"default": {}, "noautocreate": {"auto.create.topics.enable": "false"}}
_SUBSCRIBES = re.compile(r"subscribe\(")


@dataclass(frozen=True)
class Mode:
    """One way of running the suite: which librdkafka tree, which tests, against which brokers,
    with its own allow-list, recorded results and findings.

    ``classic``: librdkafka 2.0.2 (bookworm's source package), every broker test, one standalone
    broker per worker. ``consumer``: librdkafka 2.14.2 (Debian's newer source package, built by
    ``build_kip848.sh``; 2.0.2 has no KIP-848 client) with ``TEST_CONSUMER_GROUP_PROTOCOL=consumer``,
    the tests whose consumers join a group (their source calls ``subscribe(``). ``cluster``:
    librdkafka 2.14.2's tests that create topics with replication factor 3 (classic group protocol;
    2.0.2 hangs in closing a consumer after a topic deletion, FINDINGS.md), against ZooKeeper and
    three Strom brokers per worker."""

    name: str
    client: str  # the README table's row label
    allowlist: Path
    recorded: Path
    findings: Path
    tree_root: Path  # where find_tree looks
    kafka_version: str = KAFKA_VERSION
    env: Mapping[str, str] = field(default_factory=dict)
    brokers: int = 1  # > 1: a ZooKeeper cluster per worker
    only: tuple[str, ...] = ()  # test numbers of the mode (empty: every broker test)
    group_tests_only: bool = False  # only tests whose consumers subscribe

    def numbers(self, tree: Path) -> list[str]:
        numbers = test_numbers(tree)
        if self.only:
            numbers = [n for n in numbers if n in self.only]
        if self.group_tests_only:
            numbers = [n for n in numbers if n in subscribing_numbers(tree)]
        return numbers


# The tests that create topics with replication factor 3 (FINDINGS.md, "three brokers").
CLUSTER_TESTS = ("0098", "0101", "0103", "0107", "0111")
CLASSIC = Mode("classic", "librdkafka", HERE / "allowlist.txt", HERE / "results.json", HERE / "FINDINGS.md", WORK_ROOT)
CONSUMER = Mode(
    "consumer",
    "librdkafka, group.protocol=consumer",
    HERE / "allowlist-consumer.txt",
    HERE / "results-consumer.json",
    HERE / "FINDINGS-consumer.md",
    WORK_ROOT / "kip848",
    kafka_version="4.0.0",
    env={"TEST_CONSUMER_GROUP_PROTOCOL": "consumer"},
    group_tests_only=True,
)
CLUSTER = Mode(
    "cluster",
    "librdkafka, 3-broker cluster",
    HERE / "allowlist-cluster.txt",
    HERE / "results-cluster.json",
    HERE / "FINDINGS.md",
    WORK_ROOT / "kip848",
    kafka_version="4.0.0",
    brokers=3,
    only=CLUSTER_TESTS,
)
MODES = {m.name: m for m in (CLASSIC, CONSUMER, CLUSTER)}


def find_tree(work: Path = WORK_ROOT) -> Path:
    """The built librdkafka source tree (``librdkafka-X.Y.Z`` holding ``tests/test-runner``)."""
    for tree in sorted(work.glob("librdkafka-[0-9]*")):
        if (tree / "tests" / "test-runner").is_file():
            return tree
    script = BUILD_SCRIPT if work == WORK_ROOT else HERE / "build_kip848.sh"
    raise SuiteError(f"librdkafka's test-runner is not built under {work}: run {script}")


def subscribing_numbers(tree: Path) -> set[str]:
    """Numbers of the tests whose source subscribes a consumer to topics (group members)."""
    found = set()
    for source in (tree / "tests").glob("[0-9][0-9][0-9][0-9]-*.c*"):
        if _SUBSCRIBES.search(source.read_text(errors="replace")):
            found.add(source.name[:4])
    return found


def version_of(tree: Path) -> str:
    return tree.name.split("-", 1)[1]


def broker_tests(tree: Path) -> dict[str, tuple[str, ...]]:
    """Tests in test.c's table that need a broker (not local, not manual), with the
    scenarios each runs in (``default`` unless its entry names others)."""
    text = (tree / "tests" / "test.c").read_text(errors="replace")
    found: dict[str, tuple[str, ...]] = {}
    for entry in text.split("_TEST(")[1:]:
        m = _TEST_DEF.match("_TEST(" + entry)
        if not m or "TEST_F_LOCAL" in m.group(2) or "TEST_F_MANUAL" in m.group(2):
            continue
        if m.group(1).endswith("_mock"):  # newer suites: mock-cluster tests not flagged local
            continue
        sm = _SCENARIO.search(entry)  # the entry runs up to the next _TEST(
        found[m.group(1)] = tuple(sm.group(1).split(",")) if sm else ("default",)
    return found


def known_issue_numbers(tree: Path) -> set[str]:
    """Numbers whose tests upstream flags as known issues: test-runner runs them only with -k."""
    text = (tree / "tests" / "test.c").read_text(errors="replace")
    return {name[:4] for name, flags in _TEST_DEF.findall(text) if _KNOWN_ISSUE.search(flags)}


def test_numbers(tree: Path) -> list[str]:
    """Numbers of the broker tests (a number may name several tests)."""
    return list(dict.fromkeys(name[:4] for name in broker_tests(tree)))


def parse_summary(text: str) -> dict[str, Outcome]:
    """Outcomes from test-runner's summary table (colours stripped)."""
    found: dict[str, Outcome] = {}
    for line in _ANSI.sub("", text).splitlines():
        m = _SUMMARY.match(line.strip())
        if m and m.group(2) in _STATE_MAP:
            name, state, secs, rest = m.groups()
            found[name] = Outcome(_STATE_MAP[state], float(secs), rest.strip(" |")[:300])
    return found


_PASSED_LINE = re.compile(r"^\[[^]]*\] =+ Test (\d{4}_\w+) PASSED =+$")
_FAILURE = re.compile(r'^### Test "(\d{4}_\w+)[^"]*" failed at (\S+?)\(?\)?(?: at [^#]*)?: ###$')


def parse_failure(text: str) -> dict[str, Outcome]:
    """What a test-runner that aborted (no summary then) reported: the tests it saw pass
    and the first failure."""
    lines = _ANSI.sub("", text).splitlines()
    found = {m.group(1): Outcome(PASSED) for m in map(_PASSED_LINE.match, lines) if m}
    for i, line in enumerate(lines):
        m = _FAILURE.match(line.strip())
        if m:
            message = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found[m.group(1)] = Outcome(FAILED, 0.0, f"{m.group(2)}: {message}"[:300])
            break
    return found


def _timed_out(
    key: str, found: dict[str, Outcome], timeout: float, names: list[str] | None = None
) -> dict[str, Outcome]:
    """A killed runner: what it finished keeps its outcome, the rest (of ``names``, the number's
    tests in the scenario, when it reported nothing) timed out."""
    late = Outcome(TIMEOUT, timeout, f"no result within {timeout:.0f}s")
    unfinished = {n: late for n, r in found.items() if r.state != PASSED}
    if found:
        return {**found, **unfinished}
    return {n: late for n in names} if names else {f"{key}_?": late}


def _env(tree: Path, conf: Path, mode: Mode = CLASSIC) -> dict[str, str]:
    libs = f"{tree / 'src'}:{tree / 'src-cpp'}"
    inherited = {k: v for k, v in os.environ.items() if k != "TEST_CONSUMER_GROUP_PROTOCOL"}  # the mode decides
    return {
        **inherited,
        **mode.env,
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_KAFKA_VERSION": mode.kafka_version,
        "LD_LIBRARY_PATH": f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "TEST_LEVEL": "2",
        # kafka-topics.sh for the tests that create topics through it (see kafka_path/).
        "KAFKA_PATH": str(HERE / "kafka_path"),
        "STROM_PYTHON": sys.executable,
        "PYTHONPATH": f"{PROJECT_ROOT}:{os.environ.get('PYTHONPATH', '')}",
        # 0098's Java transactional producer (tests/java, built by `make java`) against Kafka 4.0's jars
        "KAFKA_JARS": str(KAFKA_HOME / "libs"),
    }


def make_case_runner(tree: Path, scenario: str = "default", timeout: float = CASE_TIMEOUT_S, mode: Mode = CLASSIC):
    """A pool callback that runs one test number, in ``scenario``, against the worker's broker."""

    wanted = {name for name, scenarios in broker_tests(tree).items() if scenario in scenarios}
    known_issues = known_issue_numbers(tree)

    def run_case(case: Case, broker: BrokerProcess, workdir: Path) -> dict[str, Outcome]:
        conf = workdir / "test.conf"
        conf.write_text(f"bootstrap.servers={broker.bootstrap}\ntest.timeout.multiplier={TIMEOUT_MULTIPLIER}\n")
        output = workdir / f"test-{case.key}.out"
        env = {**_env(tree, conf, mode), "TESTS": case.key, "BROKERS": broker.bootstrap}
        flags = ["-k"] if case.key in known_issues else []
        started = time.monotonic()
        done = run_command(
            ["./test-runner", "-L", *flags, "-s", scenario], cwd=tree / "tests", env=env, output=output, timeout=timeout
        )
        text = output.read_text(errors="replace")
        found = {n: r for n, r in (parse_summary(text) or parse_failure(text)).items() if n in wanted}
        wall = round(time.monotonic() - started, 3)  # for tests an abort left without a duration
        found = {n: r if r.duration else replace(r, duration=wall) for n, r in found.items()}
        if done.returncode is None:
            return _timed_out(case.key, found, timeout, sorted(n for n in wanted if n.startswith(case.key)))
        if not found:
            return {f"{case.key}_?": Outcome(FAILED, 0.0, f"no summary (exit {done.returncode}), see {output}")}
        return found

    return run_case


def run(
    numbers: list[str], *, workers: int, tree: Path, expected: dict[str, float] | None = None, mode: Mode = CLASSIC
) -> SuiteResults:
    """Run the broker tests of ``numbers``. Each scenario has its own pool of brokers
    configured for it (``noautocreate``: no topic auto-creation); the pools run at once."""
    expected = expected or {}
    tests = broker_tests(tree)
    outcomes: dict[str, Outcome] = {}
    errors: list[BaseException] = []

    def run_scenario(scenario: str, cases: list[Case]) -> None:
        try:
            overrides = {**BROKER_OVERRIDES, **SCENARIO_OVERRIDES[scenario]}
            outcomes.update(
                run_pool(
                    cases,
                    make_case_runner(tree, scenario, mode=mode),
                    workers=min(workers, len(cases)),
                    broker_overrides=overrides,
                    workdir=runs_dir(f"librdkafka-{mode.name}-{scenario}"),
                    make_broker=None if mode.brokers == 1 else _cluster_factory(mode.brokers, overrides),
                )
            )
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = []
    for scenario in SCENARIO_OVERRIDES:
        in_scenario = {name[:4] for name, scenarios in tests.items() if scenario in scenarios}
        cases = [Case(n, expected.get(n, 0.0)) for n in numbers if n in in_scenario]
        if cases:
            threads.append(threading.Thread(target=run_scenario, args=(scenario, cases)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return SuiteResults("librdkafka", mode.client, version_of(tree), outcomes)


class ClusterBrokers:
    """A worker's ZooKeeper and brokers (``strom.testing``'s cluster, brokers as processes), in the
    shape ``run_pool`` expects of a broker: ``bootstrap``, ``running``, ``start()``, a context."""

    def __init__(self, workdir: Path, size: int, overrides: Mapping[str, str]) -> None:
        from strom.testing import StromCluster

        workdir.mkdir(parents=True, exist_ok=True)
        # as the suite's own clusters (tests/cluster_testing.py): each broker in rack RACK<id> and
        # the rack-aware replica selector, which 0101_fetch_from_follower needs (KIP-392)
        self._cluster = StromCluster(
            size,
            {**overrides, "replica.selector.class": RACK_AWARE_SELECTOR},
            data_dir=str(workdir / "cluster"),
            keep_data=True,
            node_configs=lambda node: {"broker.rack": f"RACK{node}"},
        )

    @property
    def bootstrap(self) -> str:
        return self._cluster.bootstrap_servers

    @property
    def running(self) -> bool:
        return bool(self._cluster.brokers) and all(b.running for b in self._cluster.brokers)

    def start(self) -> ClusterBrokers:
        self._cluster.start()
        return self

    def __enter__(self) -> ClusterBrokers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._cluster.close()


def _cluster_factory(size: int, overrides: Mapping[str, str]) -> Callable[[Path], ClusterBrokers]:
    return lambda workdir: ClusterBrokers(workdir, size, overrides)


def allowlisted_numbers(names: list[str]) -> list[str]:
    return list(dict.fromkeys(n[:4] for n in names))


def expected_durations(mode: Mode = CLASSIC) -> dict[str, float]:
    """Per test number, the duration of the last recorded run (for scheduling)."""
    if not mode.recorded.exists():
        return {}
    totals: dict[str, float] = defaultdict(float)
    for name, r in read_results(mode.recorded).tests.items():
        totals[name[:4]] += r.duration
    return dict(totals)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="run every broker test, not just the allow-list")
    ap.add_argument("--tests", help="comma-separated test numbers to run")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--record", action="store_true", help="also write the mode's recorded results file")
    ap.add_argument(
        "--mode",
        choices=sorted(MODES),
        default="classic",
        help="classic (default), consumer (group.protocol=consumer) or cluster (3 brokers)",
    )
    args = ap.parse_args(argv)
    mode = MODES[args.mode]
    tree = find_tree(mode.tree_root)
    allowed = read_allowlist(mode.allowlist)
    if args.tests:
        numbers = [n.strip() for n in args.tests.split(",") if n.strip()]
    elif args.all:
        numbers = mode.numbers(tree)
    else:
        numbers = allowlisted_numbers(allowed)
    results = run(numbers, workers=args.workers, tree=tree, expected=expected_durations(mode), mode=mode)
    write_results(results, RESULTS_DIR / f"librdkafka-{mode.name}.json")
    if args.record:
        write_results(results, mode.recorded)
    for name, r in sorted(results.tests.items()):
        print(f"{name:48s} {r.state:8s} {r.duration:8.1f}s {r.detail}")
    failed = [n for n in results.failed_of(allowed) if n[:4] in numbers]
    print(
        f"librdkafka suite: {results.count(PASSED)} passed, {results.ran - results.count(PASSED)} failed, "
        f"{results.count(SKIPPED)} skipped"
    )
    if failed:
        print("allow-listed tests that did not pass: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
