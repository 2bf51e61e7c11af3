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
import zipfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REFERENCE = REPO_ROOT.parent / "shared" / "kafka-protocol"
DEFAULT_OUTPUT = REPO_ROOT / "protocol" / "schema_data.json"

INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint16"})
SCALAR_TYPES = INT_TYPES | {"float64", "string", "bytes", "records", "bool", "uuid"}

VersionRange = list[int | None] | None

# Apache Kafka 4.3.1's client jar (../shared/jvm, on every machine and CI run) carries that
# release's own message definitions. They extend the reference snapshot: every version the snapshot
# defines keeps the snapshot's layout (up to the first version whose layout the release defines
# differently, where the release wins), every later version is the release's, and APIs the snapshot
# lacks are taken whole. Versions Kafka removed (KIP-896) stay, as Strom still serves old clients.
DEFAULT_NEWER = REPO_ROOT.parent / "shared" / "jvm" / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"

# Versions Apache Kafka 4.4 defines beyond 4.3.1 (4.4 is not in any jar here; the facts are read
# from Kafka's 4.4 definitions): ApiVersions v5 (KIP-1242: the client says which cluster and node it
# means to reach) and TxnOffsetCommit v6 (KIP-1319: topic ids instead of names). Each adds
# RELEASE_FIELDS and ends fields at RELEASE_FIELD_ENDS.
RELEASE_VERSIONS = {
    "ApiVersions": 5,
    "TxnOffsetCommit": 6,
}

# The fields those release versions add, as facts in this schema's own form. Each entry: the API,
# "request" or "response", the path of struct fields down to the one that holds the new field, the
# field it follows on the wire, and the field itself. A field the reference already declares is left
# alone.
RELEASE_FIELDS: list[tuple[str, str, tuple[str, ...], str, dict[str, Any]]] = [
    (
        "ApiVersions",
        "request",
        (),
        "client_software_version",
        {
            "name": "cluster_id",
            "type": "string",
            "versions": [5, None],
            "nullable_versions": [5, None],
            "default": None,
        },
    ),
    (
        "ApiVersions",
        "request",
        (),
        "cluster_id",
        {"name": "node_id", "type": "int32", "versions": [5, None], "default": -1},
    ),
    ("TxnOffsetCommit", "request", ("topics",), "name", {"name": "topic_id", "type": "uuid", "versions": [6, None]}),
    ("TxnOffsetCommit", "response", ("topics",), "name", {"name": "topic_id", "type": "uuid", "versions": [6, None]}),
]

# The error codes Kafka 4.3.1 added after the snapshot (its client jar's Errors class, read with
# javap: name, code).
RELEASE_ERROR_CODES = [
    ("REBOOTSTRAP_REQUIRED", 129),
    ("STREAMS_INVALID_TOPOLOGY", 130),
    ("STREAMS_INVALID_TOPOLOGY_EPOCH", 131),
    ("STREAMS_TOPOLOGY_FENCED", 132),
    ("SHARE_SESSION_LIMIT_REACHED", 133),
]

