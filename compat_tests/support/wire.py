"""Raw requests to a broker for the tests that look below what a client library shows: Strom's own
client-role protocol connection (``strom.tools.common.KafkaSocket``) on one blocking socket, so the
same request goes to Strom and to the reference Kafka and the answers are compared field by field.

    with Raw(port) as raw:
        answer = raw.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    request(port, ApiKey.LIST_GROUPS, 5, {...})              # the same on a connection of its own
"""

from __future__ import annotations

import socket

from strom.protocol.schema import ApiKey
from strom.tools.common import KafkaSocket

TIMEOUT_S = 30


class Raw(KafkaSocket):
    """One blocking connection to 127.0.0.1:``port``; each request waits for its answer."""

    def __init__(self, port: int, client_id: str = "strom-test"):
        super().__init__(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S), client_id)

    def request(self, api_key: int, version: int, body: dict):
        """The decoded answer (AssertionError when the broker closes the connection instead)."""
        try:
            return super().request(api_key, version, body)
        except ValueError as exc:
            raise AssertionError(f"no answer: {exc}") from None

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def request(port: int, api_key: int, version: int, body: dict):
    """One request on a connection of its own."""
    with Raw(port) as raw:
        return raw.request(api_key, version, body)


def fetch_partition(raw: Raw, topic: str, offset: int = 0, isolation: int = 1, max_bytes: int = 1 << 20):
    """Fetch v11 of ``topic``-0 from ``offset`` (isolation 1: read_committed) without waiting: the
    partition's part of the answer (records, high watermark, last stable offset, aborted
    transactions)."""
    r = raw.request(
        ApiKey.FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": isolation,
            "session_id": 0,
            "session_epoch": -1,
            "rack_id": "",
            "forgotten_topics_data": [],
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
        },
    )
    return r.responses[0].partitions[0]
