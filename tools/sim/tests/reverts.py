"""The defects of issue 21 ("Correctness under faults") put back, one monkeypatch each, so the
tests can show the simulation finds each when its fix is reverted. Nothing here is used by the
broker or by the simulation itself."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.broker.replica import fetcher, purgatory
from strom.broker.replica.partition import Partition
from strom.protocol.errors import ErrorCode
from strom.storage.log import Log
from strom.storage.producer_state import AppendOrigin, ProducerStateManager


def coordinator_appends_as_client(mp: pytest.MonkeyPatch) -> None:
    """Coordinator appends (group offsets, TxnOffsetCommit's batches, markers) go through the
    producer duplicate check as a client's do."""
    original = Partition.append

    def append(self: Partition, records: Any, headers: Any, origin: Any = None, verification_guard: Any = None) -> Any:
        return original(self, records, headers, AppendOrigin.CLIENT, verification_guard)

    mp.setattr(Partition, "append", append)


def acks_by_high_watermark_only(mp: pytest.MonkeyPatch) -> None:
    """An acks=all wait answers NONE once the high watermark passes, led or not."""

    def status(self: Any) -> ErrorCode | None:
        return ErrorCode.NONE if self.partition.high_watermark >= self.required else None

    mp.setattr(purgatory.PendingAppend, "status", status)


def empty_epoch_kept_at_log_end(mp: pytest.MonkeyPatch) -> None:
    """truncate_to at the log end keeps an epoch-cache entry starting there (idle followers)."""
    original = Log.truncate_to

    def truncate_to(self: Log, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        original(self, offset)

    mp.setattr(Log, "truncate_to", truncate_to)


def truncation_at_leader_offset(mp: pytest.MonkeyPatch) -> None:
    """A diverging follower cuts at the leader's end offset even for an epoch it never had."""

    def truncation_offset(plog: Log, leader_epoch: int, leader_end_offset: int) -> int:
        return min(leader_end_offset, plog.log_end_offset)

    mp.setattr(fetcher, "truncation_offset", truncation_offset)


def isr_expansion_at_high_watermark(mp: pytest.MonkeyPatch) -> None:
    """A follower rejoins the ISR at the high watermark, before the leader epoch's start (KAFKA-7128)."""

    def caught_up_replicas(self: Partition) -> list[int]:
        if not self.is_leader or self.leader_epoch_start_offset is None:
            return []
        hw = self.log.high_watermark
        return [
            r for r, f in self.followers.items() if r not in self.isr and r in self.replicas and f.log_end_offset >= hw
        ]

    mp.setattr(Partition, "caught_up_replicas", caught_up_replicas)


def no_verification_guard(mp: pytest.MonkeyPatch) -> None:
    """A transactional append after the coordinator was asked needs no guard (KIP-890 part 1)."""
    mp.setattr(ProducerStateManager, "check_verified", lambda self, headers, guard: None)


def retention_past_high_watermark(mp: pytest.MonkeyPatch) -> None:
    """Retention deletes segments above the high watermark."""
    mp.setattr(Log, "_below_high_watermark", lambda self: len(self._segments) - 1)


REVERTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "coordinator-appends-as-client": coordinator_appends_as_client,
    "acks-by-high-watermark-only": acks_by_high_watermark_only,
    "empty-epoch-kept-at-log-end": empty_epoch_kept_at_log_end,
    "truncation-at-leader-offset": truncation_at_leader_offset,
    "isr-expansion-at-high-watermark": isr_expansion_at_high_watermark,
    "no-verification-guard": no_verification_guard,
    "retention-past-high-watermark": retention_past_high_watermark,
}


@contextlib.contextmanager
def reverted(name: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        REVERTS[name](mp)
        yield
