"""Helpers for tests with confluent-kafka's ShareConsumer."""

from __future__ import annotations

import time
from typing import Any


def poll_messages(consumer: Any, count: int, timeout_s: float = 30.0) -> list[Any]:
    """Messages polled until there are ``count`` or ``timeout_s`` passed (an error fails the test)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(got) < count:
        for message in consumer.poll(0.5):
            assert message.error() is None, message.error()
            got.append(message)
    return got
