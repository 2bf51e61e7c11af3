"""Cluster mode over ZooKeeper, in Kafka's ZooKeeper-era layout.

* ``zkdata``: znode paths and their JSON (pure).
* ``placement``: rack-unaware replica assignment for new partitions (pure).
* ``election``: partition leader election and ISR changes (pure).
* ``zkclient``: ``KafkaZkClient``, kazoo driven from trio (blocking calls in worker threads,
  watches and session events delivered into trio through a ``TrioToken``).
"""
