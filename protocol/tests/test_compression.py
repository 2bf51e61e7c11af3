"""Codecs: round trips, interoperability with the clients' codec libraries, bombs, garbage."""

from __future__ import annotations

import gzip
import os
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from strom.protocol.records.compression import Compression, compress, decompress, xxh32
from strom.protocol.records.errors import CorruptRecords, DecompressedTooLarge, RecordsError, UnsupportedCompression

PAYLOADS = [b"", b"k", b"hello kafka " * 1000, os.urandom(200_000), bytes(300_000)]
CODECS = list(Compression)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", PAYLOADS, ids=lambda d: f"{len(d)}B")
def test_round_trip(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


# Both directions against the libraries kafka-python and librdkafka users rely on.
FOREIGN_DECODERS = {
    Compression.GZIP: gzip.decompress,
    Compression.SNAPPY: kafka_codec.snappy_decode,
    Compression.LZ4: lz4.frame.decompress,
    Compression.ZSTD: kafka_codec.zstd_decode,
}
FOREIGN_ENCODERS = {
    "gzip": (Compression.GZIP, kafka_codec.gzip_encode),
    "snappy-xerial": (Compression.SNAPPY, kafka_codec.snappy_encode),
    "snappy-raw": (Compression.SNAPPY, lambda d: kafka_codec.snappy_encode(d, xerial_compatible=False)),
    "lz4-kafka-python": (Compression.LZ4, kafka_codec.lz4_encode),
    "lz4-linked-4mb-checksums": (
        Compression.LZ4,
        lambda d: lz4.frame.compress(
            d, block_linked=True, content_checksum=True, block_checksum=True, block_size=lz4.frame.BLOCKSIZE_MAX4MB
        ),
    ),
    "zstd-with-size": (Compression.ZSTD, kafka_codec.zstd_encode),
    "zstd-without-size": (Compression.ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress),
}


@pytest.mark.parametrize("codec", list(FOREIGN_DECODERS))
@pytest.mark.parametrize("data", PAYLOADS[1:], ids=lambda d: f"{len(d)}B")
def test_clients_decode_ours(codec: Compression, data: bytes) -> None:
    assert FOREIGN_DECODERS[codec](compress(codec, data)) == data


@pytest.mark.parametrize("name", list(FOREIGN_ENCODERS))
@pytest.mark.parametrize("data", PAYLOADS[1:], ids=lambda d: f"{len(d)}B")
def test_we_decode_clients(name: str, data: bytes) -> None:
    codec, encode = FOREIGN_ENCODERS[name]
    assert decompress(codec, encode(data)) == data


def test_snappy_uses_xerial_framing_like_the_java_client() -> None:
    payload = compress(Compression.SNAPPY, b"x" * 100_000)
    assert payload[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", payload[8:16]) == (1, 1)
    first_block = struct.unpack(">i", payload[16:20])[0]
    assert snappy.uncompress(payload[20 : 20 + first_block]) == b"x" * 32 * 1024


def test_lz4_frame_has_independent_blocks_and_valid_header_checksum() -> None:
    payload = compress(Compression.LZ4, b"abc" * 50_000)
    flg, bd, hc = payload[4], payload[5], payload[6]
    assert flg & 0x20, "Kafka's Java client cannot read linked blocks"
    assert bd == 0x40
    assert hc == (xxh32(payload[4:6]) >> 8) & 0xFF


def test_xxh32_known_vectors() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_xxh32_agrees_with_liblz4_header_checksum() -> None:
    frame = lz4.frame.compress(b"data", store_size=True)  # 8-byte content size: 10-byte descriptor
    assert frame[14] == (xxh32(frame[4:14]) >> 8) & 0xFF


def test_magic0_lz4_writes_the_pre_010_checksum_and_is_decoded_leniently() -> None:
    data = b"old kafka" * 100
    old = compress(Compression.LZ4, data, magic=0)
    assert old[6] == (xxh32(old[0:6]) >> 8) & 0xFF  # computed over the magic number too
    assert old[6] != (xxh32(old[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):  # liblz4 refuses the broken checksum
        lz4.frame.decompress(old)
    assert decompress(Compression.LZ4, old) == data


def test_lenient_lz4_accepts_broken_checksum_from_foreign_frame() -> None:
    data = os.urandom(1000) * 5
    frame = bytearray(lz4.frame.compress(data, block_linked=False, store_size=False))
    frame[6] = (xxh32(bytes(frame[0:6])) >> 8) & 0xFF
    assert decompress(Compression.LZ4, bytes(frame)) == data


BOMB = bytes(20_000_000)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_bomb_is_refused(codec: int) -> None:
    payload = compress(codec, BOMB)
    assert len(payload) < 1_000_000
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, payload, max_size=1_000_000)
    assert len(decompress(codec, payload, max_size=len(BOMB))) == len(BOMB)


def test_raw_snappy_bomb_is_refused_from_its_length_prefix() -> None:
    with pytest.raises(DecompressedTooLarge):
        decompress(Compression.SNAPPY, snappy.compress(BOMB), max_size=1000)


def test_zstd_bomb_without_content_size_is_refused() -> None:
    payload = zstandard.ZstdCompressor(write_content_size=False).compress(BOMB)
    with pytest.raises(DecompressedTooLarge):
        decompress(Compression.ZSTD, payload, max_size=1_000_000)


def test_uncompressed_respects_the_limit_too() -> None:
    with pytest.raises(DecompressedTooLarge):
        decompress(Compression.NONE, b"12345", max_size=4)


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("garbage", [b"", b"\x00", b"garbage!" * 10, b"\x1f\x8b\x08" + bytes(20)])
def test_garbage_raises_corrupt_records(codec: int, garbage: bytes) -> None:
    try:
        out = decompress(codec, garbage)
    except CorruptRecords:
        return
    # A few inputs are valid in some framing (b"\x00" is empty raw snappy).
    assert out == b""


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_payload_raises_corrupt_records(codec: int) -> None:
    payload = compress(codec, os.urandom(100_000))
    with pytest.raises(CorruptRecords):
        decompress(codec, payload[: len(payload) // 2])


def test_unknown_codec() -> None:
    with pytest.raises(CorruptRecords):
        decompress(5, b"x")
    with pytest.raises(UnsupportedCompression):
        compress(6, b"x")


def test_errors_share_one_base() -> None:
    assert issubclass(CorruptRecords, RecordsError)
    assert issubclass(DecompressedTooLarge, RecordsError)
