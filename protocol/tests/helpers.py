"""Shared helpers for the protocol tests: populated sample messages and deep comparison."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from strom.protocol.schema import FieldSpec, api_spec, in_range

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol"
# Apache Kafka 4.3.1's Java client (../shared/jvm, on every machine and CI run) carries the release's
# own message definitions: the versions the reference snapshot predates are checked against those.
RELEASE_CLIENT_JAR = (
    Path(__file__).resolve().parents[3] / "shared" / "jvm" / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
)

_INT_SAMPLES = {"int8": 7, "int16": 1234, "int32": 123456, "int64": 1 << 40, "uint16": 65000}


@cache
def load_reference(name: str) -> dict[str, Any]:
    """A reference definition read directly (comments removed), independent of the generator."""
    text = (REFERENCE / "messages" / f"{name}.json").read_text(encoding="utf-8")
    definition: dict[str, Any] = json.loads(re.sub(r"//.*", "", text))
    return definition


@cache
def load_release_reference(name: str) -> dict[str, Any] | None:
    """Kafka 4.3.1's own definition of message ``name`` (from its client jar), None without the jar
    or when the release has no such message."""
    import zipfile

    if not RELEASE_CLIENT_JAR.exists():
        return None
    with zipfile.ZipFile(RELEASE_CLIENT_JAR) as jar:
        try:
            text = jar.read(f"common/message/{name}.json").decode("utf-8")
        except KeyError:
            return None
    definition: dict[str, Any] = json.loads(re.sub(r"//.*", "", text))
    return definition


def _scalar_sample(type_name: str, name: str, default: Any, salt: int) -> Any:
    if type_name in _INT_SAMPLES:
        value = _INT_SAMPLES[type_name] + salt
        return value + 1 if value == default else value
    table = {
        "float64": 1.5 + salt,
        "bool": not default if isinstance(default, bool) else True,
        "uuid": bytes(range(1 + salt, 17 + salt)),
        "string": f"{name}-{salt}-é",
        "bytes": f"b:{name}:{salt}".encode(),
        "records": f"r:{name}:{salt}".encode() * 3,
    }
    return table[type_name]


def sample_value(field: FieldSpec, version: int, nulls: bool = False, salt: int = 0) -> Any:
    """A non-default value for ``field`` in ``version`` (None for nullable fields when ``nulls``)."""
    if nulls and in_range(version, field.nullable_versions):
        return None
    if field.is_array:
        if field.is_struct:
            return [sample_struct(field.fields, version, nulls, salt + i) for i in range(2)]
        return [_scalar_sample(field.element_type, field.name, None, salt + i) for i in range(2)]
    if field.is_struct:
        return sample_struct(field.fields, version, nulls, salt)
    return _scalar_sample(field.type, field.name, field.default, salt)


def sample_struct(fields: tuple[FieldSpec, ...], version: int, nulls: bool = False, salt: int = 0) -> dict[str, Any]:
    """Every field present in ``version`` with a non-default value."""
    return {f.name: sample_value(f, version, nulls, salt + 1) for f in fields if in_range(version, f.versions)}


def sample_message(api_key: int, version: int, kind: str, nulls: bool = False) -> dict[str, Any]:
    return sample_struct(getattr(api_spec(api_key), kind).fields, version, nulls)


def all_versions(kind: str = "request") -> list[tuple[int, int]]:
    from strom.protocol.schema import all_api_keys

    out = []
    for key in all_api_keys():
        spec = getattr(api_spec(key), kind)
        out += [(key, v) for v in range(spec.min_version, spec.max_version + 1)]
    return out


def assert_contains(expected: Any, actual: Any, path: str = "") -> None:
    """Every key of ``expected`` (recursively) has the same value in ``actual``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a struct, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} missing from decoded value"
            assert_contains(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_contains(e, a, f"{path}[{i}]")
    elif isinstance(actual, memoryview):  # records decode as a slice of the message buffer
        assert isinstance(expected, (bytes, bytearray, memoryview)) and bytes(actual) == bytes(expected), (
            f"{path}: expected {expected!r}, got {bytes(actual)!r}"
        )
    else:
        assert actual == expected and type(actual) is type(expected), f"{path}: expected {expected!r}, got {actual!r}"
