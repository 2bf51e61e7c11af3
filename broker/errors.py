"""Errors the broker answers with a Kafka error code and message."""
from __future__ import annotations

from strom.protocol.errors import ErrorCode


class TopicError(Exception):
    """A topic operation refused with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class DropConnection(Exception):
    """Close the client's connection without answering (fault injection, broker/faults.py)."""
