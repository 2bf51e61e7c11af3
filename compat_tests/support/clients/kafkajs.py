"""kafkajs driver: runs compat_tests/kafkajs/client.js with node, JSON lines over pipes."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from compat_tests.support.clients.base import Driver, no_codec_skip
from compat_tests.support.paths import KAFKAJS_DIR
from compat_tests.support.workload import Record

SCRIPT_DIR = KAFKAJS_DIR
SCRIPT = SCRIPT_DIR / "client.js"
PRODUCE_TIMEOUT_S = 300.0


class KafkajsError(AssertionError):
    """The node script failed; carries its stderr."""


def unavailable() -> str | None:
    if not shutil.which("node"):
        return "`node` is not installed"
    if not (SCRIPT_DIR / "node_modules" / "kafkajs").is_dir():
        return "kafkajs is not installed (run `npm ci` in compat_tests/kafkajs)"
    return None


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def run_node(args: list[str], stdin: bytes, timeout: float) -> bytes:
    """Run client.js; its stdout, or KafkajsError with its stderr on failure."""
    proc = subprocess.run(
        ["node", str(SCRIPT), *args], input=stdin, capture_output=True, timeout=timeout, cwd=SCRIPT_DIR
    )
    if proc.returncode != 0:
        raise KafkajsError(
            f"kafkajs {args[0]} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')[-5000:]}"
        )
    return proc.stdout


def json_lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    lines = (
        json.dumps(
            {
                "p": r.partition,
                "k": b64(r.key),
                "v": b64(r.value),
                "h": [[name, b64(value)] for name, value in r.headers],
                "ts": r.timestamp_ms,
            }
        )
        for r in records
    )
    out = json_lines(
        run_node(["produce", bootstrap, topic, codec], ("\n".join(lines) + "\n").encode(), PRODUCE_TIMEOUT_S)
    )
    assert out == [{"produced": len(records)}], f"unexpected kafkajs output {out[-3:]}"


def consume(bootstrap: str, topic: str, counts: Mapping[int, int], timeout: float) -> dict[int, list[Record]]:
    with tempfile.TemporaryDirectory(prefix="kafkajs-") as tmp:
        out_file = Path(tmp) / "records.jsonl"
        run_node(
            ["consume", bootstrap, topic, json.dumps(dict(counts)), str(int(timeout * 1000)), str(out_file)],
            b"",
            timeout + 60,
        )
        out = json_lines(out_file.read_bytes()) if out_file.exists() else []
    assert out and out[-1] == {"done": True}, f"kafkajs consume did not finish: {out[-3:]}"
    got: dict[int, list[Record]] = {p: [] for p in counts}
    for m in out[:-1]:
        got[m["p"]].append(
            Record(
                partition=m["p"],
                key=unb64(m["k"]),
                value=unb64(m["v"]),
                headers=tuple((name, unb64(value)) for name, value in m["h"]),
                timestamp_ms=m["ts"],
                offset=m["o"],
            )
        )
    return got


DRIVER = Driver("kafkajs", produce, consume, unavailable, no_codec_skip)
