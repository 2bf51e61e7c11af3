"""One Kafka connection, sans-IO, for either role (in the style of h11): no sockets, no clocks.

``Connection(SERVER)`` is a broker's side: feed received bytes with ``receive_data`` (``b""`` =
EOF), pull ``Request`` events with ``next_event`` and turn answers into bytes with
``send_response`` / ``send_error``. ``Connection(CLIENT)`` is a client's side (inter-broker
calls, tools, tests): ``send_request`` turns a request into bytes and remembers it by correlation
id; fed the broker's bytes, ``next_event`` hands out ``Response`` events, each decoded in the API
and version of the request it answers.

Events: ``Request`` / ``Response`` (decoded), ``BadRequest`` / ``BadResponse`` (a frame that cannot
be decoded, or a response no request is waiting for), ``RawFrame`` (while ``raw_frames`` is set:
bare SASL tokens after a SaslHandshake v0), ``FrameTooLarge`` (terminal), ``ConnectionClosed``
(EOF reached and every whole frame handed out), or ``NEED_DATA``.

The ApiVersions quirk, on both sides: its response header is always v0, and a broker answers an
ApiVersions version it does not support in v0 with UNSUPPORTED_VERSION (``send_error``); a client
decodes an UNSUPPORTED_VERSION answer to any ApiVersions version as v0 (Kafka's
ApiVersionsResponse.parse), then picks a version from the ranges it lists.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from construct import Container

from strom.protocol.codec import (
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from strom.protocol.errors import EncodeError, ErrorCode, ProtocolError, UnsupportedVersion
from strom.protocol.framing import FrameBuffer, FrameTooLarge
from strom.protocol.schema import ApiKey, is_supported_version

__all__ = [
    "NEED_DATA",
    "Role",
    "CLIENT",
    "SERVER",
    "Request",
    "Response",
    "BadRequest",
    "BadResponse",
    "FrameTooLarge",
    "ConnectionClosed",
    "RawFrame",
    "Connection",
    "LocalProtocolError",
]

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
_CORRELATION_AND_ERROR = struct.Struct(">ih")


class Role(enum.Enum):
    """Which end of the connection this object is."""

    CLIENT = "client"
    SERVER = "server"


CLIENT: Final = Role.CLIENT
SERVER: Final = Role.SERVER


class LocalProtocolError(RuntimeError):
    """This side used the connection wrongly (a client sending a response, a server a request)."""


class _NeedData:
    """Sentinel type: no whole frame is buffered yet."""

    _instance: _NeedData | None = None

    def __new__(cls) -> _NeedData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


@dataclass(frozen=True)
class Request:
    """A decoded request; ``size`` is the frame's byte count (without the size prefix)."""

    header: RequestHeader
    body: Container
    size: int


@dataclass(frozen=True)
class BadRequest:
    """A frame that could not be decoded; ``header`` is None when even the header was unreadable."""

    header: RequestHeader | None
    error: ProtocolError
    reason: str


@dataclass(frozen=True)
class ConnectionClosed:
    """The peer closed its side; ``leftover`` bytes of an incomplete frame were discarded."""

    leftover: int = 0


@dataclass(frozen=True)
class RawFrame:
    """A frame handed out undecoded while ``raw_frames`` is set (SASL tokens after a v0 handshake)."""

    data: bytes


@dataclass(frozen=True)
class Response:
    """A decoded response, matched to its request by correlation id. ``api_version`` is the version
    the body was decoded in: the request's, or 0 for an UNSUPPORTED_VERSION ApiVersions answer.
    ``size`` is the frame's byte count (without the size prefix)."""

    api_key: int
    api_version: int
    correlation_id: int
    body: Container
    size: int


@dataclass(frozen=True)
class BadResponse:
    """A response frame that cannot be decoded, or whose correlation id no request waits for
    (``api_key`` None then). The connection cannot be trusted any further."""

    correlation_id: int | None
    api_key: int | None
    error: ProtocolError
    reason: str


Event: TypeAlias = (
    Request | Response | BadRequest | BadResponse | FrameTooLarge | ConnectionClosed | RawFrame | _NeedData
)


