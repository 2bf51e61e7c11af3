"""`strom bench`'s share-group section without a broker: a run whose records were delivered twice or
not at all fails instead of giving a figure, and the reference Kafka 4.3.1 is started with its
client jar on CLASSPATH (the tiny run of test_benchmark.py covers the figures themselves)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.tools.bench import share as bench_share
from strom.tools.bench.share import ShareBenchError, _check_once, reference_43_env, reference_43_script


def test_every_record_once_passes() -> None:
    _check_once(4, "t", {0: [0, 1], 1: [0], 2: [0]}, "share x2")


@pytest.mark.parametrize(
    "got",
    [
        {0: [0, 1, 1], 1: [0]},  # offset 1 of partition 0 delivered twice, total still short of 4
        {0: [0, 1, 1], 1: [0, 1]},  # one record twice, one missing: the total alone would be 5
        {0: [0, 1], 1: [0, 0]},  # the right total, one record twice
        {0: [0, 1], 1: [0]},  # one missing
    ],
)
def test_a_record_twice_or_missing_fails_the_run(got: dict[int, list[int]]) -> None:
    with pytest.raises(ShareBenchError, match="expected 4 once each"):
        _check_once(4, "t", got, "share x2")


def test_the_43_reference_starts_with_its_client_jar_first(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "kafka-reference-4.3.sh"
    script.write_text("")
    jar = tmp_path / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"PK")
    monkeypatch.setenv("CLASSPATH", "/elsewhere.jar")
    assert reference_43_env(script)["CLASSPATH"] == f"{jar}{os.pathsep}/elsewhere.jar"
    jar.unlink()
    assert reference_43_env(script)["CLASSPATH"] == "/elsewhere.jar"


def test_the_43_reference_is_found_beside_the_40_one(tmp_path: Path, monkeypatch) -> None:
    older = tmp_path / "kafka-reference.sh"
    older.write_text("")
    monkeypatch.delenv("STROM_KAFKA_REFERENCE_43", raising=False)
    monkeypatch.setattr(bench_share, "reference_script", lambda: older)
    assert reference_43_script() is None
    newer = tmp_path / "kafka-reference-4.3.sh"
    newer.write_text("")
    assert reference_43_script() == newer
