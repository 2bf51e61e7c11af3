"""Run kcat's own test scripts (``tests/NNNN-*.sh`` of its Debian source) against Strom.

Each script is one case, run from ``tests/`` with ``BROKERS=127.0.0.1:PORT`` (the scripts'
own configuration: ``helpers.sh`` builds ``../kcat -b $BROKERS``). The scripts expect
auto-created topics with at least 3 partitions, so the worker's broker runs with
``num.partitions=3``. Exit 0 is a pass unless the script printed ``TEST SKIPPED``.

Usage::

    python -m compat_tests.kcat_suite.runner [--workers N] [--record]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from compat_tests.librdkafka.suite import (
    FAILED,
    PASSED,
    RESULTS_DIR,
    SKIPPED,
    TIMEOUT,
    WORK_ROOT,
    Case,
    Outcome,
    SuiteError,
    SuiteResults,
    read_allowlist,
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
CASE_TIMEOUT_S = 120.0
BROKER_OVERRIDES = {"num.partitions": "3", "auto.create.topics.enable": "true"}


def find_tree(work: Path = WORK_ROOT) -> Path:
    for tree in sorted(work.glob("kafkacat-[0-9]*")):
        if (tree / "tests" / "helpers.sh").is_file() and (tree / "kcat").exists():
            return tree
    raise SuiteError(f"kcat's tests are not set up under {work}: run {BUILD_SCRIPT}")


def version_of(tree: Path) -> str:
    return tree.name.split("-", 1)[1]


def scripts(tree: Path) -> list[str]:
    """Test script names without ``.sh`` (``0001-exit_eof``), in the suite's order."""
    return sorted(p.stem for p in (tree / "tests").glob("[0-9][0-9][0-9][0-9]*.sh"))


def outcome_of(returncode: int | None, output: str, timeout: float) -> Outcome:
    if returncode is None:
        return Outcome(TIMEOUT, timeout, f"no result within {timeout:.0f}s")
    if returncode != 0:
        last = [line for line in output.splitlines() if line.strip()][-3:]
        return Outcome(FAILED, 0.0, f"exit {returncode}: " + " / ".join(last)[:300])
    if "TEST SKIPPED" in output:
        reason = output.split("TEST SKIPPED:", 1)[-1].strip().splitlines()[0] if "TEST SKIPPED:" in output else ""
        return Outcome(SKIPPED, 0.0, reason.replace("\x1b[0m", "")[:300])
    return Outcome(PASSED)


def make_case_runner(tree: Path, timeout: float = CASE_TIMEOUT_S):
    def run_case(case: Case, broker: BrokerProcess, workdir: Path) -> dict[str, Outcome]:
        output = workdir / f"{case.key}.out"
        env = {**os.environ, "BROKERS": broker.bootstrap}
        started = time.monotonic()
        done = run_command(
            ["bash", f"./{case.key}.sh"], cwd=tree / "tests", env=env, output=output, timeout=timeout, tty_stdin=True
        )
        outcome = outcome_of(done.returncode, output.read_text(errors="replace"), timeout)
        return {case.key: replace(outcome, duration=round(time.monotonic() - started, 3))}

    return run_case


def run(names: list[str], *, workers: int, tree: Path) -> SuiteResults:
    outcomes = run_pool(
        [Case(n) for n in names],
        make_case_runner(tree),
        workers=workers,
        broker_overrides=BROKER_OVERRIDES,
        workdir=runs_dir("kcat"),
    )
    return SuiteResults("kcat", "kcat", version_of(tree), outcomes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--record", action="store_true", help="also write the recorded results.json")
    args = ap.parse_args(argv)
    tree = find_tree()
    allowed = read_allowlist(ALLOWLIST)
    results = run(scripts(tree), workers=args.workers, tree=tree)
    write_results(results, RESULTS_DIR / "kcat.json")
    if args.record:
        write_results(results, RECORDED)
    for name, r in sorted(results.tests.items()):
        print(f"{name:32s} {r.state:8s} {r.detail}")
    failed = results.failed_of(allowed)
    if failed:
        print("allow-listed tests that did not pass: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
