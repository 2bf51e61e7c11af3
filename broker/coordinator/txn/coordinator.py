"""TransactionCoordinator: Kafka's transaction protocol for transactional producers.

Requests (each answered once the change is durable in `__transaction_state`):

* InitProducerId(transactional.id, timeout): a new id gets a producer id and epoch 0; a known one
  gets its epoch bumped, fencing older instances (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH before
  InitProducerId v4). An Ongoing transaction is aborted first with the bumped epoch and the caller
  told CONCURRENT_TRANSACTIONS (it retries and gets a fresh epoch once the abort is complete).
  KIP-360: a producer that sends its current id and epoch gets a bump; one that sends the id and
  epoch it had before the last bump (a retry) gets the current ones back. An epoch at
  32766 rotates to a new producer id. The timeout must lie in (0, transaction.max.timeout.ms],
  else INVALID_TRANSACTION_TIMEOUT.
* AddPartitionsToTxn / AddOffsetsToTxn: Empty/Complete* -> Ongoing (start time set), or the
  partitions are added to the Ongoing transaction. v4+ batches several transactions and may only
  verify (what a partition leader asks before accepting a transaction's first batch).
* EndTxn: Ongoing -> PrepareCommit/PrepareAbort, answered; then markers go to every partition
  (``coordinator.txn.markers``) and the state becomes CompleteCommit/CompleteAbort. Retried EndTxn calls
  get NONE (already complete) or CONCURRENT_TRANSACTIONS (still completing).
* Transaction version 2 (EndTxn v5, KIP-890 part 2): the epoch is bumped at Prepare* and the
  answer carries the producer id and epoch the producer continues with; at epoch 32766 a new
  producer id is allocated and takes over (epoch 0) once the markers are written. A retry with the
  epoch before the bump is answered as done; an abort with nothing added (Empty or Complete*) is
  allowed and ends at once. Partitions are added by partition leaders (Produce v12, TxnOffsetCommit
  v5, via AddPartitionsToTxn v4+ from a broker, which is ``add_partitions(..., tv2=True)``), as
  Kafka 4.0's AddPartitionsToTxnManager does.

Errors follow Kafka: unknown id or another producer id -> INVALID_PRODUCER_ID_MAPPING; an older
epoch -> PRODUCER_FENCED; a change in flight -> CONCURRENT_TRANSACTIONS; a call that does not fit
the state -> INVALID_TXN_STATE; not the coordinator -> NOT_COORDINATOR.

Timers (``run``): every transaction.abort.timed.out.transaction.cleanup.interval.ms, Ongoing
transactions older than their timeout are aborted by the coordinator with a bumped epoch (the
producer is fenced); every transaction.remove.expired.transaction.cleanup.interval.ms, ids idle
(Empty/Complete*) for transactional.id.expiration.ms are removed with a tombstone.

Crash behaviour: a Prepare* state is written before EndTxn is answered, so a coordinator that
restarts (or a new leader of the partition) loads it and writes the markers again, then completes
the transaction; an Ongoing transaction that was never ended is aborted by the timeout. Data of a
transaction is thus always wholly committed or wholly aborted. A partition of
`__transaction_state` loaded past its high watermark is served (and its Prepare* transactions
completed) only once what was loaded is committed (``TransactionStateManager.await_committed``):
an uncommitted record may be lost at the next election, and a coordinator that had vouched for it
(a partition "already in the transaction", markers of a PrepareCommit) would leave a hanging or
half-committed transaction behind.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from strom.broker.coordinator.runtime import CoordinatorRuntime
from strom.broker.coordinator.txn.markers import ClientFactory, MarkerClient, TransactionMarkerChannelManager
from strom.broker.coordinator.txn.metadata import MAX_EPOCH, NO_EPOCH, TransactionMetadata, TxnState
from strom.broker.coordinator.txn.state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager, TxnSettings
from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import partition_for
from strom.protocol.schema import ApiKey

log = logging.getLogger("strom.txn")

OFFSETS_TOPIC = "__consumer_offsets"


TV2 = 2  # transaction.version 2: EndTxn v5, partitions added by partition leaders


@dataclass
class EndResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    def __init__(
        self,
        port: CoordinatorRuntime,
        settings: TxnSettings,
        client_factory: ClientFactory | None = None,
        offsets_partitions: Callable[[], int] = lambda: 50,
    ) -> None:
        self.port = port
        self.settings = settings
        self.state = TransactionStateManager(port, settings)
        self.markers = TransactionMarkerChannelManager(port, client_factory)
        self._offsets_partitions = offsets_partitions
        self._nursery: trio.Nursery | None = None
        self._pending_tasks: list[tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]] = []
        self._verify_clients: dict[int, MarkerClient] = {}
        self.active = True

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Standalone start-up: coordinate every partition of `__transaction_state`."""
        self.follow_leadership()

    def follow_leadership(self) -> None:
        gained, _ = self.state.follow_leadership()
        for index in gained:
            if index in self.state.loading:  # loaded past its high watermark: wait for the commit
                self._start(self._serve_when_committed, index, self.state.owned[index])
            else:
                self._complete_prepared(index)

    async def _serve_when_committed(self, index: int, epoch: int) -> None:
        if await self.state.await_committed(index, epoch):
            self._complete_prepared(index)

    def _complete_prepared(self, index: int) -> None:
        """Write the markers of the loaded Prepare* transactions of partition ``index``."""
        for tid, meta in self.state.txns.items():
            if (
                meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
                and self.state.partition_of(tid) == index
            ):
                meta.coordinator_epoch = self.state.coordinator_epoch(tid)
                self._schedule_completion(tid)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for work, arg in self._pending_tasks:
                nursery.start_soon(work, *arg)
            self._pending_tasks.clear()
            nursery.start_soon(self._timer, self.settings.abort_interval_ms, self.abort_timed_out)
            nursery.start_soon(self._timer, self.settings.remove_interval_ms, self.expire_transactional_ids)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
                with trio.CancelScope(shield=True):
                    await self.markers.close()
                    for client in self._verify_clients.values():
                        await client.close()

    def shutdown(self) -> None:
        self.active = False

    async def _timer(self, interval_ms: int, work: Callable[[], Awaitable[object]]) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception:
                log.exception("transaction coordinator timer %s failed; will try again", work.__name__)

    def _start(self, work: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``work(*args)`` in the coordinator's nursery (once ``run`` has started it)."""
        if self._nursery is not None:
            self._nursery.start_soon(work, *args)
        else:
            self._pending_tasks.append((work, args))

    def _schedule_completion(self, tid: str) -> None:
        self._start(self._complete, tid)

    # ------------------------------------------------------------------ helpers
    def _error(self, tid: str | None) -> ErrorCode | None:
        if not self.active:
            return ErrorCode.NOT_COORDINATOR
        if not tid:
            return ErrorCode.INVALID_REQUEST
        return self.state.ownership_error(tid)

    def _check_producer(self, meta: TransactionMetadata | None, pid: int, epoch: int) -> ErrorCode | None:
        if meta is None or meta.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    async def _persist(self, meta: TransactionMetadata, target: TransactionMetadata) -> ErrorCode:
        meta.pending = target
        try:
            code = await self.state.write(meta.transactional_id, target)
        finally:
            if meta.pending is target:
                meta.pending = None
        if code == ErrorCode.NONE and self.state.txns.get(meta.transactional_id) is meta:
            meta.apply(target)
        elif code == ErrorCode.NONE:
            code = ErrorCode.NOT_COORDINATOR
        return code

    def now(self) -> int:
        return self.port.now_ms()

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, tid: str, timeout_ms: int, pid: int = -1, epoch: int = -1) -> InitResult:
        if not tid:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.settings.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error = self._error(tid)
        if error is not None:
            return InitResult(error)
        meta = self.state.txns.get(tid)
        now = self.now()
        if meta is None:
            new_pid = await self.port.allocate_producer_id()
            meta = self.state.txns.get(tid)
            if meta is None:
                meta = TransactionMetadata(
                    tid,
                    new_pid,
                    NO_EPOCH,
                    timeout_ms,
                    TxnState.EMPTY,
                    last_update_ms=now,
                    coordinator_epoch=self.state.coordinator_epoch(tid),
                )
                self.state.txns[tid] = meta
        if meta.pending is not None:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        expected = (pid, epoch) if pid >= 0 and meta.producer_epoch != NO_EPOCH else None
        if expected is not None and expected != (meta.producer_id, meta.producer_epoch):
            if expected == (meta.last_producer_id, meta.last_producer_epoch) and meta.state in (
                TxnState.EMPTY,
                TxnState.COMPLETE_COMMIT,
                TxnState.COMPLETE_ABORT,
            ):
                return InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            return InitResult(ErrorCode.PRODUCER_FENCED)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state == TxnState.ONGOING:
            await self._fence_and_abort(meta, "a new producer instance called InitProducerId")
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state == TxnState.DEAD:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.is_producer_epoch_exhausted():
            new_pid, new_epoch = await self.port.allocate_producer_id(), 0
        elif meta.producer_epoch == NO_EPOCH:
            new_pid, new_epoch = meta.producer_id, 0
        else:
            new_pid, new_epoch = meta.producer_id, meta.producer_epoch + 1
        target = meta.transit(
            TxnState.EMPTY,
            now,
            producer_id=new_pid,
            producer_epoch=new_epoch,
            timeout_ms=timeout_ms,
            partitions=set(),
            start_ms=-1,
            last_producer_id=meta.producer_id,
            last_producer_epoch=meta.producer_epoch,
        )
        code = await self._persist(meta, target)
        if code != ErrorCode.NONE:
            if meta.producer_epoch == NO_EPOCH and self.state.txns.get(tid) is meta:
                del self.state.txns[tid]  # never written: forget the half-made id
            return InitResult(code)
        log.info("transactional.id=%s initialised: producer_id=%d epoch=%d", tid, new_pid, new_epoch)
        return InitResult(ErrorCode.NONE, new_pid, new_epoch)

    async def _fence_and_abort(self, meta: TransactionMetadata, why: str) -> ErrorCode:
        """Bump the epoch (fencing the current producer) and abort the Ongoing transaction.

        As Kafka 4.0 with transaction version 2 finalized: the fence bumps the epoch and the abort,
        written the TV2 way, bumps it again; the markers carry the second one. So neither the
        fenced epoch nor the one before it can pass for a retry of this abort (EndTxn v5) or of an
        InitProducerId (KIP-360): the fenced producer gets PRODUCER_FENCED."""
        now = self.now()
        fenced = meta.producer_epoch if meta.is_producer_epoch_exhausted() else meta.producer_epoch + 1
        epoch = min(fenced + 1, MAX_EPOCH)
        fence = meta.transit(TxnState.PREPARE_EPOCH_FENCE, now)
        target = fence.transit(
            TxnState.PREPARE_ABORT,
            now,
            producer_epoch=epoch,
            last_producer_id=meta.producer_id,
            last_producer_epoch=fenced,
            next_producer_id=-1,
            client_transaction_version=TV2,
        )
        log.info(
            "aborting the transaction of transactional.id=%s producer_id=%d (%s); epoch %d -> %d",
            meta.transactional_id,
            meta.producer_id,
            why,
            meta.producer_epoch,
            epoch,
        )
        code = await self._persist(meta, target)
        if code == ErrorCode.NONE:
            self._schedule_completion(meta.transactional_id)
        return code

    # ------------------------------------------------------------------ AddPartitions / AddOffsets
    async def add_partitions(
        self, tid: str, pid: int, epoch: int, partitions: set[tuple[str, int]], tv2: bool = False
    ) -> ErrorCode:
        """AddPartitionsToTxn / AddOffsetsToTxn (``tv2``: added by a partition leader for a
        transaction version 2 producer, whose next EndTxn is read the TV2 way)."""
        error = self._error(tid)
        if error is not None:
            return error
        meta = self.state.txns.get(tid)
        error = self._check_producer(meta, pid, epoch)
        if error is not None:
            return error
        assert meta is not None  # _check_producer refuses an unknown transactional id
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.INVALID_TXN_STATE
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return ErrorCode.NONE
        now = self.now()
        version = TV2 if tv2 else 0
        if meta.state == TxnState.ONGOING:
            target = meta.transit(
                TxnState.ONGOING, now, partitions=meta.partitions | partitions, client_transaction_version=version
            )
        else:
            target = meta.transit(
                TxnState.ONGOING, now, partitions=set(partitions), start_ms=now, client_transaction_version=version
            )
        return await self._persist(meta, target)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, partition_for(group_id, self._offsets_partitions())

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only: whether each partition is in the Ongoing transaction."""
        error = self._error(tid)
        meta = self.state.txns.get(tid)
        if error is None:
            error = self._check_producer(meta, pid, epoch)
        if error is not None:
            return {tp: error for tp in partitions}
        assert meta is not None  # _check_producer refuses an unknown transactional id
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return {tp: ErrorCode.CONCURRENT_TRANSACTIONS for tp in partitions}
        # as Kafka 4.0: a partition not in the transaction is TRANSACTION_ABORTABLE (a partition
        # leader tells clients older than Produce v11 / TxnOffsetCommit v4 INVALID_TXN_STATE)
        ongoing = meta.state == TxnState.ONGOING
        return {
            tp: ErrorCode.NONE if ongoing and tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
            for tp in partitions
        }

    async def ask_elsewhere(
        self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]], add: bool = False
    ) -> dict[tuple[str, int], ErrorCode] | None:
        """Ask the broker coordinating ``tid``, as a partition leader does before a transaction's
        first batch: AddPartitionsToTxn v5 adding the partitions (``add``, transaction version 2)
        or v4 verify_only. None if it cannot be asked now (the caller refuses the batch as
        retriable)."""
        leader = self.state.coordinator_of(tid)
        address = self.port.endpoint(leader) if leader is not None and leader != self.port.node_id else None
        factory = self.markers.client_factory
        if leader is None or address is None or factory is None:
            log.info("transactional.id=%s: its coordinator (broker %s) is not known or not reachable now", tid, leader)
            return None
        client = self._verify_clients.get(leader)
        if client is None:
            client = self._verify_clients[leader] = factory(*address)
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        body = {
            "transactions": [
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": not add,
                    "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
                }
            ]
        }
        try:
            response = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 5 if add else 4, body, timeout_s=5)
        except Exception as exc:  # an unreachable coordinator: the batch is refused, retriable
            log.info("could not ask broker %s about transactional.id=%s: %s", leader, tid, exc)
            self._verify_clients.pop(leader, None)
            return None
        if response.error_code:
            return {tp: ErrorCode(response.error_code) for tp in partitions}
        out = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    out[(topic.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        return out

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, tv2: bool = False) -> EndResult:
        """EndTxn; ``tv2`` for v5 (transaction version 2: the epoch is bumped, the answer carries
        the producer id and epoch to continue with)."""
        error = self._error(tid)
        if error is not None:
            return EndResult(error)
        meta = self.state.txns.get(tid)
        if meta is None:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        # read the TV2 way when both this request (v5) and the transaction's last change are TV2
        v2_state = tv2 and meta.client_transaction_version >= TV2
        state = meta.state
        # a TV2 retry: the epoch before the bump, or the last epoch of a producer id that rotated
        retry_bump = v2_state and meta.producer_epoch == epoch + 1
        retry_overflow = (
            v2_state
            and meta.last_producer_id == pid
            and meta.producer_id != pid
            and epoch == MAX_EPOCH - 1
            and meta.producer_epoch == 0
        )
        if meta.producer_id != pid and not retry_overflow:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and v2_state:
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        retry = False
        if v2_state and state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and (retry_bump or retry_overflow):
            retry = True
        elif epoch != meta.producer_epoch:
            return EndResult(ErrorCode.PRODUCER_FENCED)
        if meta.pending is not None:
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        current = EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch) if tv2 else EndResult(ErrorCode.NONE)
        if retry:
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            return current if state == done else EndResult(ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.ONGOING:
            return await self._prepare_end(meta, commit, tv2)
        if tv2 and not commit and state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            # TV2: a producer may abort a transaction it never added anything to
            return await self._prepare_end(meta, False, True)
        if v2_state and state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return EndResult(ErrorCode.INVALID_TXN_STATE)  # the same epoch again is a new transaction
        if state == TxnState.COMPLETE_COMMIT:
            return current if commit else EndResult(ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.COMPLETE_ABORT:
            return current if not commit else EndResult(ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.PREPARE_COMMIT:
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.PREPARE_ABORT:
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE)
        return EndResult(ErrorCode.INVALID_TXN_STATE)

    async def _prepare_end(self, meta: TransactionMetadata, commit: bool, tv2: bool) -> EndResult:
        """Ongoing (or, TV2 abort, Empty/Complete*) -> Prepare*, durable; markers follow."""
        tid = meta.transactional_id
        now = self.now()
        changes: dict[str, Any] = {}
        if tv2:
            next_pid = -1
            if meta.is_producer_epoch_exhausted():
                next_pid = await self.port.allocate_producer_id()
                if meta.pending is not None or self.state.txns.get(tid) is not meta:
                    return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            changes = dict(
                producer_epoch=meta.producer_epoch + 1,
                last_producer_epoch=meta.producer_epoch,
                next_producer_id=next_pid,
                client_transaction_version=TV2,
            )
            if meta.state != TxnState.ONGOING:  # an abort with nothing added: it starts now
                changes.update(partitions=set(), start_ms=now)
        else:
            changes = dict(client_transaction_version=0)
        target = meta.transit(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now, **changes)
        code = await self._persist(meta, target)
        if code != ErrorCode.NONE:
            return EndResult(code)
        if tv2:
            answer = (
                (target.next_producer_id, 0)
                if target.next_producer_id >= 0
                else (target.producer_id, target.producer_epoch)
            )
        else:
            answer = (-1, -1)
        if not meta.partitions:
            await self._complete(tid)  # nothing to mark: complete before answering, as Kafka does
        else:
            self._schedule_completion(tid)
        return EndResult(ErrorCode.NONE, *answer)

    async def _complete(self, tid: str) -> None:
        """Write the markers of a Prepare* transaction, then CompleteCommit/CompleteAbort."""
        meta = self.state.txns.get(tid)
        if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return
        commit = meta.state == TxnState.PREPARE_COMMIT
        pid, epoch = meta.producer_id, meta.producer_epoch
        coordinator_epoch = self.state.coordinator_epoch(tid)

        def still_valid() -> bool:
            current = self.state.txns.get(tid)
            return (
                current is meta
                and meta.producer_id == pid
                and meta.producer_epoch == epoch
                and self.state.coordinator_epoch(tid) == coordinator_epoch
                and self.active
            )

        if not await self.markers.write_markers(
            pid, epoch, commit, coordinator_epoch, set(meta.partitions), still_valid
        ):
            log.info("transactional.id=%s: coordinator moved before its markers were written", tid)
            return
        backoff = 0.1
        while still_valid():
            if meta.pending is not None:
                await trio.sleep(backoff)
                continue
            changes = {}
            if meta.client_transaction_version >= TV2 and meta.next_producer_id >= 0:
                # the exhausted producer id retires: its successor starts at epoch 0
                changes = dict(
                    producer_id=meta.next_producer_id,
                    producer_epoch=0,
                    next_producer_id=-1,
                    last_producer_id=meta.producer_id,
                    last_producer_epoch=meta.producer_epoch,
                )
            target = meta.transit(
                TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, self.now(), partitions=set(), **changes
            )
            code = await self._persist(meta, target)
            if code == ErrorCode.NONE:
                log.debug("transactional.id=%s producer_id=%d %s", tid, pid, "committed" if commit else "aborted")
                return
            if code == ErrorCode.NOT_COORDINATOR:
                return
            await trio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    # ------------------------------------------------------------------ timers
    async def abort_timed_out(self) -> int:
        """Abort Ongoing transactions older than their timeout (the producer is fenced)."""
        now = self.now()
        count = 0
        for meta in list(self.state.txns.values()):
            if (
                meta.state == TxnState.ONGOING
                and meta.pending is None
                and meta.start_ms >= 0
                and now > meta.start_ms + meta.timeout_ms
                and self.state.ownership_error(meta.transactional_id) is None
            ):
                if await self._fence_and_abort(meta, f"timed out after {meta.timeout_ms} ms") == ErrorCode.NONE:
                    count += 1
        return count

    async def expire_transactional_ids(self) -> int:
        now = self.now()
        count = 0
        for meta in list(self.state.txns.values()):
            if (
                meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                and meta.pending is None
                and now - meta.last_update_ms > self.settings.id_expiration_ms
                and self.state.ownership_error(meta.transactional_id) is None
            ):
                dead = meta.transit(TxnState.DEAD, now)
                meta.pending = dead
                code = await self.state.write(meta.transactional_id, None)
                meta.pending = None
                if code == ErrorCode.NONE:
                    meta.apply(dead)
                    self.state.txns.pop(meta.transactional_id, None)
                    count += 1
                    log.info(
                        "transactional.id=%s expired after %d ms idle",
                        meta.transactional_id,
                        self.settings.id_expiration_ms,
                    )
        return count

    # ------------------------------------------------------------------ describe / list
    def describe(self, tid: str) -> dict[str, Any]:
        error = self._error(tid)
        meta = self.state.txns.get(tid) if error is None else None
        if error is None and meta is None:
            error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if error is not None:
            return {
                "error_code": error,
                "transactional_id": tid,
                "transaction_state": "",
                "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
        assert meta is not None  # an unknown transactional id is TRANSACTIONAL_ID_NOT_FOUND above
        topics: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            topics.setdefault(topic, []).append(index)
        return {
            "error_code": ErrorCode.NONE,
            "transactional_id": tid,
            "transaction_state": meta.state.display,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        }

    def list(
        self, states: set[TxnState] | None, producer_ids: set[int] | None, min_duration_ms: int = -1
    ) -> list[dict[str, Any]]:
        now = self.now()
        out = []
        for tid, meta in sorted(self.state.txns.items()):
            if self.state.ownership_error(tid) is not None or meta.state == TxnState.DEAD:
                continue
            if states and meta.state not in states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (
                meta.start_ms < 0 or now - meta.start_ms < min_duration_ms or meta.state != TxnState.ONGOING
            ):
                continue
            out.append(
                {"transactional_id": tid, "producer_id": meta.producer_id, "transaction_state": meta.state.display}
            )
        return out

    @property
    def loading(self) -> bool:
        return bool(self.state.loading)


__all__ = ["TransactionCoordinator", "TxnSettings", "InitResult", "EndResult", "TRANSACTION_STATE_TOPIC", "TV2"]
