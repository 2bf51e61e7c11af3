"""The server side of one Kafka connection, sans-IO (in the style of h11).

Feed received bytes with ``receive_data`` (``b""`` = EOF), pull events with ``next_event``, and
turn responses into bytes with ``send_response`` / ``send_error``. No sockets, no clocks.

Events: ``Request`` (a decoded request), ``BadRequest`` (header unreadable, unknown API, unsupported
version or malformed body), ``FrameTooLarge`` (terminal), ``ConnectionClosed`` (EOF reached and
every whole frame handed out), or ``NEED_DATA``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from construct import Container

from strom.protocol.codec import RequestHeader, decode_request, decode_request_header, encode_response
from strom.protocol.errors import EncodeError, ErrorCode, ProtocolError, UnsupportedVersion
from strom.protocol.framing import FrameBuffer, FrameTooLarge
from strom.protocol.schema import ApiKey, is_supported_version

__all__ = ["NEED_DATA", "Request", "BadRequest", "FrameTooLarge", "ConnectionClosed", "RawFrame",
           "ServerConnection"]


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


Event = Request | BadRequest | FrameTooLarge | ConnectionClosed | RawFrame | _NeedData


class ServerConnection:
    """Turns a byte stream from a client into request events and responses into bytes."""

    def __init__(self, max_request_size: int = 100 * 1024 * 1024) -> None:
        self._frames = FrameBuffer(max_request_size)
        self._eof = False
        # Set while the peer sends bare SASL tokens (SaslHandshake v0): frames come out as RawFrame.
        self.raw_frames = False

    def set_max_request_size(self, size: int) -> None:
        """Change the largest frame accepted (smaller before SASL authentication, as Kafka's
        ``sasl.server.max.receive.size``)."""
        self._frames.max_frame_size = size

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
        return self._decode(frame)

    @staticmethod
    def _decode(frame: bytes) -> Request | BadRequest:
        try:
            header, offset = decode_request_header(frame)
        except ProtocolError as exc:
            return BadRequest(exc.header, exc, str(exc))
        try:
            body = decode_request(header.api_key, header.api_version, frame, offset)
        except ProtocolError as exc:
            return BadRequest(header, exc.with_header(header), str(exc))
        return Request(header, body, len(frame))

    def send_response(self, request: Request, body: dict[str, Any]) -> list[bytes | object]:
        """The response frame (size prefix included) for ``request``; see ``encode_response``."""
        h = request.header
        return encode_response(h.api_key, h.api_version, h.correlation_id, body)

    @staticmethod
    def send_raw(data: bytes) -> list[bytes]:
        """A bare, size-prefixed frame (a SASL token answering a v0 client)."""
        return [len(data).to_bytes(4, "big") + data]

    def send_error(self, bad: BadRequest, body: dict[str, Any]) -> list[bytes | object]:
        """Answer a ``BadRequest`` whose header was readable.

        An ApiVersions request of an unsupported version is answered as ApiVersions v0 with
        UNSUPPORTED_VERSION (unless ``body`` sets another error code), as Kafka does. Other bad
        requests are answered in their own version, which must be a supported one.
        """
        h = bad.header
        if h is None:
            raise EncodeError("cannot answer a request whose header was unreadable; close instead")
        if h.api_key == ApiKey.API_VERSIONS and isinstance(bad.error, UnsupportedVersion):
            body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, **body}
            return encode_response(h.api_key, 0, h.correlation_id, body)
        if not is_supported_version(h.api_key, h.api_version):
            raise EncodeError(f"no response layout for api {h.api_key} v{h.api_version}; close instead")
        return encode_response(h.api_key, h.api_version, h.correlation_id, body)

