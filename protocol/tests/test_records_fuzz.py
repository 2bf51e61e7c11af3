"""Malformed input only ever raises RecordsError subclasses, never a codec's or struct's error."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.records.batch import Record, build_batch, iter_records, validate_batches, validate_keys
from strom.protocol.records.compression import Compression, decompress
from strom.protocol.records.crc import crc32c
from strom.protocol.records.errors import RecordsError
from strom.protocol.records.legacy import LegacyMessage, build_message_set, downconvert, iter_message_set, upconvert

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID_V2 = b"".join(
    build_batch([Record(i, i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(5)], compression=c, base_timestamp=0)
    for c in Compression
)
VALID_LEGACY = b"".join(
    build_message_set([LegacyMessage(i, i, b"k", b"v" * i) for i in range(4)], magic, codec)
    for magic in (0, 1)
    for codec in (0, 1, 2, 3)
)


def mutate(base: bytes):
    """Valid input with some bytes flipped, a cut, or both: reaches deeper than pure noise."""
    return st.tuples(
        st.lists(st.tuples(st.integers(0, len(base) - 1), st.integers(1, 255)), max_size=4),
        st.integers(0, len(base)),
    ).map(lambda t: _apply(base, *t))


def _apply(base: bytes, flips: list[tuple[int, int]], cut: int) -> bytes:
    buf = bytearray(base[:cut] if cut else base)
    for pos, mask in flips:
        if pos < len(buf):
            buf[pos] ^= mask
    return bytes(buf)


def only_records_errors(fn, data: bytes) -> None:
    try:
        result = fn(data)
        if hasattr(result, "__next__"):
            list(result)
    except RecordsError:
        pass


V2_READERS = [validate_batches, iter_records, validate_keys, lambda b: downconvert(b, 1), lambda b: downconvert(b, 0)]
LEGACY_READERS = [iter_message_set, lambda b: iter_message_set(b, strict=True), upconvert]


@SETTINGS
@given(st.binary(max_size=300) | mutate(VALID_V2))
def test_v2_readers_raise_only_records_errors(data: bytes) -> None:
    for reader in V2_READERS:
        only_records_errors(reader, data)


@SETTINGS
@given(st.binary(max_size=300) | mutate(VALID_LEGACY))
def test_legacy_readers_raise_only_records_errors(data: bytes) -> None:
    for reader in LEGACY_READERS:
        only_records_errors(reader, data)


@SETTINGS
@given(st.sampled_from(list(Compression)), st.binary(max_size=200))
def test_decompress_raises_only_records_errors(codec: int, data: bytes) -> None:
    only_records_errors(lambda d: decompress(codec, d, max_size=1 << 20), data)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=20) | st.none(),
            st.binary(max_size=50) | st.none(),
            st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5) | st.none()), max_size=3),
            st.integers(-(2**40), 2**40),
        ),
        min_size=1,
        max_size=10,
    ),
    st.sampled_from(list(Compression)),
)
def test_any_records_round_trip(items, codec: int) -> None:
    records = [Record(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(items)]
    batch = build_batch(records, compression=codec, base_timestamp=2**41, base_offset=10)
    validate_batches(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch)] == [
        (10 + i, 2**41 + ts, k, v, h) for i, (k, v, h, ts) in enumerate(items)
    ]


PLAIN_BATCH = build_batch([Record(i, i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(5)], base_timestamp=0)
GZIP_BATCH = build_batch([Record(i, i, b"k%d" % i, b"v" * i) for i in range(5)], compression=1, base_timestamp=0)


def _recrc(buf: bytes) -> bytes:
    """Give a mutated batch a correct length and CRC so decoding goes past the checks."""
    out = bytearray(buf)
    if len(out) >= 61:
        struct.pack_into(">i", out, 8, len(out) - 12)
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@SETTINGS
@given(mutate(PLAIN_BATCH).map(_recrc) | mutate(GZIP_BATCH).map(_recrc))
def test_record_decoding_with_valid_crc_raises_only_records_errors(data: bytes) -> None:
    for reader in V2_READERS:
        only_records_errors(reader, data)
