"""Search seeds for a defect case of ``test_defects.py``: run each seed with the defect's fix
reverted and print those that find it (and whether the same seed runs clean with the fix).

    python -m strom.sim.tests.hunt truncation-at-unknown-epoch 0 200 --jobs 2

Used when a change to the broker makes a case's recorded seeds miss its defect (each seed's
order of events depends on the code as well as on the seed)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from typing import Any


def _case(case_id: str) -> tuple[Any, ...]:
    from . import test_defects

    for param in test_defects.CASES:
        if param.id == case_id:
            return tuple(param.values)
    raise SystemExit(f"no case {case_id!r}; cases: {', '.join(str(p.id) for p in test_defects.CASES)}")


def _try(job: tuple[str, int]) -> tuple[int, bool, bool | None, str]:
    from strom.sim import run_seed

    from .reverts import reverted

    case_id, seed = job
    defect, _, config, violation = _case(case_id)
    with reverted(defect):
        broken = run_seed(seed, config)
    found = not broken.ok and any(violation in v for v in broken.violations)
    fixed_ok = run_seed(seed, config).ok if found else None
    return seed, found, fixed_ok, "" if broken.ok else broken.violations[0][:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.sim.tests.hunt", description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a case id of test_defects.py (e.g. acks-after-leadership-loss)")
    parser.add_argument("start", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":  # a seed replays only with the same hash seed
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "strom.sim.tests.hunt", *sys.argv[1:]])
    _case(args.case)
    jobs = [(args.case, seed) for seed in range(args.start, args.start + args.count)]
    found = []
    with multiprocessing.get_context("fork").Pool(max(1, args.jobs)) as pool:
        for seed, hit, fixed_ok, violation in pool.imap(_try, jobs):
            if hit:
                found.append(seed)
                print(f"seed {seed}: finds it; with the fix it {'runs clean' if fixed_ok else 'FAILS too'}", flush=True)
            elif violation:
                print(f"seed {seed}: another violation: {violation}", flush=True)
    print(f"{len(found)} of {args.count} seeds find {args.case}: {found}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
