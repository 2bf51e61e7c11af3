"""Where the compat tests find the JVM side (a Java runtime, Kafka 4.0's jars and tools in
``../shared/jvm``), what a test does when it is missing, and how it runs one of Kafka's scripts.

``KAFKA_HOME`` (environment) points at another Kafka 4.0 distribution; ``STROM_JVM_DIR`` at
another ``shared/jvm``. Without them a test skips, or fails when ``STROM_COMPAT_REQUIRE_ALL`` is
set (CI), so that CI never passes by skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from compat_tests.support.paths import SHARED_JVM
from strom.testing.zookeeper import require_all

KAFKA_HOME = Path(os.environ.get("KAFKA_HOME", SHARED_JVM / "kafka-4.0.0"))
# A short-lived JVM: class data sharing, no optimising compiler, a small serial heap.
JVM_FLAGS = ["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m"]


def java_unavailable(*, javac: bool = False, needs: str = "libs") -> str | None:
    """Why Java (with ``javac``: and the compiler) or ``KAFKA_HOME/needs`` is missing, or None."""
    if shutil.which("java") is None:
        return "no java on PATH (Debian: openjdk-17-jre-headless)"
    if javac and shutil.which("javac") is None:
        return "no javac on PATH (Debian: openjdk-17-jdk-headless)"
    if not (KAFKA_HOME / needs).exists():
        return f"{needs} of Kafka 4.0 not found under {KAFKA_HOME} (set KAFKA_HOME)"
    return None


def skip_unless_available(why: str | None) -> None:
    """Within a test or fixture: skip when ``why`` names something missing; under
    STROM_COMPAT_REQUIRE_ALL, fail instead."""
    if why:
        if require_all():
            pytest.fail(f"required by STROM_COMPAT_REQUIRE_ALL: {why}")
        pytest.skip(why)


def kafka_tool(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """One of Kafka's ``bin/*.sh`` scripts, with a small heap and a quick-starting JVM."""
    env = {
        **os.environ,
        "KAFKA_HOME": str(KAFKA_HOME),
        "KAFKA_HEAP_OPTS": "-Xmx256m",
        "KAFKA_OPTS": "-XX:TieredStopAtLevel=1 -Xshare:auto",
    }
    return subprocess.run(
        [str(KAFKA_HOME / "bin" / name), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
