"""Where the compat tests find the repository, the JVM side beside it and the kafkajs project.

``../shared/jvm`` (Kafka 4.0's jars and tools, the reference Kafka's start script) sits beside the
repository; ``STROM_JVM_DIR`` points elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPAT_TESTS = REPO_ROOT / "compat_tests"
SHARED_JVM = Path(os.environ.get("STROM_JVM_DIR", REPO_ROOT.parent / "shared" / "jvm"))
# the node project of the kafkajs driver and scripts (`npm ci` there installs kafkajs)
KAFKAJS_DIR = COMPAT_TESTS / "kafkajs"
