"""kcat driver (librdkafka's command-line client).

kcat reads ``key<TAB>value`` lines with ``-K``; it sets the same ``-H`` headers on every
message and cannot set a message timestamp, so its expected records carry one constant
header and broker-checked create times instead (see ``shape``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Mapping

from compat_tests.support.clients.base import Driver, missing_executable, no_codec_skip
from compat_tests.support.workload import Record, by_partition

KEY_DELIMITER = "\t"
PRODUCE_TIMEOUT_S = 300.0
FAST_PRODUCER = ["-X", "linger.ms=20", "-X", "batch.num.messages=10000", "-X", "queue.buffering.max.messages=500000"]


def shape(records: list[Record], codec: str) -> list[Record]:
    """What kcat can express: constant headers, no producer timestamps."""
    return [dataclasses.replace(r, headers=(("codec", codec.encode()),), timestamp_ms=None) for r in records]


def produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    compression = [] if codec == "none" else ["-z", codec]
    for partition, rs in by_partition(records).items():
        if not rs:
            continue
        for r in rs:
            if b"\n" in r.key + r.value or KEY_DELIMITER.encode() in r.key:
                raise ValueError(f"kcat cannot send record {r!r} with -K/-D delimiters")
        payload = b"".join(r.key + KEY_DELIMITER.encode() + r.value + b"\n" for r in rs)
        headers = [arg for name, value in rs[0].headers for arg in ("-H", f"{name}={value.decode()}")]
        cmd = [
            "kcat",
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(partition),
            "-K",
            KEY_DELIMITER,
            *compression,
            *headers,
            *FAST_PRODUCER,
            "-X",
            "acks=all",
        ]
        proc = subprocess.run(cmd, input=payload, capture_output=True, timeout=PRODUCE_TIMEOUT_S)
        assert proc.returncode == 0, (
            f"kcat produce to partition {partition} exited {proc.returncode}: "
            f"{proc.stderr.decode(errors='replace')[-3000:]}"
        )


def to_record(doc: dict) -> Record:
    raw_headers = doc.get("headers") or []
    headers = tuple((raw_headers[i], raw_headers[i + 1].encode()) for i in range(0, len(raw_headers), 2))
    key, value = doc.get("key"), doc.get("payload")
    return Record(
        partition=doc["partition"],
        key=None if key is None else key.encode(),
        value=None if value is None else value.encode(),
        headers=headers,
        timestamp_ms=doc.get("ts"),
        offset=doc["offset"],
    )


def consume(bootstrap: str, topic: str, counts: Mapping[int, int], timeout: float) -> dict[int, list[Record]]:
    got: dict[int, list[Record]] = {p: [] for p in counts}
    for partition, count in counts.items():
        cmd = [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(partition),
            "-o",
            "beginning",
            "-c",
            str(count),
            "-e",
            "-J",
        ]
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
        assert proc.returncode == 0, (
            f"kcat consume partition {partition} exited {proc.returncode}: "
            f"{proc.stderr.decode(errors='replace')[-3000:]}"
        )
        got[partition] = [to_record(json.loads(line)) for line in proc.stdout.splitlines() if line.strip()]
    return got


DRIVER = Driver("kcat", produce, consume, lambda: missing_executable("kcat"), no_codec_skip, shape)
