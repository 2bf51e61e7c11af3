"""The share admin APIs' logic: DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets, as Kafka 4.3's group coordinator answers them.

A share group's offsets are its share-partitions' start offsets, kept by the share coordinator and
reached through the `Persister`; the group coordinator knows which share-partitions a group has
(``initialized``: the share partitions initialized for it, by an assignment or an alteration). Answers, as
the 4.3.1 reference broker gives them:

* Describe: a group that is no share group (missing, classic or consumer, empty id) has no
  topics, or, for topics named, every partition at start offset -1, lag -1; a share group's named
  (or, with null topics, initialized) partitions with their start offset, leader epoch and (v1)
  lag = high watermark - start offset - delivery-complete count (-1 where unknown).
* Alter: INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND "Group g is not a share group." for
  another kind, NON_EMPTY_GROUP while it has members; a missing group is created empty. Each
  partition's state is initialized at the start offset (no bounds check, as Kafka);
  UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist.
* Delete: as alter, but a missing group is GROUP_ID_NOT_FOUND "Group g not found."; each topic's
  share-partitions are deleted; a topic with none is UNKNOWN_TOPIC_OR_PARTITION "There is no offset
  information to delete."
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from strom.broker.coordinator.runtime import TopicMetadata
from strom.broker.coordinator.share.persister import Persister, PersisterError, SharePartitionKey
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.share.admin")

NO_TOPIC_ID = bytes(16)
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
NO_OFFSETS_MESSAGE = "There is no offset information to delete."
ALTER_STATE_EPOCH = 1  # the state epoch Kafka 4.3 gives a share-partition its offsets are altered in


class ShareGroupLike(Protocol):
    """A share group as the group coordinator keeps it (`coordinator.group.share_groups`)."""

    @property
    def members(self) -> Mapping[str, Any]: ...

    @property
    def initialized(self) -> set[tuple[bytes, int]]: ...


class ShareGroupDirectory(Protocol):
    """The share groups a group coordinator knows."""

    def get(self, group_id: str) -> ShareGroupLike | None: ...

    def create(self, group_id: str) -> ShareGroupLike:
        """An empty share group (AlterShareGroupOffsets of a group nobody created yet)."""
        ...

    def other_kind(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic or consumer group."""
        ...


class AdminError(Exception):
    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


EndOffset = Callable[[str, int], int | None]  # a partition's high watermark, None where unknown here


