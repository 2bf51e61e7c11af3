"""The simulation finds the defects of issue 21 ("Correctness under faults") when their fixes are
reverted (``reverts.py``, a monkeypatch each), on recorded seeds, and the same seeds run clean
with the fixes.

A seed decides the whole run, so each case below is a replay: the faults that expose the defect
are the ones the seed's nemesis injects (some cases narrow the nemesis to the faults that matter,
``fault_weights``, as one would when hunting one class of bug). The seeds were found by running
the reverted broker over seed ranges (``python -m strom.sim`` does the same on the fixed one).
"""

from __future__ import annotations

import pytest

from strom.sim import SimConfig, run_seed

from .reverts import reverted

pytestmark = pytest.mark.timeout(900)

ISOLATIONS = {"isolate": 1}

CASES = [
    # TxnOffsetCommit's batches taken for duplicates: the commits after the first in a producer
    # epoch are answered NONE and never written; the coordinator that loads the group after a
    # move finds an old offset
    pytest.param("coordinator-appends-as-client", 1, SimConfig(duration=6), "group group-txn0 has offset", id="txn-offsets"),
    # the zombie leader: isolated from the brokers and ZooKeeper while a Produce waits, demoted,
    # truncated, then answers NONE because the new leader's high watermark passed the offset
    pytest.param(
        "acks-by-high-watermark-only",
        4,
        SimConfig(duration=10, fault_weights=ISOLATIONS, fault_rate=1.0),
        "acknowledged",
        id="acks-after-leadership-loss",
    ),
]


@pytest.mark.parametrize(("defect", "seed", "config", "violation"), CASES)
def test_the_simulation_finds_the_defect_when_its_fix_is_reverted(defect, seed, config, violation):
    with reverted(defect):
        broken = run_seed(seed, config)
    assert not broken.ok, f"seed {seed} no longer finds {defect}"
    assert any(violation in v for v in broken.violations), broken.report()
    fixed = run_seed(seed, config)
    assert fixed.ok, fixed.report()
