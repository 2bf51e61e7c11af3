"""Transaction verification before a leader appends a client's transactional batches (KIP-890).

Transactions are recognised from the batch header attributes alone. A transactional batch whose
producer has no open transaction in the partition (at the batch's epoch) goes to the transaction
coordinator first, as Kafka 4.0's AddPartitionsToTxnManager does (this broker's own coordinator
directly; in a cluster the coordinating broker with AddPartitionsToTxn v4+):

* Produce v12 (transaction version 2, KIP-890 part 2): the coordinator adds the partition to the
  producer's transaction (the client sends no AddPartitionsToTxn);
* older versions (KIP-890 part 1 verification): the partition must already be in the Ongoing
  transaction, else INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11).

An older epoch answers INVALID_PRODUCER_EPOCH; a coordinator that is loading, moved, busy or
unreachable NOT_ENOUGH_REPLICAS (retried by every client; the batch is never accepted
unverified). So a zombie or a confused client cannot open a transaction that would hold the LSO
back forever. A marker written while the answer is awaited (the transaction ended meanwhile)
drops the verification guard the partition's producer state made when the verification began;
the batch is then refused with INVALID_TXN_STATE ("Record was not part of an ongoing
transaction"), as Kafka's log refuses it, instead of being appended after the marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from strom.protocol.errors import ErrorCode
from strom.protocol.records.header import HEADER_SIZE, BatchHeader, parse_header
from strom.storage.log_validator import Records, RecordValidationError
from strom.storage.producer_state import NO_VERIFICATION, VerificationGuard

if TYPE_CHECKING:
    from .partition import Partition

TopicPartition = tuple[str, int]
# The coordinator's answer for a partition and the guard made before asking.
Answers = dict[TopicPartition, tuple[ErrorCode, VerificationGuard]]


class TransactionOwnership(Protocol):
    def ownership_error(self, transactional_id: str) -> ErrorCode | None: ...


class TransactionVerifier(Protocol):
    """What a partition leader asks of the transaction coordinator (`TransactionCoordinator`)."""

    @property
    def state(self) -> TransactionOwnership: ...  # read only: the coordinator's TransactionStateManager

    async def add_partitions(
        self, tid: str, pid: int, epoch: int, partitions: set[TopicPartition], tv2: bool = False
    ) -> ErrorCode: ...

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def ask_elsewhere(
        self, tid: str, pid: int, epoch: int, partitions: list[TopicPartition], add: bool = False
    ) -> dict[TopicPartition, ErrorCode] | None: ...


# What a partition leader answers when the coordinator could not vouch for a transactional batch
# (Kafka's ReplicaManager): retriable coordinator trouble becomes NOT_ENOUGH_REPLICAS, which every
# client retries without a metadata refresh; an unknown producer OUT_OF_ORDER_SEQUENCE_NUMBER.
_RETRIABLE = {
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT,
}


def produce_txn_error(code: ErrorCode, version: int) -> ErrorCode:
    """A coordinator's answer about a transactional batch as Produce ``version`` reports it."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.INVALID_TXN_STATE and version >= 11:
        return ErrorCode.TRANSACTION_ABORTABLE  # "not in the transaction" (KIP-890), Produce v11+
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < 11:
        return ErrorCode.INVALID_TXN_STATE
    if code in _RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code == ErrorCode.UNKNOWN_PRODUCER_ID:
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    return code


def opens_transaction(partition: Partition, header: BatchHeader) -> bool:
    """A transactional batch whose producer has no open transaction at this epoch here."""
    return header.is_transactional and not partition.log.producer_state.has_ongoing_txn(
        header.producer_id, header.producer_epoch
    )


