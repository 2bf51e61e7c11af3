"""The reference Kafka 4.0 (``../shared/jvm/kafka-reference.sh``, or under ``STROM_JVM_DIR``) that
the differential tests ask the same questions as Strom: whether it can run here, one started in a
work directory, and one for a test module's fixture.

    @pytest.fixture(scope="module")
    def kafka(tmp_path_factory):
        yield from module_reference(tmp_path_factory)     # (port, its log dir)
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compat_tests.support.paths import SHARED_JVM

REFERENCE_SCRIPT = SHARED_JVM / "kafka-reference.sh"
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 120


def reference_available() -> str | None:
    """Why the reference Kafka cannot run here, or None when it can."""
    if not REFERENCE_SCRIPT.exists():
        return f"no reference Kafka at {REFERENCE_SCRIPT}"
    if shutil.which("java") is None:
        return "no java on PATH (Debian: openjdk-17-jre-headless)"
    return None


def start_reference(workdir: Path) -> int:
    """Start a reference Kafka 4.0 broker in ``workdir``; its port once clients can connect."""
    out = subprocess.run(
        ["bash", str(REFERENCE_SCRIPT), "start", str(workdir)], capture_output=True, text=True, timeout=START_TIMEOUT_S
    )
    if out.returncode != 0:
        raise RuntimeError(f"the reference Kafka did not start: {out.stderr[-2000:]}")
    return int(out.stdout.split()[-2])  # "PORT PID"


def stop_reference(workdir: Path) -> None:
    """Stop the broker of ``workdir`` (the script signals its recorded pid only)."""
    subprocess.run(["bash", str(REFERENCE_SCRIPT), "stop", str(workdir)], capture_output=True, timeout=STOP_TIMEOUT_S)


@contextmanager
def reference_kafka(workdir: Path) -> Iterator[int]:
    """A reference Kafka 4.0 broker in ``workdir``; yields its port, stops it after."""
    port = start_reference(workdir)
    try:
        yield port
    finally:
        stop_reference(workdir)


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
