"""Generate ``protocol/schema_data.json`` from Kafka's message definitions.

The reference definitions (``../shared/kafka-protocol`` relative to the repo root) are read, and
only facts are kept: API keys and names, version ranges, flexible versions and the field tree
(snake_case names, types, version ranges, nullable/tagged versions, tags, defaults). Common
structs are resolved inline. Output is deterministic (sorted keys) so that ``--check`` can compare
the committed file with what the reference produces.

Version ranges are written as ``[low, high]`` with ``high`` null for open ranges ("3+"), and the
whole range null for "none".

Usage::

    python tools/dev/gen_protocol_schema.py            # rewrite protocol/schema_data.json
    python tools/dev/gen_protocol_schema.py --check    # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REFERENCE = REPO_ROOT.parent / "shared" / "kafka-protocol"
DEFAULT_OUTPUT = REPO_ROOT / "protocol" / "schema_data.json"

INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint16"})
SCALAR_TYPES = INT_TYPES | {"float64", "string", "bytes", "records", "bool", "uuid"}

VersionRange = list[int | None] | None

# APIs whose definitions are taken whole from Apache Kafka 4.3.1's client jar (beside the reference
# brokers in ../shared/jvm) instead of the 4.0 snapshot: share groups, whose early-access v0 Kafka
# 4.1 removed (KIP-932 made v1 the first stable version, 4.3 added v2 of ShareFetch/ShareAcknowledge).
KAFKA_4_3_CLIENT_JAR = REPO_ROOT.parent / "shared" / "jvm" / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
KAFKA_4_3_APIS = (
    "ShareGroupHeartbeat",
    "ShareGroupDescribe",
    "ShareFetch",
    "ShareAcknowledge",
    # the share coordinator's inter-broker APIs (4.3: WriteShareGroupState and
    # ReadShareGroupStateSummary v1, KIP-1226) and the share admin APIs (new in 4.1)
    "InitializeShareGroupState",
    "ReadShareGroupState",
    "WriteShareGroupState",
    "DeleteShareGroupState",
    "ReadShareGroupStateSummary",
    "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets",
)

# Versions Apache Kafka 4.0.0 (the release) defines beyond the reference snapshot (taken from 4.0's
# trunk before the release). Produce v12 and TxnOffsetCommit v5 have the fields of the version
# before them (the release's own definitions say so: "Version 12 is the same as version 11
# (KIP-890)", "Version 5 is the same as version 4 (KIP-890)"); the others add RELEASE_FIELDS.
RELEASE_VERSIONS = {
    "Produce": 12,
    "TxnOffsetCommit": 5,
    "Metadata": 13,
    "DescribeGroups": 6,
    "DescribeCluster": 2,
    "ConsumerGroupDescribe": 1,
}

# The fields those release versions add, as facts in this schema's own form (read from Apache Kafka
# 4.0.0's definitions; the reference snapshot predates them). Each entry: the API, "request" or
# "response", the path of struct fields down to the one that holds the new field, the field it
# follows on the wire, and the field itself. A field the reference already declares is left alone.
RELEASE_FIELDS: list[tuple[str, str, tuple[str, ...], str, dict[str, Any]]] = [
    # Metadata v13 (KIP-1102): a top-level error code, REBOOTSTRAP_REQUIRED telling a client to
    # bootstrap again (Kafka 4.0's broker sets it only when the whole request fails)
    (
        "Metadata",
        "response",
        (),
        "cluster_authorized_operations",
        {"name": "error_code", "type": "int16", "versions": [13, None]},
    ),
    # DescribeGroups v6 (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND, with a message
    (
        "DescribeGroups",
        "response",
        ("groups",),
        "error_code",
        {
            "name": "error_message",
            "type": "string",
            "versions": [6, None],
            "nullable_versions": [6, None],
            "default": None,
        },
    ),
    # DescribeCluster v2 (KIP-1073): fenced brokers listed on request, each broker says whether it is
    (
        "DescribeCluster",
        "request",
        (),
        "endpoint_type",
        {"name": "include_fenced_brokers", "type": "bool", "versions": [2, None]},
    ),
    ("DescribeCluster", "response", ("brokers",), "rack", {"name": "is_fenced", "type": "bool", "versions": [2, None]}),
    # ConsumerGroupDescribe v1 (KIP-1099): each member's protocol, -1 unknown, 0 classic, 1 consumer
    (
        "ConsumerGroupDescribe",
        "response",
        ("groups", "members"),
        "target_assignment",
        {"name": "member_type", "type": "int8", "versions": [1, None], "default": -1},
    ),
]


class ReferenceError(Exception):
    """The reference definitions could not be read or are inconsistent."""


def strip_comments(text: str) -> str:
    """Remove ``//`` comments outside JSON strings."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``; ``KRaftVersion`` -> ``kraft_version``."""
    name = name.replace("KRaft", "Kraft")
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return name.lower()