class ShareGroupOffsetsAdmin:
    def __init__(
        self,
        directory: ShareGroupDirectory,
        persister: Persister,
        topics: Callable[[], Mapping[str, TopicMetadata]],
        end_offset: EndOffset,
    ) -> None:
        self.directory = directory
        self.persister = persister
        self.topics = topics
        self.end_offset = end_offset

    def _share_group(self, group_id: str, missing_message: str | None) -> ShareGroupLike:
        if not group_id:
            raise AdminError(ErrorCode.INVALID_GROUP_ID, "The group id is invalid.")
        group = self.directory.get(group_id)
        if group is None and self.directory.other_kind(group_id):
            raise AdminError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if group is None:
            if missing_message is not None:
                raise AdminError(ErrorCode.GROUP_ID_NOT_FOUND, missing_message)
            try:
                group = self.directory.create(group_id)
            except LookupError:  # a group coordinator that keeps no share groups
                raise AdminError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.") from None
        if group.members:
            raise AdminError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        return group

    # ------------------------------------------------------------------ describe
    async def describe(self, group_id: str, wanted: list[tuple[str, list[int]]] | None) -> dict[str, Any]:
        """One group's entry of a DescribeShareGroupOffsets answer."""
        topics = self.topics()
        group = self.directory.get(group_id) if group_id else None
        if wanted is None:
            if group is None:
                return {"group_id": group_id, "topics": [], "error_code": ErrorCode.NONE, "error_message": None}
            by_id = {meta.topic_id: name for name, meta in topics.items()}
            named: dict[str, list[int]] = {}
            for topic_id, index in sorted(group.initialized):
                if topic_id in by_id:
                    named.setdefault(by_id[topic_id], []).append(index)
            wanted = sorted(named.items())
        out = []
        for name, indexes in wanted:
            meta = topics.get(name)
            topic_id = meta.topic_id if meta is not None else NO_TOPIC_ID
            partitions = [await self._describe_partition(group, group_id, name, meta, index) for index in indexes]
            out.append({"topic_name": name, "topic_id": topic_id, "partitions": partitions})
        return {"group_id": group_id, "topics": out, "error_code": ErrorCode.NONE, "error_message": None}

    async def _describe_partition(
        self, group: ShareGroupLike | None, group_id: str, name: str, meta: TopicMetadata | None, index: int
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "partition_index": index,
            "start_offset": -1,
            "leader_epoch": 0,
            "lag": -1,
            "error_code": ErrorCode.NONE,
            "error_message": None,
        }
        if group is None or meta is None:
            return entry
        if not 0 <= index < meta.partitions:  # Kafka 4.3 never answers this one: Strom says so
            entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=UNKNOWN_TOPIC_MESSAGE)
            return entry
        if (meta.topic_id, index) not in group.initialized:
            return entry
        try:
            summary = await self.persister.read_summary(SharePartitionKey(group_id, meta.topic_id, index), -1)
        except PersisterError as exc:
            entry.update(error_code=exc.code, error_message=exc.message)
            return entry
        entry["start_offset"] = summary.start_offset
        entry["leader_epoch"] = summary.leader_epoch
        end = self.end_offset(name, index)
        if summary.start_offset >= 0 and summary.delivery_complete_count >= 0 and end is not None:
            entry["lag"] = end - summary.start_offset - summary.delivery_complete_count
        return entry

    # ------------------------------------------------------------------ alter
    async def alter(self, group_id: str, wanted: list[tuple[str, list[tuple[int, int]]]]) -> dict[str, Any]:
        """An AlterShareGroupOffsets answer (without throttle time)."""
        try:
            group = self._share_group(group_id, None)
        except AdminError as exc:
            return {"error_code": exc.code, "error_message": exc.message, "responses": []}
        topics = self.topics()
        responses = []
        for name, partitions in wanted:
            meta = topics.get(name)
            results = []
            for index, start_offset in partitions:
                result: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None}
                if meta is None or not 0 <= index < meta.partitions:
                    result.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=UNKNOWN_TOPIC_MESSAGE)
                else:
                    key = SharePartitionKey(group_id, meta.topic_id, index)
                    try:
                        await self.persister.initialize_state(key, ALTER_STATE_EPOCH, start_offset)
                        group.initialized.add((meta.topic_id, index))
                    except PersisterError as exc:
                        result.update(error_code=exc.code, error_message=exc.message)
                results.append(result)
            topic_id = meta.topic_id if meta is not None else NO_TOPIC_ID
            responses.append({"topic_name": name, "topic_id": topic_id, "partitions": results})
        return {"error_code": ErrorCode.NONE, "error_message": None, "responses": responses}

    # ------------------------------------------------------------------ delete
    async def delete(self, group_id: str, names: list[str]) -> dict[str, Any]:
        """A DeleteShareGroupOffsets answer (without throttle time)."""
        try:
            group = self._share_group(group_id, f"Group {group_id} not found.")
        except AdminError as exc:
            return {"error_code": exc.code, "error_message": exc.message, "responses": []}
        topics = self.topics()
        responses = []
        for name in names:
            meta = topics.get(name)
            entry: dict[str, Any] = {
                "topic_name": name,
                "topic_id": NO_TOPIC_ID,
                "error_code": ErrorCode.NONE,
                "error_message": None,
            }
            mine = sorted(p for p in group.initialized if meta is not None and p[0] == meta.topic_id)
            if meta is None:
                entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=UNKNOWN_TOPIC_MESSAGE)
            elif not mine:
                entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=NO_OFFSETS_MESSAGE)
            else:
                entry["topic_id"] = meta.topic_id
                try:
                    for topic_id, index in mine:
                        await self.persister.delete_state(SharePartitionKey(group_id, topic_id, index))
                        group.initialized.discard((topic_id, index))
                except PersisterError as exc:
                    entry.update(error_code=exc.code, error_message=exc.message)
            responses.append(entry)
        return {"error_code": ErrorCode.NONE, "error_message": None, "responses": responses}
