"""What the client-suite runners share: allow-lists, results files, a broker-per-worker pool.

A client's own test suite (librdkafka's ``test-runner``, kcat's ``tests/*.sh``) is run in
*cases*: one case is one invocation of the suite's runner, which may report several named
tests. Each worker thread owns one Strom broker (``BrokerProcess`` on 127.0.0.1, OS-chosen
port) and runs its cases one after another against it; workers run in parallel.

Results file (JSON, written by :func:`write_results`)::

    {"suite": "librdkafka", "client": "librdkafka", "version": "2.0.2",
     "tests": {"0001_multiobj": {"state": "PASSED", "duration": 1.2, "detail": ""}, ...}}

``state`` is one of :data:`STATES`. The file in the suite's folder (``results.json``) is the
last recorded run, which the README's compatibility table is generated from; a run writes
its own copy into the ignored work dir first.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from strom.tools.broker_process import BrokerProcess

PASSED, FAILED, SKIPPED, TIMEOUT = "PASSED", "FAILED", "SKIPPED", "TIMEOUT"
STATES = (PASSED, FAILED, SKIPPED, TIMEOUT)
PROJECT_ROOT = Path(__file__).resolve().parents[2]
WORK_ROOT = Path(os.environ.get("STROM_SUITES_WORK", "/tmp/strom-client-suites"))
RESULTS_DIR = PROJECT_ROOT / "compat_tests" / ".work" / "results"


def runs_dir(name: str) -> Path:
    """Where a run of ``name`` keeps its brokers and outputs (replaced by the next run of it):
    under ``STROM_SUITES_RUNS`` when set (the suites' tests set it to their own
    temporary directory, so runs at the same time, from other checkouts or sessions, never remove
    each other's brokers), else ``WORK_ROOT/runs``."""
    return Path(os.environ.get("STROM_SUITES_RUNS") or WORK_ROOT / "runs") / name


class SuiteError(RuntimeError):
    """A suite could not be run (not built, malformed allow-list or results file)."""


@dataclass(frozen=True)
class Outcome:
    """Outcome of one named test of a client's suite."""

    state: str
    duration: float = 0.0
    detail: str = ""


@dataclass
class SuiteResults:
    """All outcomes of one run of a suite, plus which client and version ran."""

    suite: str
    client: str
    version: str
    tests: dict[str, Outcome] = field(default_factory=dict)

    def count(self, state: str) -> int:
        return sum(1 for r in self.tests.values() if r.state == state)

    @property
    def ran(self) -> int:
        """Tests that ran to an outcome (skipped ones did not)."""
        return len(self.tests) - self.count(SKIPPED)

    def failed_of(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` that did not pass (missing from the run counts as failed)."""
        return [n for n in names if n not in self.tests or self.tests[n].state != PASSED]

    def to_json(self) -> dict[str, object]:
        return {
            "suite": self.suite,
            "client": self.client,
            "version": self.version,
            "tests": {name: asdict(r) for name, r in sorted(self.tests.items())},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> SuiteResults:
        try:
            tests = {
                str(name): Outcome(str(r["state"]), float(r.get("duration", 0.0)), str(r.get("detail", "")))
                for name, r in dict(doc["tests"]).items()  # type: ignore[arg-type]
            }
            results = cls(str(doc["suite"]), str(doc["client"]), str(doc["version"]), tests)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SuiteError(f"malformed results document: {exc}") from exc
        bad = sorted(n for n, r in results.tests.items() if r.state not in STATES)
        if bad:
            raise SuiteError(f"unknown test states in results for: {', '.join(bad)}")
        return results


def write_results(results: SuiteResults, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results.to_json(), indent=1, sort_keys=True) + "\n")


def read_results(path: Path) -> SuiteResults:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SuiteError(f"cannot read results file {path}: {exc}") from exc
    return SuiteResults.from_json(doc)


def read_allowlist(path: Path) -> list[str]:
    """Test names, one a line; ``#`` starts a comment; blank lines are ignored."""
    names: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if any(c.isspace() for c in name):
            raise SuiteError(f"{path}:{number}: one test name per line, got {line!r}")
        names.append(name)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SuiteError(f"{path}: listed more than once: {', '.join(dupes)}")
    return names


@dataclass(frozen=True)
class Case:
    """One invocation of a suite's runner; ``key`` names it (a test number, a script)."""

    key: str
    expected_s: float = 0.0


@dataclass(frozen=True)
class Completed:
    """What an invocation did: exit code (None on timeout) and its output file."""

    returncode: int | None
    output: Path


RunCase = Callable[[Case, BrokerProcess, Path], dict[str, Outcome]]
_running: set[int] = set()  # process groups of the cases running now (killed on interrupt)
_running_lock = threading.Lock()


def _kill_running() -> None:
    with _running_lock:
        for pgid in list(_running):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_command(
    cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str], output: Path, timeout: float, tty_stdin: bool = False
) -> Completed:
    """Run ``cmd`` in its own process group, output to ``output``; kill the group on timeout.

    ``tty_stdin`` gives it a pseudo-terminal as standard input (nothing is ever typed), for
    scripts written at a terminal: kcat picks producer mode when stdin is not a tty.
    """
    master, slave = os.openpty() if tty_stdin else (-1, -1)
    try:
        with open(output, "wb") as out:
            proc = subprocess.Popen(
                list(cmd),
                cwd=cwd,
                env=dict(env),
                stdin=slave if tty_stdin else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            with _running_lock:
                _running.add(proc.pid)
            try:
                return Completed(proc.wait(timeout), output)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return Completed(None, output)
            finally:
                with _running_lock:
                    _running.discard(proc.pid)
    finally:
        for fd in (master, slave):
            if fd >= 0:
                os.close(fd)


def _drain(todo: queue.Queue[Case]) -> None:
    while True:
        try:
            todo.get_nowait()
        except queue.Empty:
            return


def run_pool(
    cases: Sequence[Case],
    run_case: RunCase,
    *,
    workers: int,
    broker_overrides: Mapping[str, str],
    workdir: Path | None = None,
    make_broker: Callable[[Path], object] | None = None,
) -> dict[str, Outcome]:
    """Run ``cases`` (longest expected first) on ``workers`` threads, one broker each.

    Each worker's broker, test configuration and case outputs stay in
    ``workdir/worker-N`` (replaced on the next run) for diagnosis. ``make_broker(dir)`` gives a
    worker something else than one ``BrokerProcess`` (a cluster): an object with ``bootstrap``,
    ``running`` and ``start()`` that is its own context manager.
    """
    todo: queue.Queue[Case] = queue.Queue()
    for case in sorted(cases, key=lambda c: -c.expected_s):
        todo.put(case)
    results: dict[str, Outcome] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="strom-suite-"))
    if workdir:
        shutil.rmtree(base, ignore_errors=True)  # the previous run's brokers and outputs
        base.mkdir(parents=True)

    def worker(index: int) -> None:
        try:
            wdir = base / f"worker-{index}"
            with make_broker(wdir) if make_broker else BrokerProcess(wdir, broker_overrides) as broker:
                while True:
                    try:
                        case = todo.get_nowait()
                    except queue.Empty:
                        return
                    if not broker.running:
                        broker.start()
                    out = run_case(case, broker, base / f"worker-{index}")
                    with lock:
                        results.update(out)
        except BaseException as exc:  # reported after join: a worker must not die silently
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(max(1, workers))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # interrupted (Ctrl-C, a pytest timeout): stop brokers and cases
        _drain(todo)
        _kill_running()
        for t in threads:
            t.join()
        raise
    if errors:
        raise SuiteError(f"a suite worker failed: {errors[0]!r}") from errors[0]
    return results