def parse_versions(spec: str | None) -> VersionRange:
    """Parse "0+", "3-5", "2" or "none" into ``[low, high]`` (high None = open)."""
    if spec is None or spec == "none":
        return None
    spec = spec.strip()
    if spec.endswith("+"):
        return [int(spec[:-1]), None]
    if "-" in spec:
        low, high = spec.split("-", 1)
        return [int(low), int(high)]
    return [int(spec), int(spec)]


def element_type(type_name: str) -> str:
    return type_name[2:] if type_name.startswith("[]") else type_name


def normalize_default(type_name: str, raw: Any) -> Any:
    """Turn the reference's default (often a string) into a typed JSON value."""
    if isinstance(raw, str) and raw == "null":
        return None
    if type_name in INT_TYPES:
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if type_name == "bool":
        return raw.lower() == "true" if isinstance(raw, str) else bool(raw)
    if type_name == "float64":
        return float(raw)
    return raw


def convert_field(field: dict[str, Any], structs: dict[str, dict[str, Any]], where: str) -> dict[str, Any]:
    """Convert one reference field (recursively) into the facts-only form."""
    type_name = field["type"]
    out: dict[str, Any] = {
        "name": snake_case(field["name"]),
        "type": type_name,
        "versions": parse_versions(field["versions"]),
    }
    for key, out_key in (
        ("nullableVersions", "nullable_versions"),
        ("taggedVersions", "tagged_versions"),
        ("flexibleVersions", "flexible_versions"),
    ):
        if key in field:
            out[out_key] = parse_versions(field[key])
    if "tag" in field:
        out["tag"] = int(field["tag"])
    if "default" in field:
        out["default"] = normalize_default(type_name, field["default"])
    elem = element_type(type_name)
    if elem not in SCALAR_TYPES:
        subfields = field.get("fields")
        if subfields is None:
            if elem not in structs:
                raise ReferenceError(f"{where}: field {field['name']} has unknown struct type {elem}")
            subfields = structs[elem]["fields"]
        out["fields"] = [convert_field(f, structs, where) for f in subfields]
    elif "fields" in field:
        raise ReferenceError(f"{where}: scalar field {field['name']} has nested fields")
    return out


