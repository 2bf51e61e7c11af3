"""Errors the broker answers with a Kafka error code and message."""

from __future__ import annotations

from strom.protocol.errors import ErrorCode


class TopicError(Exception):
    """A topic operation refused with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str | None):  # None: Kafka answers without a message
        super().__init__(message)
        self.code = code
        self.message = message


class DropConnection(Exception):
    """Close the client's connection without answering (a request interceptor: strom.testing.faults)."""


class AnswerInVersion(Exception):
    """Answer the request with ``body`` encoded in ``version`` instead of the request's own: an
    ApiVersions request above a version cap (strom.testing.faults) gets v0 with UNSUPPORTED_VERSION,
    as Kafka answers an ApiVersions version it does not know."""

    def __init__(self, version: int, body: dict):
        super().__init__(f"answer in v{version}")
        self.version = version
        self.body = body
