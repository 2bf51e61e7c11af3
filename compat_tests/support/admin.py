"""Topic administration through confluent-kafka's AdminClient, used to set tests up."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping

from confluent_kafka.admin import AdminClient, NewTopic

ADMIN_TIMEOUT_S = 30.0
_counter = itertools.count()


def unique_topic(prefix: str) -> str:
    """A topic name no other test in this run uses."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}"


def admin_client(bootstrap: str) -> AdminClient:
    # librdkafka's admin handle is a producer, whose Metadata requests ask the broker to
    # auto-create the topics they name; looking a topic up must not create it.
    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})


def create_topic(bootstrap: str, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    """Create a topic with replication factor 1 and wait for the broker's answer."""
    admin = admin_client(bootstrap)  # must outlive its futures
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
        request_timeout=ADMIN_TIMEOUT_S,
        operation_timeout=ADMIN_TIMEOUT_S,
    )
    futures[name].result(ADMIN_TIMEOUT_S)


def partition_count(bootstrap: str, name: str) -> int | None:
    """Partitions of ``name`` as the broker's Metadata reports them, None if absent."""
    metadata = admin_client(bootstrap).list_topics(name, timeout=ADMIN_TIMEOUT_S)
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        return None
    return len(topic.partitions)
