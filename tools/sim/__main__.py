"""``python -m strom.sim``: run seeds of the deterministic simulation.

    python -m strom.sim --seeds 1000            # seeds 0..999, a progress bar and a summary
    python -m strom.sim --seeds 200 --start 5000
    python -m strom.sim --seed 1234 --trace     # replay one seed, print its whole trace

A failing seed prints its violations, the readable part of its trace (leaders and epochs,
acknowledged appends, truncations, faults) and the command that replays it. String hashing is
pinned (PYTHONHASHSEED=0, set by re-running the interpreter when needed) so that a seed replays
the same run in any process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from .run import SimConfig, run_seed


def _pin_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "strom.sim", *sys.argv[1:]])


def _bar(done: int, total: int, failed: int, started: float) -> str:
    width = 30
    filled = width * done // max(total, 1)
    rate = done / max(time.perf_counter() - started, 1e-9)
    return f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} seeds, {failed} failed, {rate:.1f} seeds/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.sim", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="print the whole trace of --seed")
    parser.add_argument("--duration", type=float, default=SimConfig.duration, help="simulated seconds of workload")
    parser.add_argument("--brokers", type=int, default=SimConfig.brokers)
    parser.add_argument("--partitions", type=int, default=SimConfig.partitions)
    parser.add_argument("--no-faults", action="store_true", help="run without the nemesis")
    parser.add_argument(
        "--fast-restarts", action="store_true", help="crashed brokers restart before their ZooKeeper session expired"
    )
    args = parser.parse_args(argv)
    if argv is None:
        _pin_hash_seed()
    config = SimConfig(
        duration=args.duration,
        brokers=args.brokers,
        partitions=args.partitions,
        faults=not args.no_faults,
        fast_restarts=args.fast_restarts,
    )
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
    started = time.perf_counter()
    failed: list[int] = []
    acked = faults = 0
    seeds = range(args.start, args.start + args.seeds)
    for done, seed in enumerate(seeds, 1):
        result = run_seed(seed, config)
        acked += result.acked
        faults += result.faults
        if not result.ok:
            failed.append(seed)
            print("\n" + result.report(), flush=True)
        print(_bar(done, len(seeds), len(failed), started), end="", flush=True, file=sys.stderr)
    elapsed = time.perf_counter() - started
    print(file=sys.stderr)
    print(
        f"{len(seeds)} seeds ({seeds.start}..{seeds.stop - 1}) in {elapsed:.1f}s ({len(seeds) / elapsed:.1f} seeds/s): "
        f"{len(seeds) - len(failed)} passed, {len(failed)} failed; {acked} acknowledged records, {faults} faults"
    )
    if failed:
        print("failed seeds: " + " ".join(map(str, failed)))
        print(f"replay one: python -m strom.sim --seed {failed[0]} --trace")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
