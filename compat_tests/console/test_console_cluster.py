"""The console of every broker in a 3-broker ZooKeeper cluster: a killed broker is shown down and
its partitions under-replicated, on each remaining broker's console and /metrics."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.console import CONSOLE_OVERRIDES, console_url, get_json, http, wait_for
from strom.tools.broker_process import BrokerProcess

SESSION_TIMEOUT_MS = 4000
TOPIC = "console-replicated"


def test_a_killed_broker_is_down_and_its_partitions_under_replicated_everywhere(zookeeper, tmp_path):
    brokers = []
    try:
        for node in range(3):
            brokers.append(
                BrokerProcess(
                    tmp_path / f"b{node}",
                    {
                        **CONSOLE_OVERRIDES,
                        "node.id": str(node),
                        "zookeeper.connect": zookeeper.connect_string + "/console",
                        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                        "replica.lag.time.max.ms": "5000",
                        "offsets.topic.replication.factor": "3",
                        "offsets.topic.num.partitions": "3",
                        "default.replication.factor": "3",
                    },
                ).start()
            )
        consoles = [console_url(b) for b in brokers]
        admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers)})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        for base in consoles:
            wait_for(
                lambda: (
                    # wait_for calls it in this iteration only
                    (o := get_json(base, "/api/overview"))["brokers_up"] == 3  # noqa: B023
                    and o["under_replicated_partitions"] == 0
                    and o["partitions"] == 3
                    and o["offline_partitions"] == 0
                ),
                30,
                what=f"a healthy cluster on {base}",
            )
            assert get_json(base, "/api/overview")["mode"] == "zookeeper"
        shown = get_json(consoles[0], "/api/brokers")
        assert [b["id"] for b in shown] == [0, 1, 2] and all(b["up"] and b["uptime_s"] >= 0 for b in shown)
        assert shown[1]["listeners"] == [f"PLAINTEXT://127.0.0.1:{brokers[1].port}"]
        led = sum(get_json(base, "/api/overview")["partitions_led"] for base in consoles)
        assert led == 3  # each partition led by exactly one broker
        assert sum(int(get_json(base, "/api/overview")["controller"] == i) for i, base in enumerate(consoles)) == 1

        brokers[2].kill()
        for base in consoles[:2]:
            # Until the controller has elected new leaders for broker 2's partitions and this broker
            # has heard of it, those partitions are offline: that is true, and transient, so it is
            # waited out rather than asserted at the first moment broker 2 shows down.
            overview = wait_for(
                lambda: (
                    # wait_for calls it in this iteration only
                    (o := get_json(base, "/api/overview"))["brokers_down"] == 1  # noqa: B023
                    and o["under_replicated_partitions"] == 3
                    and o["offline_partitions"] == 0
                    and o
                ),
                3 * SESSION_TIMEOUT_MS / 1000 + 15,
                what=f"broker 2 shown down and its partitions led elsewhere on {base}",
            )
            down = [b for b in overview["brokers"] if not b["up"]]
            assert [b["id"] for b in down] == [2] and overview["offline_partitions"] == 0
            topic = get_json(base, f"/api/topics/{TOPIC}")
            assert all(p["under_replicated"] and 2 in p["replicas"] for p in topic["partition_details"])
            status, page, _ = http(base + "/")
            assert status == 200 and b'data-broker="2" class="down"' in page

        # the dead replica leaves the ISRs; each console shows the ISRs the admin API sees
        def isrs_agree():
            metadata = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
            if any(2 in p.isrs for p in metadata.values()):
                return False
            for base in consoles[:2]:
                shown = {
                    p["partition"]: sorted(p["isr"])
                    for p in get_json(base, f"/api/topics/{TOPIC}")["partition_details"]
                }
                if shown != {i: sorted(p.isrs) for i, p in metadata.items()}:
                    return False
            return True

        wait_for(isrs_agree, 30, what="ISRs without broker 2, the same on the consoles and in metadata")
    finally:
        for b in brokers:
            b.stop()