async def ask_coordinator(
    txn: TransactionVerifier | None,
    transactional_id: str | None,
    version: int,
    entries: Sequence[tuple[Partition | None, Records | None]],
) -> Answers:
    """For each partition whose first batch would open a transaction here (read from the first
    batch header only): the coordinator's answer and the verification guard made before asking.
    Produce v12 (transaction version 2) asks it to add the partition, older versions whether it
    was added (KIP-890 verification). A coordinator on another broker is asked with
    AddPartitionsToTxn v4+; one that cannot be reached answers COORDINATOR_NOT_AVAILABLE, so the
    batch is refused as retriable, never accepted unverified.

    While the answer is awaited a marker may end the transaction (the coordinator aborts it, on a
    timeout or for the client); that marker drops the partition's guard for the producer, so the
    append presenting it is refused (Kafka's VerificationGuard) instead of opening a transaction
    the coordinator already considers ended, which would hold the last stable offset back forever."""
    tid = transactional_id
    if not tid or txn is None or (version < 12 and txn.state.ownership_error(tid) is None):
        return {}  # verified here, without waiting, by verify_transaction (the hot path of classic clients)
    asked: dict[tuple[int, int], list[tuple[str, int, VerificationGuard]]] = {}
    for partition, records in entries:
        if partition is None or not partition.is_leader or not records or len(records) < HEADER_SIZE:
            continue
        try:
            header = parse_header(records, 0)
        except Exception:
            continue
        if header.magic != 2 or header.is_control or not opens_transaction(partition, header):
            continue
        asked.setdefault((header.producer_id, header.producer_epoch), []).append(
            (partition.topic, partition.index, partition.log.verification_guard(header.producer_id))
        )
    out: Answers = {}
    add = version >= 12
    for (pid, epoch), asking in asked.items():
        partitions = [(topic, index) for topic, index, _ in asking]
        if txn.state.ownership_error(tid) is None:
            if add:
                code = await txn.add_partitions(tid, pid, epoch, set(partitions), tv2=True)
                found: dict[TopicPartition, ErrorCode] | None = {tp: code for tp in partitions}
            else:
                found = txn.verify_partitions(tid, pid, epoch, partitions)
        else:
            found = await txn.ask_elsewhere(tid, pid, epoch, partitions, add=add)
        for topic, index, guard in asking:
            out[(topic, index)] = ((found or {}).get((topic, index), ErrorCode.COORDINATOR_NOT_AVAILABLE), guard)
    return out


def verify_transaction(
    txn: TransactionVerifier | None,
    transactional_id: str | None,
    partition: Partition,
    headers: Sequence[BatchHeader],
    version: int,
    answers: Answers,
) -> VerificationGuard:
    """Raise RecordValidationError unless every transactional producer here is in an Ongoing
    transaction that holds this partition (asked only when the log knows no open transaction of it
    at its epoch). Returns the verification guard the append must present to the log
    (NO_VERIFICATION when every transaction is open here already)."""
    topic, index = partition.topic, partition.index
    guard = NO_VERIFICATION
    for header in headers:
        if not opens_transaction(partition, header):
            continue
        if not transactional_id:
            raise RecordValidationError(ErrorCode.INVALID_RECORD, "transactional batches need a transactional.id")
        answer = answers.get((topic, index))
        if answer is None:  # a second producer in one request, or one the first header did not show
            # verified now, with no wait before the append: the guard made here is still current then
            guard = partition.log.verification_guard(header.producer_id)
            code = (
                txn.verify_partitions(transactional_id, header.producer_id, header.producer_epoch, [(topic, index)])[
                    (topic, index)
                ]
                if txn is not None and txn.state.ownership_error(transactional_id) is None
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
            )
        else:
            code, guard = answer
        if code != ErrorCode.NONE:
            code = produce_txn_error(code, version)
            message = (
                "Partition was not added to the transaction"
                if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE)
                else f"could not add {topic}-{index} to the transaction of {transactional_id}"
                if version >= 12
                else f"could not verify the transaction of {transactional_id}"
            )
            raise RecordValidationError(code, message)
    return guard
