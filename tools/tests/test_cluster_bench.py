"""The in-process cluster's benchmark rows, and the strom_cluster fixture they run on here."""

from __future__ import annotations

from typing import Any

import pytest

from strom.tools.bench.cluster_bench import failover_workload, format_rows


@pytest.mark.strom_cluster(size=3)
def test_the_failover_test_of_the_benchmark_on_the_strom_cluster_fixture(strom_cluster: Any) -> None:
    assert strom_cluster.zookeeper is None and len(strom_cluster.brokers) == 3
    phases = failover_workload(strom_cluster)  # raises if a record was lost or duplicated
    assert set(phases) == {"create_s", "failover_produce_s", "rejoin_s", "read_back_s"}
    assert all(b.running for b in strom_cluster.brokers)  # the killed leader was brought back
    run = {"start_cold_s": 1.5, "start_warm_s": 0.1, "failover": {"total_s": 6.0, "start_s": 0.1, "close_s": 0.2}}
    run["failover"].update(phases)
    text = format_rows([run])
    assert text.startswith(
        "in-process 3-broker cluster start (in-memory ZooKeeper, no Java): cold 1.500 s, warm 0.100 s"
    )
    assert "failover test end to end" in text and "6.000 s" in text
