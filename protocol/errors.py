"""Kafka error codes and the protocol layer's exceptions.

``ErrorCode`` is built from the error list in ``schema_data.json`` (generated from Kafka's
Errors.java table): ``ErrorCode.NONE == 0``, ``ErrorCode.UNKNOWN_SERVER_ERROR == -1``, ...
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from strom.protocol.schema import schema_document

if TYPE_CHECKING:
    from strom.protocol.codec import RequestHeader

ErrorCode = enum.IntEnum(  # type: ignore[misc]
    "ErrorCode", [(e["name"], e["code"]) for e in schema_document()["error_codes"]]
)
ErrorCode.__doc__ = "Every Kafka error code by its Kafka name."


class ProtocolError(Exception):
    """Base of every error the protocol layer raises for bad input.

    ``header`` is the request header when it could be read (so the broker can answer), else None.
    """

    error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, header: "RequestHeader | None" = None) -> None:
        super().__init__(message)
        self.header = header

    def with_header(self, header: "RequestHeader") -> "ProtocolError":
        self.header = header
        return self


class MalformedRequest(ProtocolError):
    """The bytes do not form a valid message (truncated, bad lengths, bad UTF-8, ...)."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class UnknownApiKey(ProtocolError):
    """The request names an API key Kafka does not define."""

    error_code = ErrorCode.UNSUPPORTED_VERSION


class UnsupportedVersion(ProtocolError):
    """The API exists but not in the requested version."""

    error_code = ErrorCode.UNSUPPORTED_VERSION


class EncodeError(ValueError):
    """A value given to an encoder does not fit the schema (a programming error, not bad input)."""

    def __init__(self, message: str, *args: Any) -> None:
        super().__init__(message, *args)


class UnknownFieldError(EncodeError):
    """A dict given to the encoder has a key that is no field of its struct in any version of the
    message: a misspelt name, which would otherwise be dropped and the field silently defaulted.

    ``where`` names the message and version ("ProduceResponse v9"), ``path`` the struct inside it
    ("responses[].partition_responses[]", "" for the top level), ``keys`` the unknown keys.
    """

    def __init__(self, where: str, path: str, keys: list[str], known: list[str]) -> None:
        at = f" in {path}" if path else " at the top level"
        super().__init__(f"{where or 'message'}: unknown field {', '.join(map(repr, keys))}{at} "
                         f"(fields of any version: {', '.join(known)})")
        self.where = where
        self.path = path
        self.keys = keys
