"""The reference Kafkas (``../shared/jvm/kafka-reference.sh`` for 4.0, ``kafka-reference-4.3.sh``
for 4.3.1, or under ``STROM_JVM_DIR``) that the differential tests ask the same questions as Strom:
whether one can run here, one started in a work directory, and one for a test module's fixture.
Every function takes the start script (``REFERENCE_SCRIPT``: 4.0, ``REFERENCE_43_SCRIPT``: 4.3.1).

    @pytest.fixture(scope="module")
    def kafka(tmp_path_factory):
        yield from module_reference(tmp_path_factory)     # (port, its log dir)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compat_tests.support.paths import SHARED_JVM

REFERENCE_SCRIPT = SHARED_JVM / "kafka-reference.sh"
REFERENCE_43_SCRIPT = SHARED_JVM / "kafka-reference-4.3.sh"
# The 4.3.1 broker's libs/ reach the client jar through a relative symlink, which some copies of
# ../shared/jvm keep only as a file holding its target: the jar on CLASSPATH makes either work.
CLIENTS_43_JAR = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 120


def _env(script: Path) -> dict[str, str]:
    env = dict(os.environ)
    if script == REFERENCE_43_SCRIPT and CLIENTS_43_JAR.exists():
        env["CLASSPATH"] = os.pathsep.join(p for p in (str(CLIENTS_43_JAR), env.get("CLASSPATH", "")) if p)
    return env


def reference_available(script: Path = REFERENCE_SCRIPT) -> str | None:
    """Why the reference Kafka cannot run here, or None when it can."""
    if not script.exists():
        return f"no reference Kafka at {script}"
    if shutil.which("java") is None:
        return "no java on PATH (Debian: openjdk-17-jre-headless)"
    return None


def start_reference(workdir: Path, script: Path = REFERENCE_SCRIPT) -> int:
    """Start a reference Kafka broker in ``workdir``; its port once clients can connect."""
    out = subprocess.run(
        ["bash", str(script), "start", str(workdir)],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        env=_env(script),
    )
    if out.returncode != 0:
        raise RuntimeError(f"the reference Kafka did not start: {out.stderr[-2000:]}")
    return int(out.stdout.split()[-2])  # "PORT PID"


def stop_reference(workdir: Path, script: Path = REFERENCE_SCRIPT) -> None:
    """Stop the broker of ``workdir`` (the script signals its recorded pid only)."""
    subprocess.run(["bash", str(script), "stop", str(workdir)], capture_output=True, timeout=STOP_TIMEOUT_S)


@contextmanager
def reference_kafka(workdir: Path, script: Path = REFERENCE_SCRIPT) -> Iterator[int]:
    """A reference Kafka broker in ``workdir``; yields its port, stops it after."""
    port = start_reference(workdir, script)
    try:
        yield port
    finally:
        stop_reference(workdir, script)


def module_reference(tmp_path_factory) -> Iterator[tuple[int, Path]]:
    """For a module-scoped fixture (``yield from``): a reference Kafka of the module's own, as
    (port, log dir). Where it cannot run or start the test skips, or fails under
    STROM_COMPAT_REQUIRE_ALL (CI)."""
    from compat_tests.support.jvm import skip_unless_available  # pytest: not for the report's command line

    skip_unless_available(reference_available())
    work = tmp_path_factory.mktemp("kafka-reference")
    try:
        port = start_reference(work)
    except RuntimeError as exc:
        stop_reference(work)
        skip_unless_available(str(exc))
        raise
    try:
        yield port, work / "data"
    finally:
        stop_reference(work)
