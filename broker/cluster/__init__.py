"""Cluster mode over ZooKeeper, in Kafka's ZooKeeper-era layout.

* ``zkdata``: znode paths and their JSON (pure).
* ``placement``: replica assignment for new partitions, rack-aware when brokers have racks (pure).
* ``election``: partition leader election and ISR changes (pure).
* ``zkclient``: ``KafkaZkClient``, kazoo driven from trio (blocking calls in worker threads,
  watches and session events delivered into trio through a ``TrioToken``).
"""
