"""Incremental fetch sessions (KIP-227): the broker's session cache and the fetch contexts.

A client (consumer or follower) that sends Fetch v7+ with session id 0 and epoch 0 asks for a
new session: the broker answers every requested partition, remembers them (fetch offset, max
bytes, and the high watermark and log start offset it last answered) and returns a session id.
The client then sends that id with epoch 1, 2, ...: only partitions whose fetch position changed
(added or updated) and `forgotten_topics_data` (removed). The broker reads every partition of the
session but answers only those with something new: records, a changed high watermark or log start
offset, an error, a diverging epoch. An idle consumer of 1,000 partitions then sends and receives
a few bytes per poll instead of 1,000 partition entries each way.

As in Kafka (FetchSession.scala):
- epoch -1 (FINAL) closes the session named and fetches without one; epoch 0 (INITIAL) closes
  the session named and opens a new one; other epochs must match the session's next epoch, else
  INVALID_FETCH_SESSION_EPOCH, and an unknown id gets FETCH_SESSION_ID_NOT_FOUND. Both errors
  come back top-level with session id 0 and no partitions, and the client starts over.
- The cache has `max.incremental.fetch.session.cache.slots` slots. When it is full, a new session
  takes the slot of one unused for `eviction_ms` (2 minutes); failing that, of the least valuable
  session that has existed for `eviction_ms` (followers' sessions are worth more than consumers',
  then bigger sessions more than smaller ones); failing that, no session is created and the
  response carries session id 0, which tells the client to keep sending full fetches.
- Partitions with new records rotate to the end of the session, so a byte limit does not starve
  the partitions at the end.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode
from strom.storage import clock

log = logging.getLogger("strom.fetch_session")

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's minimum age before a session may be evicted by another


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (wraps to 1 after 2**31 - 1, never back to 0)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def _now_ms() -> int:
    return int(clock.monotonic() * 1000)


@dataclass
class CachedPartition:
    """One partition of a session, shaped like a request's FetchPartition for the fetch code."""

    topic: str | None
    topic_id: bytes
    partition: int
    fetch_offset: int = 0
    partition_max_bytes: int = 0
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1  # as last answered (-1: answer the next time in any case)
    answered_log_start: int = -1  # log start offset as last answered

    def update_request(self, req) -> None:
        self.fetch_offset = req.fetch_offset
        self.partition_max_bytes = req.partition_max_bytes
        self.log_start_offset = getattr(req, "log_start_offset", -1)
        self.current_leader_epoch = getattr(req, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(req, "last_fetched_epoch", -1)

    def must_respond(self, result: dict, update: bool) -> bool:
        """Whether an incremental response includes this partition (Kafka's maybeUpdateResponseData)."""
        respond = bool(_records_size(result))
        hw = result.get("high_watermark", -1)
        if hw != self.high_watermark:
            respond = True
            if update:
                self.high_watermark = hw
        start = result.get("log_start_offset", -1)
        if start != self.answered_log_start:
            respond = True
            if update:
                self.answered_log_start = start
        if result.get("preferred_read_replica", -1) not in (-1, None):
            respond = True
        if result.get("error_code", 0) != ErrorCode.NONE:
            respond = True
            if update:
                self.high_watermark = -1  # answer again once the error is gone
        diverging = result.get("diverging_epoch")
        if diverging is not None and diverging.get("epoch", -1) >= 0:
            respond = True
        return respond


def _records_size(result: dict) -> int:
    records = result.get("records")
    if not records:
        return 0
    size = getattr(records, "size", None)
    return size if size is not None else len(records)


@dataclass
class FetchSession:
    id: int
    privileged: bool  # a follower's session
    uses_topic_ids: bool  # Fetch v13+
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    partitions: OrderedDict[tuple, CachedPartition] = field(default_factory=OrderedDict)

    @property
    def size(self) -> int:
        return len(self.partitions)

    def value(self) -> tuple[bool, int, int]:
        """How much a session is worth keeping: followers first, then bigger sessions."""
        return (self.privileged, self.size, self.id)


def _key(uses_topic_ids: bool, name: str | None, topic_id: bytes, index: int) -> tuple:
    return (topic_id if uses_topic_ids else name, index)


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = EVICTION_MS, clock=_now_ms):
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(s.size for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now

    def _new_id(self) -> int:
        while True:
            candidate = random.randint(1, 2**31 - 1)
            if candidate not in self.sessions:
                return candidate

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now - stalest.last_used_ms > self.eviction_ms:
            self._evict(stalest, f"unused for {now - stalest.last_used_ms} ms")
            return True
        evictable = [
            s
            for s in self.sessions.values()
            if now - s.created_ms > self.eviction_ms and (privileged or not s.privileged)
        ]
        if not evictable:
            return False
        cheapest = min(evictable, key=FetchSession.value)
        if (privileged, size, 0) < cheapest.value()[:2] + (0,):
            return False
        self._evict(cheapest, "a more valuable session needed its slot")
        return True

    def _evict(self, session: FetchSession, why: str) -> None:
        del self.sessions[session.id]
        self.evictions += 1
        log.debug("evicted fetch session %d (%d partitions): %s", session.id, session.size, why)

    def maybe_create(
        self, privileged: bool, uses_topic_ids: bool, partitions: OrderedDict[tuple, CachedPartition]
    ) -> int:
        """A new session holding `partitions`, or INVALID_SESSION_ID when there is no room."""
        if self.max_slots <= 0:
            return INVALID_SESSION_ID
        now = self.clock()
        if len(self.sessions) >= self.max_slots and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(
            self._new_id(), privileged, uses_topic_ids, now, now, next_epoch(INITIAL_EPOCH), partitions
        )
        self.sessions[session.id] = session
        log.debug(
            "fetch session %d created for a %s with %d partitions",
            session.id,
            "follower" if privileged else "consumer",
            len(partitions),
        )
        return session.id


class TopicRef:
    """A topic as the fetch code reads it from a request: name (v0-v12) and id (v13+)."""

    __slots__ = ("topic", "topic_id", "partitions")

    def __init__(self, topic, topic_id, partitions):
        self.topic, self.topic_id, self.partitions = topic, topic_id, partitions


def _group(parts) -> list[TopicRef]:
    """Consecutive partitions of one topic grouped into one TopicRef, order kept."""
    groups: list[TopicRef] = []
    for part in parts:
        last = groups[-1] if groups else None
        if last is not None and last.topic == part.topic and last.topic_id == part.topic_id:
            last.partitions.append(part)
        else:
            groups.append(TopicRef(part.topic, part.topic_id, [part]))
    return groups


class FetchContext:
    """What one Fetch request reads (`topics`) and how its answer is shaped (`finish`).

    `error` set: answer it top-level with session id 0 and nothing else.
    """

    def __init__(
        self,
        topics,
        *,
        error: ErrorCode = ErrorCode.NONE,
        session: FetchSession | None = None,
        cache: FetchSessionCache | None = None,
        create: tuple[bool, bool] | None = None,
        uses_topic_ids: bool = False,
    ):
        self.topics = topics
        self.error = error
        self.session = session
        self._cache = cache
        self._create = create
        self._uses_topic_ids = uses_topic_ids

    @property
    def incremental(self) -> bool:
        return self.session is not None

    def finish(self, responses: list[dict]) -> tuple[int, list[dict]]:
        """(session id, response topics) from the full results of reading `topics`."""
        if self.session is not None:
            return self.session.id, self._incremental(responses)
        if self._create is None:
            return INVALID_SESSION_ID, responses
        privileged, uses_ids = self._create
        partitions: OrderedDict[tuple, CachedPartition] = OrderedDict()
        for ref, topic in zip(self.topics, responses, strict=False):
            for req, result in zip(ref.partitions, topic["partitions"], strict=False):
                cached = CachedPartition(ref_name(ref, uses_ids), ref_id(ref, uses_ids), req.partition)
                cached.update_request(req)
                cached.must_respond(result, update=True)
                partitions[_key(uses_ids, cached.topic, cached.topic_id, req.partition)] = cached
        return self._cache.maybe_create(privileged, uses_ids, partitions), responses

    def _incremental(self, responses: list[dict]) -> list[dict]:
        session = self.session
        chosen = []
        rotate = []
        for ref, topic in zip(self.topics, responses, strict=False):
            for cached, result in zip(ref.partitions, topic["partitions"], strict=False):
                if cached.must_respond(result, update=True):
                    chosen.append((cached, topic, result))
                    if _records_size(result):
                        rotate.append(_key(session.uses_topic_ids, cached.topic, cached.topic_id, cached.partition))
        for key in rotate:
            if key in session.partitions:
                session.partitions.move_to_end(key)
        out: list[dict] = []
        for _cached, topic, result in chosen:
            if out and out[-1]["topic_id"] == topic["topic_id"] and out[-1]["topic"] == topic["topic"]:
                out[-1]["partitions"].append(result)
            else:
                out.append({"topic": topic["topic"], "topic_id": topic["topic_id"], "partitions": [result]})
        return out


def ref_name(ref, uses_ids: bool) -> str | None:
    return None if uses_ids else ref.topic


def ref_id(ref, uses_ids: bool) -> bytes:
    return ref.topic_id if uses_ids else bytes(16)


class FetchManager:
    """Turns a Fetch request into a FetchContext, keeping the session cache."""

    def __init__(self, cache: FetchSessionCache):
        self.cache = cache

    def new_context(self, version: int, body, follower: bool) -> FetchContext:
        if version < 7:
            return FetchContext(list(body.topics))
        uses_ids = version >= 13
        session_id, epoch = body.session_id, body.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID and self.cache.remove(session_id) is not None:
                log.debug("fetch session %d closed by its client", session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(list(body.topics))
            return FetchContext(
                list(body.topics), cache=self.cache, create=(follower, uses_ids), uses_topic_ids=uses_ids
            )
        session = self.cache.get(session_id)
        if session is None:
            return FetchContext([], error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return FetchContext([], error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        self._update(session, body, uses_ids)
        if not session.partitions:
            self.cache.remove(session.id)
            return FetchContext(list(body.topics))
        self.cache.touch(session, self.cache.clock())
        session.epoch = next_epoch(session.epoch)
        return FetchContext(_group(session.partitions.values()), session=session, uses_topic_ids=uses_ids)

    @staticmethod
    def _update(session: FetchSession, body, uses_ids: bool) -> None:
        parts = session.partitions
        for topic in body.topics:
            name = None if uses_ids else topic.topic
            topic_id = topic.topic_id if uses_ids else bytes(16)
            for req in topic.partitions:
                key = _key(uses_ids, name, topic_id, req.partition)
                cached = parts.get(key)
                if cached is None:
                    cached = parts[key] = CachedPartition(name, topic_id, req.partition)
                cached.update_request(req)
        for forgotten in body.forgotten_topics_data or ():
            name = None if uses_ids else forgotten.topic
            topic_id = forgotten.topic_id if uses_ids else bytes(16)
            for index in forgotten.partitions:
                parts.pop(_key(uses_ids, name, topic_id, index), None)


class FetchSessionHandler:
    """The client side of a fetch session, as a follower uses it (Kafka's FetchSessionHandler).

    `build(wanted)` turns the partitions to fetch ({(topic, partition): fields}) into the
    session id, epoch, partitions to send and partitions to forget: everything at first and
    after any error; afterwards only partitions that are new or whose fields changed.
    `handle(response)` moves the session on, or starts over on any session error."""

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self.sent: dict[tuple[str, int], dict] = {}  # what the broker's session holds, as last sent
        self._pending: dict[tuple[str, int], dict] | None = None
        self._full = True

    def reset(self) -> None:
        self.session_id, self.next_epoch, self.sent, self._pending = INVALID_SESSION_ID, INITIAL_EPOCH, {}, None

    def build(self, wanted: dict[tuple[str, int], dict]) -> tuple[int, int, dict, list[tuple[str, int]]]:
        """(session id, epoch, partitions to send, partitions to forget)."""
        self._pending = {k: dict(v) for k, v in wanted.items()}
        if self.session_id == INVALID_SESSION_ID or self.next_epoch == INITIAL_EPOCH:
            self._full = True
            return INVALID_SESSION_ID, INITIAL_EPOCH, dict(wanted), []
        self._full = False
        send = {k: v for k, v in wanted.items() if self.sent.get(k) != v}
        forget = [k for k in self.sent if k not in wanted]
        return self.session_id, self.next_epoch, send, forget

    def handle(self, error_code: int, session_id: int) -> None:
        if error_code != ErrorCode.NONE:
            if error_code in (
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
            ):
                log.debug("fetch session %d: %s; starting a new one", self.session_id, ErrorCode(error_code).name)
            self.reset()
            return
        if self._full:
            if session_id == INVALID_SESSION_ID:
                self.reset()  # no room in the leader's cache: full fetches, asking again each time
                return
            self.session_id, self.next_epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.next_epoch = next_epoch(self.next_epoch)
        self.sent = self._pending or {}
        self._pending = None
