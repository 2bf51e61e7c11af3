"""The generated schema: freshness check, generator behaviour, version questions."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import (
    ApiKey,
    api_spec,
    is_flexible,
    request_header_version,
    response_header_version,
    schema_document,
)
from strom.protocol.tests.helpers import REFERENCE
from strom.tools.dev import gen_protocol_schema as gen

COMMITTED = gen.DEFAULT_OUTPUT


def test_committed_schema_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert gen.main(["--check"]) == 0


def test_check_fails_when_the_reference_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = tmp_path / "ref"
    shutil.copytree(REFERENCE, ref)
    path = ref / "messages" / "ControlledShutdownRequest.json"  # one only the snapshot defines
    path.write_text(path.read_text().replace('"versions": "2+"', '"versions": "1+"', 1))
    assert gen.main(["--check", "--reference", str(ref), "--output", str(COMMITTED)]) == 1
    assert "out of date" in capsys.readouterr().err


def _release_jar(tmp_path: Path, edit: dict[str, tuple[str, str]]) -> Path:
    """A copy of the newer release's jar (its message definitions only) with ``edit`` applied:
    file name -> (text, replacement)."""
    jar = tmp_path / "newer.jar"
    with zipfile.ZipFile(gen.DEFAULT_NEWER) as src, zipfile.ZipFile(jar, "w") as dst:
        for name in src.namelist():
            if name.startswith("common/message/") and name.endswith(".json"):
                text = src.read(name).decode("utf-8")
                old, new = edit.get(name.rsplit("/", 1)[1], ("", ""))
                if old:
                    assert old in text
                    text = text.replace(old, new)
                dst.writestr(name, text)
    return jar


def test_release_definitions_extend_the_snapshot(tmp_path: Path) -> None:
    """The snapshot's versions keep its layout, the release's later versions are added, fields the
    release dropped with the versions it removed stay for the old versions."""
    doc = gen.generate(REFERENCE, _release_jar(tmp_path, {}))
    [offsets] = [a for a in doc["apis"] if a["name"] == "ListOffsets"]
    assert offsets["request"]["valid_versions"] == [0, 11]  # 4.3.1 defines 1-11, the snapshot 0-10
    topics = next(f for f in offsets["request"]["fields"] if f["name"] == "topics")
    partitions = next(f for f in topics["fields"] if f["name"] == "partitions")
    assert next(f for f in partitions["fields"] if f["name"] == "max_num_offsets")["versions"] == [0, 0]
    [produce] = [a for a in doc["apis"] if a["name"] == "Produce"]
    data = next(f for f in produce["request"]["fields"] if f["name"] == "topic_data")
    assert [(f["name"], f["versions"]) for f in data["fields"][:2]] == [("name", [0, 12]), ("topic_id", [13, None])]
    assert {a["name"] for a in doc["apis"]} >= {"StreamsGroupHeartbeat", "DeleteShareGroupOffsets"}


def test_a_release_that_redefines_a_snapshot_version_wins_from_there(tmp_path: Path) -> None:
    # the release changes Heartbeat v2's layout: v0-v1 stay the snapshot's, v2 on are the release's
    jar = _release_jar(
        tmp_path,
        {
            "HeartbeatRequest.json": (
                '"name": "GroupInstanceId", "type": "string", "versions": "3+"',
                '"name": "GroupInstanceId", "type": "string", "versions": "2+"',
            )
        },
    )
    doc = gen.generate(REFERENCE, jar)
    [heartbeat] = [a for a in doc["apis"] if a["name"] == "Heartbeat"]
    instance = next(f for f in heartbeat["request"]["fields"] if f["name"] == "group_instance_id")
    assert instance["versions"] == [2, None] and heartbeat["request"]["valid_versions"] == [0, 4]


def test_release_fields_are_added_once_and_need_their_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = '{ "name": "Name", "type": "string", "versions": "0+", "entityType": "topicName",'
    # a release that already declares the field (a newer jar): it is not added twice
    jar = _release_jar(
        tmp_path,
        {"TxnOffsetCommitResponse.json": (topic, '{ "name": "TopicId", "type": "uuid", "versions": "6+" }, ' + topic)},
    )
    doc = gen.generate(REFERENCE, jar)
    [txn] = [a for a in doc["apis"] if a["name"] == "TxnOffsetCommit"]
    topics = next(f for f in txn["response"]["fields"] if f["name"] == "topics")
    assert [f["name"] for f in topics["fields"]] == ["topic_id", "name", "partitions"]
    assert next(f for f in topics["fields"] if f["name"] == "name")["versions"] == [0, 5]
    # the field it follows is gone: no guessing where the new one goes
    jar = _release_jar(tmp_path, {"TxnOffsetCommitRequest.json": ('"name": "Name"', '"name": "Topic"')})
    assert gen.main(["--reference", str(REFERENCE), "--newer", str(jar), "--output", str(tmp_path / "out.json")]) == 2
    assert "topic_id" in capsys.readouterr().err


def test_generator_writes_what_check_accepts(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    assert gen.main(["--output", str(out)]) == 0
    assert out.read_text() == COMMITTED.read_text()
    assert gen.main(["--check", "--output", str(out)]) == 0


def test_facts_only_no_prose() -> None:
    text = COMMITTED.read_text()
    assert '"about"' not in text and "throttled due to a quota" not in text


@pytest.mark.parametrize(
    "name, expected",
    [
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("TopicId", "topic_id"),
        ("V0Host", "v0_host"),
        ("isKRaftController", "is_kraft_controller"),
        ("V3AndBelowTopics", "v3_and_below_topics"),
    ],
)
def test_snake_case(name: str, expected: str) -> None:
    assert gen.snake_case(name) == expected


def test_comment_stripping_keeps_strings() -> None:
    assert gen.strip_comments('{"a": "x//y"} // note\n') == '{"a": "x//y"} \n'


def test_api_keys_and_ranges() -> None:
    assert ApiKey.PRODUCE.value == 0 and ApiKey.FETCH.value == 1 and ApiKey.API_VERSIONS.value == 18
    assert ApiKey.DESCRIBE_TOPIC_PARTITIONS.value == 75
    spec = api_spec(ApiKey.API_VERSIONS)
    assert (spec.name, spec.min_version, spec.max_version) == ("ApiVersions", 0, 5)
    assert len(schema_document()["apis"]) == len(ApiKey)


def test_flexible_and_header_versions() -> None:
    assert not is_flexible(ApiKey.FETCH, 11) and is_flexible(ApiKey.FETCH, 12)
    assert request_header_version(ApiKey.FETCH, 11) == 1
    assert request_header_version(ApiKey.FETCH, 12) == 2
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 1) == 1
    assert response_header_version(ApiKey.FETCH, 12) == 1
    assert response_header_version(ApiKey.FETCH, 11) == 0
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0


def _upper_snake(name: str) -> str:
    """Kafka's constant name for a message name: ``AddPartitionsToTxn`` -> ``ADD_PARTITIONS_TO_TXN``."""
    name = name.replace("KRaft", "Kraft")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).upper()


@pytest.mark.parametrize(
    ("enum_class", "expected"),
    [
        (ErrorCode, [(e["name"], e["code"]) for e in schema_document()["error_codes"]]),
        (ApiKey, [(_upper_snake(a["name"]), a["api_key"]) for a in schema_document()["apis"]]),
    ],
)
def test_written_out_enums_are_the_schemas(
    enum_class: type[ErrorCode] | type[ApiKey], expected: list[tuple[str, int]]
) -> None:
    """ErrorCode and ApiKey are written out (so a type checker knows their members): after the schema
    is regenerated for a new Kafka, they list exactly its error codes and APIs, in its order."""
    members = [(member.name, member.value) for member in enum_class]
    missing = "".join(f"    {name} = {value}\n" for name, value in expected if (name, value) not in members)
    extra = [name for name, value in members if (name, value) not in expected]
    assert members == expected, f"{enum_class.__name__}: add\n{missing}remove {extra}, keep the schema's order"
