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
LEADER_MOVES = {"zk-expire": 2, "isolate": 2, "zk-cut": 2, "crash": 1}
CHURN = {"zk-expire": 2, "isolate": 2, "zk-cut": 2, "crash": 2, "partition": 3}  # leader moves, lagging followers
# a topic that retains little (a segment every 500 ms, 4 KiB kept) and an acks=1 producer, so a
# leader's log runs ahead of the high watermark while a follower is cut off or paused
RETENTION = SimConfig(
    duration=8,
    fault_weights={"partition": 2, "pause": 1, "drop": 1},
    leader_ack_producers=1,
    topic_configs={"segment.ms": "500", "retention.bytes": "4096"},
)

CASES = [
    # TxnOffsetCommit's batches taken for duplicates: the commits after the first in a producer
    # epoch are answered NONE and never written; the coordinator that loads the group after a
    # move finds an old offset
    pytest.param(
        "coordinator-appends-as-client",
        (1, 0, 3),
        SimConfig(duration=6),
        "group group-txn0 has offset",
        id="txn-offsets",
    ),
    # the zombie leader: isolated from the brokers and ZooKeeper while a Produce waits, demoted,
    # truncated, then answers NONE because the new leader's high watermark passed the offset
    pytest.param(
        "acks-by-high-watermark-only",
        (6, 38, 47),
        SimConfig(duration=10, fault_weights=ISOLATIONS, fault_rate=1.0),
        "acknowledged",
        id="acks-after-leadership-loss",
    ),
    # a replica that led an epoch without appending keeps that epoch at its log end and is told
    # it diverged at every fetch: the idle __consumer_offsets partition never gets its ISR back
    pytest.param(
        "empty-epoch-kept-at-log-end",
        (301, 297, 309),
        SimConfig(duration=8, fault_weights=LEADER_MOVES, fault_rate=1.0),
        "did not converge",
        id="idle-follower-out-of-isr",
    ),
    # KIP-279 (as seed 98 first showed it): broker1 leads epoch 0 (log end 9), broker3 leads
    # epoch 1 from 6 and appends 6-13, broker2 (epoch 0's 0-8) leads epoch 2: broker3, whose last
    # epoch is 1, is told the leader's epoch 0 ends at 9 and cuts there, keeping epoch 1's 6-8;
    # every fetch says the same, and broker3 never rejoins the ISR
    pytest.param(
        "truncation-at-leader-offset",
        (108, 165, 98),
        SimConfig(duration=10, fault_weights=CHURN, fault_rate=1.5),
        "did not converge",
        id="truncation-at-unknown-epoch",
    ),
    # KIP-890 part 1: a lossy link holds the coordinator's answer to the leader's verification
    # of txn0's first batch to sim-1; the producer's delivery timeout passes, it aborts (EndTxn in
    # the same epoch) and the abort marker reaches the leader first; the answer then lets the
    # verified batch be appended after the marker, and it joins the producer's next transaction
    pytest.param(
        "no-verification-guard",
        1,
        SimConfig(duration=10, fault_weights={"stall": 1}, fault_rate=1.5, txn_delivery_timeout=1.0),
        "appended after its transaction ended",
        id="verification-guard",
    ),
    # size retention deletes segments the high watermark has not passed (a follower is cut off,
    # still in the ISR, while the acks=1 producer goes on): the leader's log start offset passes
    # its high watermark, as readers are shown in their Fetch answers
    pytest.param(
        "retention-past-high-watermark",
        (3, 0, 2),
        RETENTION,
        "above the high watermark",
        id="retention-past-high-watermark",
    ),
]


@pytest.mark.parametrize(("defect", "seeds", "config", "violation"), CASES)
def test_the_simulation_finds_the_defect_when_its_fix_is_reverted(defect, seeds, config, violation):
    """The first of the recorded seeds that finds the defect with its fix reverted runs clean
    with the fix. Several seeds are recorded per defect because any change to the broker's code
    may change the order of events a seed produces (the seed decides the faults and the
    scheduler's choices, the code decides what happens between them): a change that makes all
    of them miss the defect fails this test, and the seeds are searched again
    (``python -m strom.sim.tests.hunt CASE START COUNT``)."""
    seeds = (seeds,) if isinstance(seeds, int) else seeds
    misses = []
    for seed in seeds:
        with reverted(defect):
            broken = run_seed(seed, config)
        if not broken.ok and any(violation in v for v in broken.violations):
            fixed = run_seed(seed, config)
            assert fixed.ok, fixed.report()
            return
        misses.append(f"seed {seed}: " + ("ran clean" if broken.ok else "; ".join(broken.violations)[:300]))
    pytest.fail(f"none of the seeds {list(seeds)} finds {defect} any more:\n" + "\n".join(misses))


def test_a_broker_restarted_before_its_session_expired_loses_no_acknowledged_record():
    """A broker that lost its page cache and restarts before its old ZooKeeper session expired
    re-registers and leads again with its shorter log (the controller does not treat the
    re-registration as a bounce, as Kafka's does): records read below the high watermark are
    replaced. Found by the simulation (issue 23); fixed: the controller treats a registration
    newer than a partition's state as a bounce and elects again, and the broker never leads in a
    state written for an earlier registration of itself."""
    config = SimConfig(duration=8, fault_weights={"crash": 3, "isolate": 1}, fault_rate=1.0, fast_restarts=True)
    result = run_seed(211, config)
    assert result.ok, result.report()
