"""`strom log-dirs`: every broker's log dirs, whether each works, and what it holds.

What ``kafka-log-dirs.sh --describe`` shows: the brokers come from a Metadata request to the
bootstrap server, then each broker answers DescribeLogDirs (v4: with the volume's size and free
space). A dir that failed (I/O errors, removed, read-only) shows KAFKA_STORAGE_ERROR; its
partitions answer that error to clients until the disk is repaired and the broker restarted.
``--json`` prints Kafka's JSON layout (brokers -> logDirs -> partitions).
"""

from __future__ import annotations

import socket
from pathlib import Path

import click

from strom.tools.common import (
    CONNECT_TIMEOUT_S,
    ClusterError,
    KafkaSocket,
    _addresses,
    connection_options,
    emit_json,
    resolve_connection,
    unreachable_message,
)

METADATA, DESCRIBE_LOG_DIRS = 3, 35


def _request(host: str, port: int, api_key: int, version: int, body: dict):
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
        sock.settimeout(30)
        return KafkaSocket(sock, "strom-log-dirs").request(api_key, version, body)


def describe(bootstrap: str) -> list[dict]:
    """[{"broker", "host", "port", "logDirs": [{"logDir", "error", "totalBytes", "usableBytes",
    "partitions": [{"partition", "size", "offsetLag", "isFuture"}]}]}] for every live broker."""
    from strom.protocol.errors import ErrorCode

    metadata = None
    for host, port in _addresses(bootstrap):
        try:
            metadata = _request(host, port, METADATA, 1, {"topics": []})
            break
        except (OSError, ValueError):
            continue
    if metadata is None:
        raise ClusterError(unreachable_message(bootstrap))
    out = []
    for b in sorted(metadata.brokers, key=lambda b: b.node_id):
        entry = {"broker": b.node_id, "host": b.host, "port": b.port, "logDirs": []}
        try:
            answer = _request(b.host, b.port, DESCRIBE_LOG_DIRS, 4, {"topics": None})
        except (OSError, ValueError) as exc:
            entry["error"] = f"unreachable: {exc}"
            out.append(entry)
            continue
        for r in answer.results:
            entry["logDirs"].append(
                {
                    "logDir": r.log_dir,
                    "error": None if r.error_code == 0 else ErrorCode(r.error_code).name,
                    "totalBytes": r.total_bytes,
                    "usableBytes": r.usable_bytes,
                    "partitions": [
                        {
                            "partition": f"{t.name}-{p.partition_index}",
                            "size": p.partition_size,
                            "offsetLag": p.offset_lag,
                            "isFuture": p.is_future_key,
                        }
                        for t in r.topics
                        for p in t.partitions
                    ],
                }
            )
        out.append(entry)
    return out


def _human(n: int) -> str:
    if n < 0:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@click.command("log-dirs")
@connection_options
@click.option("--json", "as_json", is_flag=True, help="Print Kafka's JSON layout (kafka-log-dirs.sh --describe).")
def log_dirs(bootstrap_server: str | None, command_config: Path | None, as_json: bool) -> None:
    """Show each broker's log dirs: online or failed, free space, partitions and their sizes."""
    bootstrap, _ = resolve_connection(bootstrap_server, command_config)
    brokers = describe(bootstrap)
    if as_json:
        emit_json({"version": 1, "brokers": brokers})
        return
    failed = 0
    for b in brokers:
        click.echo(f"broker {b['broker']} ({b['host']}:{b['port']})" + (f": {b['error']}" if "error" in b else ""))
        for d in b["logDirs"]:
            if d["error"]:
                failed += 1
                click.echo(
                    f"  {d['logDir']}  OFFLINE ({d['error']}): its partitions are unavailable here "
                    f"until the disk is repaired and the broker restarted"
                )
                continue
            size = sum(p["size"] for p in d["partitions"])
            click.echo(
                f"  {d['logDir']}  online  {len(d['partitions'])} partitions, {_human(size)}; "
                f"volume {_human(d['usableBytes'])} free of {_human(d['totalBytes'])}"
            )
    if failed:
        raise ClusterError(f"{failed} log dir(s) offline")
