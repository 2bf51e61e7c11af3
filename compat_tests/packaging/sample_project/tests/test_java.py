import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _kafka_libs() -> Path | None:
    candidates = [os.environ.get("KAFKA_HOME", "")] + [str(p / "shared/jvm/kafka-4.0.0") for p in HERE.parents]
    return next((Path(c) / "libs" for c in candidates if c and (Path(c) / "libs").is_dir()), None)


def test_round_trip_with_the_java_client(strom_broker, strom_topic):
    libs = _kafka_libs()
    if shutil.which("java") is None or libs is None:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL", "") not in ("", "0"):
            pytest.fail("java and Kafka's client jars are required (STROM_COMPAT_REQUIRE_ALL=1)")
        pytest.skip("java or Kafka's client jars (KAFKA_HOME) not found")
    result = subprocess.run(
        [
            "java",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            f"{libs}/*",
            str(HERE.parent / "java" / "Program.java"),
            strom_broker.bootstrap_servers,
            strom_topic,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "consumed 10 of 10" in result.stdout
