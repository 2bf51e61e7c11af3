"""The sample user project (compat_tests/packaging/sample_project) passes on its own, with pytest-xdist,
and needs nothing but the installed plugin: with `-p no:strom` its fixtures are gone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).parent / "sample_project"


def _pytest(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _passed(result: subprocess.CompletedProcess) -> int:
    match = re.search(r"(\d+) passed", result.stdout)
    return int(match.group(1)) if match else 0


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist-2"])
def test_sample_project_passes(workers):
    if workers:
        pytest.importorskip("xdist")
    result = _pytest(*(["-n", workers] if workers else []))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert _passed(result) == 11 and "skipped" not in result.stdout.splitlines()[-1], result.stdout[-2000:]


def test_plugin_off_with_no_strom():
    result = _pytest("-p", "no:strom", "tests/test_confluent.py")
    assert result.returncode != 0
    assert "fixture 'strom_broker' not found" in result.stdout or "fixture 'strom_topic' not found" in result.stdout
