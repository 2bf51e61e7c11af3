"""Consumer groups: the classic group protocol and committed offsets.

* `state` — the pure group state machine (Empty, PreparingRebalance, CompletingRebalance, Stable,
  Dead), members, generations, static membership, timers as deadlines;
* `records` — the `__consumer_offsets` key/value formats Kafka writes, and the group's partition;
* `coordinator` — groups in memory, persisted to and loaded from `__consumer_offsets`, with the
  trio task that runs session and rebalance timers and offset expiry.
"""