class Connection:
    """Turns the byte stream from the peer into events, and this side's messages into bytes.

    ``our_role`` is ``SERVER`` (requests in, responses out) or ``CLIENT`` (requests out, responses
    in). ``max_frame_size`` is the largest frame accepted from the peer (a broker's
    ``socket.request.max.bytes``; a client's largest expected response).
    """

    def __init__(
        self,
        our_role: Role,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        client_id: str | None = None,
        first_correlation_id: int = 0,
    ) -> None:
        self.our_role = our_role
        self._frames = FrameBuffer(max_frame_size)
        self._eof = False
        # Set while the peer sends bare SASL tokens (SaslHandshake v0): frames come out as RawFrame.
        self.raw_frames = False
        # client role: the client id sent in request headers, the next correlation id, and the
        # requests waiting for their responses (correlation id -> (api key, version))
        self.client_id = client_id
        self._next_correlation_id = first_correlation_id
        self._in_flight: dict[int, tuple[int, int]] = {}

    def set_max_frame_size(self, size: int) -> None:
        """Change the largest frame accepted (a broker's is smaller before SASL authentication,
        as Kafka's ``sasl.server.max.receive.size``)."""
        self._frames.max_frame_size = size

    # ------------------------------------------------------------------ input, both roles
    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes; ``b""`` means the peer closed the connection."""
        if not data:
            self._eof = True
        elif not self._eof:
            self._frames.feed(data)

    def next_event(self) -> Event:
        frame = self._frames.next_frame()
        if isinstance(frame, FrameTooLarge):
            return frame
        if frame is None:
            return ConnectionClosed(self._frames.buffered) if self._eof else NEED_DATA
        if self.raw_frames:
            return RawFrame(bytes(frame))
        if self.our_role is SERVER:
            return self._decode_request(frame)
        return self._decode_response(frame)

    @staticmethod
    def send_raw(data: bytes | bytearray | memoryview) -> list[bytes]:
        """A bare, size-prefixed frame (a SASL token after a SaslHandshake v0, either way)."""
        return [len(data).to_bytes(4, "big") + bytes(data)]

    # ------------------------------------------------------------------ server role
    @staticmethod
    def _decode_request(frame: bytes) -> Request | BadRequest:
        try:
            header, offset = decode_request_header(frame)
        except ProtocolError as exc:
            return BadRequest(exc.header, exc, str(exc))
        try:
            body = decode_request(header.api_key, header.api_version, frame, offset)
        except ProtocolError as exc:
            return BadRequest(header, exc.with_header(header), str(exc))
        return Request(header, body, len(frame))

    def _require(self, role: Role, what: str) -> None:
        if self.our_role is not role:
            raise LocalProtocolError(f"a {self.our_role.value} connection cannot {what}")

    def send_response(self, request: Request, body: dict[str, Any]) -> list[bytes | object]:
        """The response frame (size prefix included) for ``request``; see ``encode_response``."""
        self._require(SERVER, "send a response")
        h = request.header
        return encode_response(h.api_key, h.api_version, h.correlation_id, body)

    def send_error(self, bad: BadRequest, body: dict[str, Any]) -> list[bytes | object]:
        """Answer a ``BadRequest`` whose header was readable.

        An ApiVersions request of an unsupported version is answered as ApiVersions v0 with
        UNSUPPORTED_VERSION (unless ``body`` sets another error code), as Kafka does. Other bad
        requests are answered in their own version, which must be a supported one.
        """
        self._require(SERVER, "send a response")
        h = bad.header
        if h is None:
            raise EncodeError("cannot answer a request whose header was unreadable; close instead")
        if h.api_key == ApiKey.API_VERSIONS and isinstance(bad.error, UnsupportedVersion):
            body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, **body}
            return encode_response(h.api_key, 0, h.correlation_id, body)
        if not is_supported_version(h.api_key, h.api_version):
            raise EncodeError(f"no response layout for api {h.api_key} v{h.api_version}; close instead")
        return encode_response(h.api_key, h.api_version, h.correlation_id, body)

    # ------------------------------------------------------------------ client role
    def send_request(
        self,
        api_key: int,
        api_version: int,
        body: dict[str, Any],
        *,
        correlation_id: int | None = None,
        expect_response: bool | None = None,
    ) -> bytes:
        """The request frame (size prefix included), remembered so that its response is decoded
        in this API and version. The correlation id is the connection's next one unless given.
        ``expect_response`` defaults to True except for a Produce with acks=0, which the broker
        does not answer."""
        self._require(CLIENT, "send a request")
        if correlation_id is None:
            correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        if correlation_id in self._in_flight:
            raise LocalProtocolError(f"correlation id {correlation_id} is already waiting for its response")
        frame = encode_request(api_key, api_version, correlation_id, self.client_id, body)
        if expect_response is None:
            expect_response = not (api_key == ApiKey.PRODUCE and body.get("acks") == 0)
        if expect_response:
            self._in_flight[correlation_id] = (int(api_key), api_version)
        return frame

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not been handed out yet."""
        return len(self._in_flight)

    @property
    def last_correlation_id(self) -> int:
        """The correlation id of the last request sent."""
        return (self._next_correlation_id - 1) & 0x7FFFFFFF

    def _decode_response(self, frame: bytes) -> Response | BadResponse:
        if len(frame) < 4:
            return BadResponse(
                None,
                None,
                ProtocolError("response header truncated"),
                f"a {len(frame)}-byte response frame has no correlation id",
            )
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        waiting = self._in_flight.pop(correlation_id, None)
        if waiting is None:
            reason = f"response with correlation id {correlation_id} answers no request in flight"
            return BadResponse(correlation_id, None, ProtocolError(reason), reason)
        api_key, version = waiting
        if (
            api_key == ApiKey.API_VERSIONS
            and version > 0
            and len(frame) >= _CORRELATION_AND_ERROR.size
            and _CORRELATION_AND_ERROR.unpack_from(frame)[1] == ErrorCode.UNSUPPORTED_VERSION
        ):
            version = 0  # the broker answered a version it does not know in v0
        try:
            _, body = decode_response(api_key, version, frame)
        except ProtocolError as exc:
            return BadResponse(correlation_id, api_key, exc, str(exc))
        return Response(api_key, version, correlation_id, body, len(frame))
