"""`strom bench` and its measurements: ``benchmark`` (the command, the report and the table) runs
the others (``client``: producer/consumer workloads with confluent-kafka; ``sessions``, ``tls``,
``txn``: Strom beside the reference Kafka; ``console``, ``files``, ``inflight``, ``machine``,
``compaction``; ``testbroker``: `strom bench-testbroker`, the embedded test broker's start-up).

Not needed to run a broker: the `strom` command imports this package only when a bench command
is asked for. The client-side workloads need the ``tools`` extra (``pip install 'strom[tools]'``).
"""
