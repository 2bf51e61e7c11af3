"""The deterministic simulation of a Strom cluster (issue 23): real brokers, one trio loop on a
mock clock, an in-memory network, ZooKeeper and disk, one seed deciding every delay and fault.

    from strom.sim import run_seed
    result = run_seed(42)
    assert result.ok, result.report()

``python -m strom.sim --seeds 1000`` runs many; docs/simulation.md describes it.
"""

from __future__ import annotations

from .run import SimConfig, SimResult, run_seed

__all__ = ["SimConfig", "SimResult", "run_seed"]
