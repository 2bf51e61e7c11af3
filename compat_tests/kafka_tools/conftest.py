"""Outcomes of this folder's tests go to results.json for the README's table (STROM_RECORD_COMPAT=1)."""

from pathlib import Path

from compat_tests.support.record_results import recorder

pytest_runtest_makereport, pytest_sessionfinish = recorder(
    Path(__file__).resolve().parent, "kafka-tools", "Apache Kafka CLI tools", "4.0.0"
)
