"""The group coordinator (Kafka 3.7+'s split), on the coordinator runtime port.

* `coordinator` — `GroupCoordinator`, the service the API handlers call: partitions of
  `__consumer_offsets` and their leadership, loading, timers, and the requests;
* `store` — `GroupStore`, the state its parts share, and their writes through the runtime;
* `config` — `GroupCoordinatorConfig`, the broker configs it reads;
* `group_metadata_manager` — which protocol serves a request, conversions, deletion, group records;
* `offset_metadata_manager` — committed and transactional offsets, expiry, offset records;
* `classic_groups` and `state` — the classic protocol: requests and timers over the pure state
  machine (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead; static membership);
* `consumer_groups` and `consumer` — KIP-848 consumer groups, with `assignors` (uniform, range)
  and `migration` (classic <-> consumer conversions);
* `records` — the `__consumer_offsets` key/value formats Kafka writes, and the group's partition.
"""
