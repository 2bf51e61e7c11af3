"""Partitions hosted here: appends, fetches, the waiting produce and fetch requests, replication."""
