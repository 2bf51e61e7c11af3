"""compat_tests/support/cluster.py's helpers that need no broker."""

from __future__ import annotations

import pytest

from compat_tests.support.cluster import wait


def test_wait_asks_again_while_the_metadata_lacks_the_partition():
    answers = iter([KeyError(0), KeyError(0), None, "ready"])

    def predicate():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer  # partition_meta on a broker that has not yet heard of the topic
        return answer

    assert wait(predicate, 10, "the partition", interval_s=0) == "ready"


def test_wait_times_out_naming_the_last_lookup_error():
    with pytest.raises(AssertionError, match="waiting for the partition") as raised:
        wait(lambda: {}[0], 0.05, "the partition", interval_s=0.01)
    assert isinstance(raised.value.__cause__, KeyError)
