"""Size-prefixed frame splitting, sans-IO.

Layout of the byte stream: frames back to back, each ``int32 size`` (big-endian, signed) followed by
``size`` bytes. Bytes are kept in one ``bytearray`` with a read offset; consumed bytes are dropped
only occasionally, so many small chunks or one large frame arriving in 64 KiB reads cost linear
time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_SIZE = struct.Struct(">i")
_COMPACT_AT = 64 * 1024


@dataclass(frozen=True)
class FrameTooLarge:
    """A frame's size prefix exceeds the limit (or is negative); the stream cannot continue."""

    size: int
    limit: int


class FrameBuffer:
    """Accumulates received bytes and hands out whole frames (without their size prefix)."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self.too_large: FrameTooLarge | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed out."""
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | FrameTooLarge | None:
        """The next whole frame's payload, a ``FrameTooLarge`` verdict, or None (need data)."""
        if self.too_large is not None:
            return self.too_large
        if self.buffered < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        if size < 0 or size > self.max_frame_size:
            self.too_large = FrameTooLarge(size, self.max_frame_size)
            return self.too_large
        start = self._pos + 4
        if len(self._buf) - start < size:
            return None
        with memoryview(self._buf) as view:
            frame = bytes(view[start : start + size])
        self._pos = start + size
        self._compact()
        return frame

    def _compact(self) -> None:
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos >= _COMPACT_AT and self._pos * 2 >= len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
