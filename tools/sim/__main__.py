"""``python -m strom.sim``: run seeds of the deterministic simulation.

    python -m strom.sim --seeds 1000                  # seeds 0..999, a progress bar and a summary
    python -m strom.sim --seeds 2000 --jobs 2         # on two processes (one per core)
    python -m strom.sim --seeds 200 --start 5000 --duration 3
    python -m strom.sim --seed 1234 --trace           # replay one seed, print its whole trace

Every field of ``SimConfig`` is an option (``--duration``, ``--fault-weights isolate=1``,
``--no-faults``, ``--broker-configs KEY=VALUE``...; ``--help`` lists them). A failing seed prints
its violations, the readable part of its trace (leaders and epochs, acknowledged appends,
truncations, faults) and the command that replays it with the same options. String hashing is
pinned (PYTHONHASHSEED=0, set by re-running the interpreter when needed) so that a seed replays
the same run in any process.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .options import add_config_options, config_from_args, replay_command
from .run import SimConfig, run_seed


def _pin_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "strom.sim", *sys.argv[1:]])


@dataclass
class Outcome:
    """What a batch keeps of one seed (a worker process sends it back)."""

    seed: int
    ok: bool
    report: str  # the failure report (empty when the seed passed)
    acked: int
    faults: int
    cpu_s: float  # process time the seed took
    sim_time: float


def run_one(seed: int, config: SimConfig) -> Outcome:
    started = time.process_time()
    result = run_seed(seed, config)
    cpu = time.process_time() - started
    return Outcome(
        seed, result.ok, "" if result.ok else result.report(), result.acked, result.faults, cpu, result.sim_time
    )


_worker_config: SimConfig | None = None


def _init_worker(config: SimConfig) -> None:
    global _worker_config
    _worker_config = config


def _run_in_worker(seed: int) -> Outcome:
    assert _worker_config is not None
    return run_one(seed, _worker_config)


def run_many(seeds: range, config: SimConfig, jobs: int) -> Iterator[Outcome]:
    """Each seed's outcome as it finishes (in seed order with one job, as the workers finish with
    more). Each seed's run is the same in any process: the workers are forks of this one, with
    its pinned string hashing."""
    if jobs <= 1:
        for seed in seeds:
            yield run_one(seed, config)
        return
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with context.Pool(jobs, initializer=_init_worker, initargs=(config,)) as pool:
        yield from pool.imap_unordered(_run_in_worker, seeds, chunksize=1)


def _bar(done: int, total: int, failed: int, started: float) -> str:
    width = 30
    filled = width * done // max(total, 1)
    elapsed = time.perf_counter() - started
    rate = done / max(elapsed, 1e-9)
    left = (total - done) / rate if done else 0.0
    return (
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} seeds, {failed} failed, "
        f"{rate:.2f} seeds/s, {elapsed:.0f}s elapsed, ~{left:.0f}s left "
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strom.sim",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes running seeds at once (default 1; 0: one per core)"
    )
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="print the whole trace of --seed")
    add_config_options(parser)
    args = parser.parse_args(argv)
    if argv is None:
        _pin_hash_seed()
    config = config_from_args(args)
    if args.seed is not None:
        result = run_seed(args.seed, config)
        if args.trace:
            print(result.trace.text())
        print(result.report())
        print(
            f"acknowledged records {result.acked}, transactions {result.txns}, faults {result.faults}, "
            f"simulated {result.sim_time:.1f}s, trace {len(result.trace.lines)} lines sha256 {result.digest[:16]}"
        )
        return 0 if result.ok else 1
    jobs = args.jobs if args.jobs > 0 else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    seeds = range(args.start, args.start + args.seeds)
    started = time.perf_counter()
    failed: list[int] = []
    acked = faults = 0
    cpu = 0.0
    tty = sys.stderr.isatty()
    for done, outcome in enumerate(run_many(seeds, config, jobs), 1):
        acked += outcome.acked
        faults += outcome.faults
        cpu += outcome.cpu_s
        if not outcome.ok:
            failed.append(outcome.seed)
            print(("\n" if tty else "") + outcome.report, flush=True)
        if tty or done == len(seeds) or done % 50 == 0:
            print(_bar(done, len(seeds), len(failed), started), end="" if tty else "\n", flush=True, file=sys.stderr)
    elapsed = time.perf_counter() - started
    if tty:
        print(file=sys.stderr)
    n = max(len(seeds), 1)
    print(
        f"{len(seeds)} seeds ({seeds.start}..{seeds.stop - 1}) in {elapsed:.1f}s on {jobs} process(es): "
        f"{len(seeds) / max(elapsed, 1e-9):.2f} seeds/s, {cpu / n:.2f} CPU s per seed; "
        f"{len(seeds) - len(failed)} passed, {len(failed)} failed; {acked} acknowledged records, {faults} faults"
    )
    if failed:
        failed.sort()
        print("failed seeds: " + " ".join(map(str, failed)))
        for seed in failed:
            print(f"  replay: {replay_command(seed, config)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