def load_definition(path: Path) -> dict[str, Any]:
    try:
        return json.loads(strip_comments(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ReferenceError(f"{path}: {exc}") from exc


def convert_message(msg: dict[str, Any], where: str) -> dict[str, Any]:
    structs = {s["name"]: s for s in msg.get("commonStructs", [])}
    return {
        "valid_versions": parse_versions(msg["validVersions"]),
        "flexible_versions": parse_versions(msg["flexibleVersions"]),
        "fields": [convert_field(f, structs, where) for f in msg["fields"]],
    }


def add_release_fields(apis: dict[int, dict[str, Any]]) -> None:
    """Insert RELEASE_FIELDS into the converted messages (in place)."""
    by_name = {entry["name"]: entry for entry in apis.values()}
    for api, kind, path, after, new_field in RELEASE_FIELDS:
        where = f"{api}{kind.capitalize()}"
        message = by_name.get(api, {}).get(kind)
        if message is None:
            raise ReferenceError(f"release field {new_field['name']}: no {where} in the reference")
        fields = message["fields"]
        for name in path:
            holder = next((f for f in fields if f["name"] == name and "fields" in f), None)
            if holder is None:
                raise ReferenceError(f"release field {new_field['name']}: {where} has no struct {name}")
            fields = holder["fields"]
        if any(f["name"] == new_field["name"] for f in fields):
            continue  # the reference has caught up
        names = [f["name"] for f in fields]
        if after not in names:
            raise ReferenceError(f"release field {new_field['name']}: {where} has no field {after} to follow")
        fields.insert(names.index(after) + 1, json.loads(json.dumps(new_field)))


def api_name(message_name: str) -> str:
    for suffix in ("Request", "Response"):
        if message_name.endswith(suffix):
            return message_name[: -len(suffix)]
    raise ReferenceError(f"message {message_name} is neither a request nor a response")


def read_error_codes(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError as exc:
        raise ReferenceError(f"{path}: {exc}") from exc
    return sorted(({"code": int(r["code"]), "name": r["name"]} for r in rows), key=lambda e: e["code"])


def load_kafka_4_3(name: str, jar: Path = KAFKA_4_3_CLIENT_JAR) -> dict[str, Any]:
    """Message ``name``'s definition from Kafka 4.3.1's client jar (``common/message/``)."""
    import zipfile

    try:
        with zipfile.ZipFile(jar) as archive:
            text = archive.read(f"common/message/{name}.json").decode("utf-8")
        return json.loads(strip_comments(text))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ReferenceError(f"{jar} ({name}): {exc}") from exc


def use_kafka_4_3(apis: dict[int, dict[str, Any]]) -> None:
    """Replace the KAFKA_4_3_APIS (in place) with Kafka 4.3.1's definitions of them."""
    for api in KAFKA_4_3_APIS:
        for kind in ("request", "response"):
            msg = load_kafka_4_3(f"{api}{kind.capitalize()}")
            key = int(msg["apiKey"])
            converted = convert_message(msg, f"{api}{kind.capitalize()}.json (4.3.1)")
            if kind == "request":
                converted["latest_version_unstable"] = bool(msg.get("latestVersionUnstable", False))
                converted["listeners"] = sorted(msg.get("listeners", []))
            apis.setdefault(key, {"api_key": key, "name": api})[kind] = converted


def generate(reference: Path) -> dict[str, Any]:
    """Build the whole schema document from a reference directory."""
    messages_dir = reference / "messages"
    apis: dict[int, dict[str, Any]] = {}
    headers: dict[str, Any] = {}
    files = sorted(messages_dir.glob("*.json"))
    if not files:
        raise ReferenceError(f"no message definitions in {messages_dir}")
    for path in files:
        msg = load_definition(path)
        kind = msg.get("type")
        if kind == "header":
            headers[snake_case(msg["name"])] = convert_message(msg, path.name)
        elif kind in ("request", "response"):
            key = int(msg["apiKey"])
            entry = apis.setdefault(key, {"api_key": key, "name": api_name(msg["name"])})
            converted = convert_message(msg, path.name)
            if kind == "request":
                converted["latest_version_unstable"] = bool(msg.get("latestVersionUnstable", False))
                converted["listeners"] = sorted(msg.get("listeners", []))
            entry[kind] = converted
    for key, entry in apis.items():
        high = RELEASE_VERSIONS.get(entry["name"])
        for kind in ("request", "response"):
            if high is not None and kind in entry and entry[kind]["valid_versions"][1] == high - 1:
                entry[kind]["valid_versions"][1] = high
        if "request" not in entry or "response" not in entry:
            raise ReferenceError(f"api key {key} ({entry['name']}) lacks a request or response")
    add_release_fields(apis)
    use_kafka_4_3(apis)
    return {
        "apis": [apis[k] for k in sorted(apis)],
        "headers": headers,
        "error_codes": read_error_codes(reference / "error-codes.tsv"),
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference",
        type=Path,
        default=DEFAULT_REFERENCE,
        help="directory holding messages/*.json and error-codes.tsv",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the output file is not current")
    args = parser.parse_args(argv)
    try:
        text = render(generate(args.reference))
    except ReferenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        try:
            current = args.output.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != text:
            print(
                f"{args.output} is out of date with {args.reference}; run: python tools/dev/gen_protocol_schema.py",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output} is current")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