# Fields a release version drops: (API, kind, path to the holding struct, field, its last version).
RELEASE_FIELD_ENDS: list[tuple[str, str, tuple[str, ...], str, int]] = [
    ("TxnOffsetCommit", "request", ("topics",), "name", 5),
    ("TxnOffsetCommit", "response", ("topics",), "name", 5),
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
        definition: dict[str, Any] = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ReferenceError(f"{path}: {exc}") from exc
    return definition


def convert_message(msg: dict[str, Any], where: str) -> dict[str, Any]:
    structs = {s["name"]: s for s in msg.get("commonStructs", [])}
    return {
        "valid_versions": parse_versions(msg["validVersions"]),
        "flexible_versions": parse_versions(msg.get("flexibleVersions")),
        "fields": [convert_field(f, structs, where) for f in msg.get("fields", [])],
    }


def _holder(message: dict[str, Any], path: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = message["fields"]
    for name in path:
        holder = next((f for f in fields if f["name"] == name and "fields" in f), None)
        if holder is None:
            raise ReferenceError(f"{what}: no struct {name}")
        fields = holder["fields"]
    return fields


def add_release_fields(apis: dict[int, dict[str, Any]]) -> None:
    """Insert RELEASE_FIELDS and apply RELEASE_FIELD_ENDS to the converted messages (in place)."""
    by_name = {entry["name"]: entry for entry in apis.values()}
    for api, kind, path, after, new_field in RELEASE_FIELDS:
        where = f"{api}{kind.capitalize()}"
        message = by_name.get(api, {}).get(kind)
        if message is None:
            raise ReferenceError(f"release field {new_field['name']}: no {where} in the reference")
        fields = _holder(message, path, f"release field {new_field['name']}: {where}")
        if any(f["name"] == new_field["name"] for f in fields):
            continue  # the reference has caught up
        names = [f["name"] for f in fields]
        if after not in names:
            raise ReferenceError(f"release field {new_field['name']}: {where} has no field {after} to follow")
        fields.insert(names.index(after) + 1, json.loads(json.dumps(new_field)))
    for api, kind, path, name, last in RELEASE_FIELD_ENDS:
        where = f"{api}{kind.capitalize()}"
        message = by_name.get(api, {}).get(kind)
        if message is None:
            raise ReferenceError(f"release field end {name}: no {where} in the reference")
        field = next((f for f in _holder(message, path, f"{where}") if f["name"] == name), None)
        if field is None:
            raise ReferenceError(f"release field end {name}: {where} has no such field")
        low, high = field["versions"]
        if high is None or high > last:
            field["versions"] = [low, last]


# ------------------------------------------------------------------ the newer release's definitions


def _covers(rng: Any, version: int) -> bool:
    return rng is not None and version >= int(rng[0]) and (rng[1] is None or version <= int(rng[1]))


def layout(fields: list[dict[str, Any]], version: int) -> list[Any]:
    """What goes on the wire for ``version``: names, types, nullability, tags, in order."""
    out: list[Any] = []
    for f in fields:
        if not _covers(f["versions"], version):
            continue
        tagged = _covers(f.get("tagged_versions"), version)
        sub = layout(f["fields"], version) if "fields" in f else None
        out.append(
            (
                f["name"],
                f["type"] if "fields" not in f else f["type"].startswith("[]"),
                _covers(f.get("nullable_versions"), version),
                f.get("tag") if tagged else None,
                _covers(f.get("flexible_versions", [0, None]), version),
                sub,
            )
        )
    return out


def _message_layout(message: dict[str, Any], version: int) -> Any:
    return (_covers(message["flexible_versions"], version), layout(message["fields"], version))


def _join(old: Any, new: Any, cut: int, where: str) -> VersionRange:
    """``old`` up to version ``cut``, ``new`` above it, as one range."""
    pieces: list[tuple[int, int | None]] = []
    if old is not None and int(old[0]) <= cut:
        pieces.append((int(old[0]), cut if old[1] is None or int(old[1]) > cut else int(old[1])))
    if new is not None and (new[1] is None or int(new[1]) > cut):
        pieces.append((max(int(new[0]), cut + 1), new[1]))
    if not pieces:
        return None
    if len(pieces) == 2:
        (low, high), (next_low, top) = pieces
        if high != next_low - 1:
            raise ReferenceError(f"{where}: versions {old} up to v{cut} and {new} above it leave a gap")
        return [low, top]
    return [pieces[0][0], pieces[0][1]]


def _merge_fields(old: list[dict[str, Any]], new: list[dict[str, Any]], cut: int, where: str) -> list[dict[str, Any]]:
    old_by_name = {f["name"]: f for f in old}
    new_by_name = {f["name"]: f for f in new}
    order = [f["name"] for f in new]
    for i, f in enumerate(old):  # fields only the snapshot has (versions the release removed)
        if f["name"] not in new_by_name:
            before = next((o["name"] for o in reversed(old[:i]) if o["name"] in order), None)
            order.insert(order.index(before) + 1 if before is not None else 0, f["name"])
    merged = []
    for name in order:
        o, n = old_by_name.get(name), new_by_name.get(name)
        here = f"{where}.{name}"
        if o is None or n is None:
            only: dict[str, Any] = json.loads(json.dumps(o if n is None else n))
            old_range, new_range = (only["versions"], None) if n is None else (None, only["versions"])
            only["versions"] = _join(old_range, new_range, cut, here)
            if only["versions"] is not None:
                merged.append(only)
            continue
        if o["type"] != n["type"]:
            raise ReferenceError(f"{here}: type {o['type']} in the snapshot, {n['type']} in the release")
        field = json.loads(json.dumps(n))
        for key in ("versions", "nullable_versions", "tagged_versions", "flexible_versions"):
            if key in o or key in n:
                field[key] = _join(o.get(key), n.get(key), cut, f"{here} {key}")
        if "fields" in o:
            field["fields"] = _merge_fields(o["fields"], n["fields"], cut, here)
        merged.append(field)
    return merged


def merge_release(old: dict[str, Any], new: dict[str, Any], where: str) -> dict[str, Any]:
    """One message: the snapshot's definition extended by the newer release's (see DEFAULT_NEWER)."""
    if new["valid_versions"] is None:
        return old  # the release serves it no more (ZooKeeper-era inter-broker APIs)
    if old["valid_versions"] is None:
        return new
    old_low, old_high = old["valid_versions"]
    new_low, new_high = new["valid_versions"]
    cut = int(old_high)
    for version in range(max(int(old_low), int(new_low)), int(old_high) + 1):
        if _message_layout(old, version) != _message_layout(new, version):
            cut = version - 1  # the release redefined this version (an early-access API): it wins
            break
    if cut < int(old_low):
        return new
    merged = dict(new)
    merged["valid_versions"] = [int(old_low), new_high if new_high is None or int(new_high) > cut else cut]
    merged["flexible_versions"] = _join(old["flexible_versions"], new["flexible_versions"], cut, where)
    merged["fields"] = _merge_fields(old["fields"], new["fields"], cut, where)
    for version in range(int(old_low), int(merged["valid_versions"][1]) + 1):
        source = old if version <= cut else new
        if _message_layout(merged, version) != _message_layout(source, version):
            raise ReferenceError(f"{where} v{version}: merging the release's definition changed its layout")
    return merged


def read_newer(jar: Path) -> list[tuple[str, dict[str, Any]]]:
    """The message definitions in a Kafka client jar, as (file name, definition)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            names = sorted(n for n in archive.namelist() if n.startswith("common/message/") and n.endswith(".json"))
            texts = [(n.rsplit("/", 1)[1], archive.read(n).decode("utf-8")) for n in names]
    except (OSError, zipfile.BadZipFile) as exc:
        raise ReferenceError(f"{jar}: {exc}") from exc
    if not texts:
        raise ReferenceError(f"{jar}: no common/message/*.json definitions")
    try:
        return [(name, json.loads(strip_comments(text))) for name, text in texts]
    except ValueError as exc:
        raise ReferenceError(f"{jar}: {exc}") from exc


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


def _collect(definitions: list[tuple[str, dict[str, Any]]]) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    apis: dict[int, dict[str, Any]] = {}
    headers: dict[str, Any] = {}
    for where, msg in definitions:
        kind = msg.get("type")
        if kind == "header":
            headers[snake_case(msg["name"])] = convert_message(msg, where)
        elif kind in ("request", "response"):
            key = int(msg["apiKey"])
            entry = apis.setdefault(key, {"api_key": key, "name": api_name(msg["name"])})
            converted = convert_message(msg, where)
            if kind == "request":
                converted["latest_version_unstable"] = bool(msg.get("latestVersionUnstable", False))
                converted["listeners"] = sorted(msg.get("listeners", []))
            entry[kind] = converted
    return apis, headers


def generate(reference: Path, newer: Path | None = DEFAULT_NEWER) -> dict[str, Any]:
    """Build the whole schema document from a reference directory and a newer release's jar."""
    messages_dir = reference / "messages"
    files = sorted(messages_dir.glob("*.json"))
    if not files:
        raise ReferenceError(f"no message definitions in {messages_dir}")
    apis, headers = _collect([(path.name, load_definition(path)) for path in files])
    if newer is not None:
        newer_apis, newer_headers = _collect(read_newer(newer))
        for name, header in newer_headers.items():
            headers[name] = merge_release(headers[name], header, name) if name in headers else header
        for key, entry in newer_apis.items():
            if key not in apis:
                apis[key] = entry
                continue
            for kind in ("request", "response"):
                merged = merge_release(apis[key][kind], entry[kind], f"{entry['name']}{kind.capitalize()}")
                if kind == "request":
                    merged["latest_version_unstable"] = entry[kind]["latest_version_unstable"]
                    merged["listeners"] = apis[key][kind]["listeners"]
                apis[key][kind] = merged
            if entry["request"]["valid_versions"] is not None:
                apis[key]["name"] = entry["name"]  # Kafka renamed it (ListClientMetricsResources)
    for key, entry in apis.items():
        high = RELEASE_VERSIONS.get(entry["name"])
        for kind in ("request", "response"):
            if high is not None and kind in entry and entry[kind]["valid_versions"][1] == high - 1:
                entry[kind]["valid_versions"][1] = high
        if "request" not in entry or "response" not in entry:
            raise ReferenceError(f"api key {key} ({entry['name']}) lacks a request or response")
    add_release_fields(apis)
    return {
        "apis": [apis[k] for k in sorted(apis)],
        "headers": headers,
        "error_codes": _with_release_codes(read_error_codes(reference / "error-codes.tsv")),
    }


def _with_release_codes(codes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    known = {c["code"] for c in codes}
    added = [{"code": code, "name": name} for name, code in RELEASE_ERROR_CODES if code not in known]
    return sorted(codes + added, key=lambda e: e["code"])


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
    parser.add_argument(
        "--newer",
        type=Path,
        default=DEFAULT_NEWER,
        help="a newer Kafka client jar whose common/message/*.json extend the reference",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the output file is not current")
    args = parser.parse_args(argv)
    try:
        text = render(generate(args.reference, args.newer))
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
