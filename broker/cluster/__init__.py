"""Cluster mode over ZooKeeper, in Kafka's ZooKeeper-era layout.

* ``zkdata``: znode paths and their JSON (pure).
* ``placement``: replica assignment for new partitions, rack-aware when brokers have racks (pure).
* ``election``: partition leader election and ISR changes (pure).
* ``zkclient``: ``KafkaZkClient``, over the ``ZkSession`` port of ``strom.broker.zk.session``
  (kazoo and a real ZooKeeper, or strom.testing's in-memory ZooKeeper).
"""
