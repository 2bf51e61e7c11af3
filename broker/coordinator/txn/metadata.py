"""A transactional id's state, as Kafka's TransactionMetadata.

State machine (ids are what `__transaction_state` stores; names what DescribeTransactions and
ListTransactions show)::

    Empty(0) ──AddPartitions/AddOffsets──▶ Ongoing(1) ──EndTxn(commit)──▶ PrepareCommit(2)
      ▲                                     │   │                              │ markers written
      │                                     │   └─EndTxn(abort), timeout,──▶ PrepareAbort(3)
      │                                     │     fencing InitProducerId        │ markers written
      │                                     ▼                                   ▼
      └──InitProducerId── CompleteCommit(4) / CompleteAbort(5) ◀────────────────┘
    CompleteCommit/CompleteAbort ──AddPartitions──▶ Ongoing
    Empty/Complete* ──transactional.id.expiration.ms──▶ Dead(6) (a tombstone; the id is forgotten)
    Ongoing ──InitProducerId from a new instance or timeout──▶ PrepareEpochFence(7): the epoch is
      bumped (fencing the old instance) and the transaction aborted with the new epoch; the
      fence itself is in memory only, what is written is PrepareAbort with the bumped epoch.

Transaction version 2 (KIP-890 part 2; EndTxn v5 and the Produce v12 / TxnOffsetCommit v5 that
add partitions implicitly): every EndTxn bumps the epoch. Prepare* carries the bumped epoch (the
markers are written with it, so a late batch of the ended transaction is fenced), the previous
epoch stays as ``last_producer_epoch`` (an EndTxn retried with it is answered as done). When the
epoch would pass 32766, a new producer id is allocated at Prepare* (``next_producer_id``) and
becomes the producer id, at epoch 0, once the markers are written (Complete*).
``client_transaction_version`` records which protocol the last change came from (2: EndTxn v5 or
a partition added by a broker; 0: the classic requests) and decides how a retried EndTxn is read.

A change is first prepared (``pending`` holds the target), written to `__transaction_state`, and
applied only once the write is replicated; a request meeting a pending change gets
CONCURRENT_TRANSACTIONS and retries. Prepare* states are durable before EndTxn is answered, so
after a crash the new coordinator finishes writing the markers and completes the transaction.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from strom.broker.coordinator.txn.records import TxnLogValue

MAX_EPOCH = 32767  # Short.MAX_VALUE; a producer id is retired once its epoch reaches MAX_EPOCH - 1
NO_PRODUCER_ID = -1
NO_EPOCH = -1


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_display(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

# Which state may follow which (Kafka's TransactionState.validPreviousStates, inverted; Empty and
# Complete* -> PrepareAbort is a transaction version 2 abort of a transaction with nothing added).
VALID_NEXT: dict[TxnState, set[TxnState]] = {
    TxnState.EMPTY: {
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.DEAD,
        TxnState.PREPARE_EPOCH_FENCE,
        TxnState.PREPARE_ABORT,
    },
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.PREPARE_COMMIT: {TxnState.COMPLETE_COMMIT},
    TxnState.PREPARE_ABORT: {TxnState.COMPLETE_ABORT},
    TxnState.COMPLETE_COMMIT: {
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.DEAD,
        TxnState.PREPARE_EPOCH_FENCE,
        TxnState.PREPARE_ABORT,
    },
    TxnState.COMPLETE_ABORT: {
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.DEAD,
        TxnState.PREPARE_EPOCH_FENCE,
        TxnState.PREPARE_ABORT,
    },
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: set(),
}


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID  # previous id/epoch, for KIP-360 retries of InitProducerId
    last_producer_epoch: int = NO_EPOCH
    pending: TransactionMetadata | None = None  # the prepared change being written
    coordinator_epoch: int = 0
    next_producer_id: int = NO_PRODUCER_ID  # TV2: the id that replaces an exhausted one at Complete*
    client_transaction_version: int = 0

    def to_value(self) -> TxnLogValue:
        parts: dict[str, list[int]] = {}
        for topic, index in self.partitions:
            parts.setdefault(topic, []).append(index)
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            parts,
            self.last_update_ms,
            self.start_ms,
            self.last_producer_id,
            self.next_producer_id,
            self.client_transaction_version,
        )

    @classmethod
    def from_value(cls, transactional_id: str, v: TxnLogValue) -> TransactionMetadata:
        state = TxnState(v.status) if v.status in TxnState._value2member_map_ else TxnState.DEAD
        return cls(
            transactional_id,
            v.producer_id,
            v.producer_epoch,
            v.timeout_ms,
            state,
            {(t, p) for t, ps in v.partitions.items() for p in ps},
            v.start_ms,
            v.last_update_ms,
            v.previous_producer_id,
            next_producer_id=v.next_producer_id,
            client_transaction_version=v.client_transaction_version,
        )

    def transit(self, state: TxnState, now_ms: int, **changes: Any) -> TransactionMetadata:
        """A copy in ``state`` (checked against the state machine) with ``changes`` applied."""
        if state not in VALID_NEXT[self.state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.display} -> {state.display}")
        return replace(self, state=state, last_update_ms=now_ms, pending=None, **changes)

    def apply(self, target: TransactionMetadata) -> None:
        for name in (
            "producer_id",
            "producer_epoch",
            "timeout_ms",
            "state",
            "partitions",
            "start_ms",
            "last_update_ms",
            "last_producer_id",
            "last_producer_epoch",
            "next_producer_id",
            "client_transaction_version",
        ):
            setattr(self, name, getattr(target, name))
        self.pending = None

    def is_producer_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1


class IllegalTransition(Exception):
    """A state change the state machine does not allow (a coordinator bug, logged, never raised to clients)."""
