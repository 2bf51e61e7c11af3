"""The differential scenarios for the Kafka 4.3.1 reference (``kafka-reference-4.3.sh``).

Kafka 4.0 (``scenarios.py``) is asked everything up to the versions it serves; this list asks
Kafka 4.3.1 what only it can answer: the versions Kafka 4.1-4.3 added to existing APIs (the same
scenarios ``scenarios.py`` builds, for those versions only), Kafka 4.3's configuration checks, and
the sections other parts add (share groups, streams groups). The shared world (``WORLD``) is built
first, as for Kafka 4.0. Differences are explained in ``FINDINGS-4.3.md``.

Adding a section: write a function returning ``list[Scenario]`` (with ``sc``/``req``/``setup`` and
the body helpers of ``scenarios.py``; name topics and groups after the scenario with ``{s}``), in
its own module if it is large, and append it to ``SECTIONS`` below. Run it with
``python -m compat_tests.differential.report --reference 4.3`` (writes REPORT-4.3.md); the test is
``test_differential_43.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from compat_tests.differential import scenarios as base
from compat_tests.differential.harness import Scenario, served_within
from compat_tests.differential.scenarios import STABLE, WORLD, A, create_topic, describe_configs_body, req, sc
from compat_tests.differential.scenarios_share import share_scenarios
from compat_tests.differential.scenarios_share_coordinator import share_coordinator_scenarios

# The versions Strom serves that Kafka 4.3.1 also serves and Kafka 4.0 does not: {api: (low, high)}.
NEWER_THAN_4_0 = {
    api: (served_within("4.0")[api][1] + 1, hi)
    for api, (_lo, hi) in served_within("4.3").items()
    if api in served_within("4.0") and hi > served_within("4.0")[api][1]
}


@contextmanager
def only_versions(ranges: dict[int, tuple[int, int]]) -> Iterator[None]:
    """``scenarios.py``'s version loops over ``ranges`` only (APIs outside it: none)."""
    saved = base.SUPPORTED_RANGE
    base.SUPPORTED_RANGE = ranges
    try:
        yield
    finally:
        base.SUPPORTED_RANGE = saved


def newer_versions() -> list[Scenario]:
    """Produce v13, Fetch v18, ListOffsets v11, OffsetCommit/OffsetFetch v10: the scenarios of
    their older versions, sent in the new ones (topics by id where the version says so), plus the
    cases only the new versions have."""
    with only_versions(NEWER_THAN_4_0):
        out = [
            s
            for part in (base.produce_scenarios(), base.fetch_scenarios(), base.list_offsets(), base.offsets())
            for s in part
            if any(st.version >= NEWER_THAN_4_0.get(st.api, (1 << 15,))[0] for st in s.steps)
        ]
    unknown_id = bytes(range(1, 17))
    produce = base.produce_body("w-one", 0, base.batch(2))
    produce["topic_data"][0]["topic_id"] = unknown_id
    out.append(sc("produce-v13-unknown-topic-id", req(A.PRODUCE, 13, produce)))
    fetch = base.fetch_body(18, "w-one")
    fetch["topics"][0]["topic_id"] = unknown_id
    out.append(sc("fetch-v18-unknown-topic-id", req(A.FETCH, 18, fetch)))
    for label, ts in (("latest-tiered", -5), ("earliest-pending-upload", -6), ("unknown-special", -7)):
        for v in (10, 11):
            out.append(sc(f"list_offsets-v{v}-{label}", req(A.LIST_OFFSETS, v, base.list_offsets_body("w-one", 0, ts))))
    commit = base.commit_body("{s}", "w-one", 0, 3)
    commit["topics"].append({**commit["topics"][0], "name": "", "topic_id": unknown_id})
    fetch_offsets = base.offset_fetch_body(10, "{s}", [("w-one", [0, 1])])
    fetch_offsets["groups"][0]["topics"].append({"name": "", "topic_id": unknown_id, "partition_indexes": [0]})
    out.append(
        sc(
            "offset_commit-v10-unknown-topic-id",
            base.setup(A.FIND_COORDINATOR, 3, {"key": "{s}", "key_type": 0}),
            req(A.OFFSET_COMMIT, 10, commit),
            req(A.OFFSET_FETCH, 10, fetch_offsets),
            req(A.OFFSET_FETCH, 10, base.offset_fetch_body(10, "{s}", None)),
        )
    )
    out.append(
        sc(
            "api_versions-v4-kafka-4.3",
            req(A.API_VERSIONS, 4, {"client_software_name": "strom-diff", "client_software_version": "1.0"}),
        )
    )
    return out


def config_checks() -> list[Scenario]:
    """Topic configuration checks where Kafka 4.3 is stricter than 4.0: ``segment.bytes`` below
    1 MiB (and what the internal override, ``internal.segment.bytes``, allows instead)."""
    out = []
    for label, configs in (
        ("segment-bytes-below-1mib", {"segment.bytes": "1048575"}),
        ("segment-bytes-1mib", {"segment.bytes": "1048576"}),
        ("segment-bytes-14", {"segment.bytes": "14"}),
        ("internal-segment-bytes", {"internal.segment.bytes": "1024"}),
    ):
        out.append(
            sc(
                f"create_topics-v7-{label}",
                create_topic("{s}", configs=configs, compare=True),
                req(
                    A.DESCRIBE_CONFIGS, 4, describe_configs_body(2, "{s}", ["segment.bytes", "internal.segment.bytes"])
                ),
            )
        )
    incremental = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "w-one",
                "configs": [{"name": "segment.bytes", "config_operation": 0, "value": "1000"}],
            }
        ],
        "validate_only": True,
    }
    out.append(
        sc("incremental_alter_configs-v1-segment-bytes-below-1mib", req(A.INCREMENTAL_ALTER_CONFIGS, 1, incremental))
    )
    legacy = {
        "resources": [
            {"resource_type": 2, "resource_name": "w-one", "configs": [{"name": "segment.bytes", "value": "1000"}]}
        ],
        "validate_only": True,
    }
    out.append(sc("alter_configs-v2-segment-bytes-below-1mib", req(A.ALTER_CONFIGS, 2, legacy)))
    return out


# The sections, in order. Share and streams groups add theirs here.
SECTIONS: list[Callable[[], list[Scenario]]] = [
    newer_versions,
    config_checks,
    share_scenarios,
    share_coordinator_scenarios,
]


def all_scenarios_43() -> list[Scenario]:
    out = [WORLD, STABLE]
    for section in SECTIONS:
        out.extend(section())
    names = [s.name for s in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"scenario names must be unique: {sorted(dupes)}")
    return out
