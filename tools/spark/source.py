"""``stromkafka``: a pure-Python Spark data source with the options and schema of Spark's ``kafka``.

Register it once per session with :func:`register` (or ``spark.dataSource.register(KafkaDataSource)``)
then use ``format("stromkafka")`` where Spark's connector would use ``format("kafka")``:

* batch read: ``spark.read.format("stromkafka").option("kafka.bootstrap.servers", ...)
  .option("subscribe", "t").load()``; one Spark partition per Kafka partition (split further by
  ``minPartitions``); ``startingOffsets`` default earliest, ``endingOffsets`` default latest;
* streaming read: ``readStream``; ``startingOffsets`` default latest; Spark checkpoints offsets
  as ``{"topic": {"partition": next_offset}}``; ``maxOffsetsPerTrigger``; ``Trigger.AvailableNow``;
* batch and streaming write: ``value`` column (string or binary) and optional ``key``, ``topic``,
  ``partition``, ``headers``; the ``topic`` option overrides the ``topic`` column.

Rows have the kafka source's schema (:data:`tools.spark.options.BASE_SCHEMA`, plus ``headers``
with ``includeHeaders=true``). Reading uses assign/seek consumers with ``read_uncommitted``,
writing an idempotent producer, both on confluent-kafka, so it works against any Kafka.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from strom.tools.spark import offsets as plan
from strom.tools.spark.kafka_io import OffsetClient, RowProducer, read_range
from strom.tools.spark.options import (
    DEFAULT_POLL_TIMEOUT_MS,
    Subscription,
    client_settings,
    flag,
    lowered,
    parse_subscription,
    positive_int,
    schema_ddl,
    sink_topic,
)

SHORT_NAME = "stromkafka"

try:  # PySpark >= 4.2: read limits and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark 4.x
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]


def register(spark: Any) -> None:
    """Make ``format("stromkafka")`` available in ``spark``."""
    spark.dataSource.register(KafkaDataSource)


@dataclass(frozen=True)
class ReadSettings:
    """What an executor needs to read one range: picklable, no client objects."""

    client: Mapping[str, str]
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadSettings:
        return cls(
            client_settings(options),
            flag(options, "includeHeaders", False),
            flag(options, "failOnDataLoss", True),
            positive_int(options, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        )

    def read(self, rng: plan.OffsetRange) -> Iterator[tuple[Any, ...]]:
        return read_range(
            self.client,
            rng,
            include_headers=self.include_headers,
            fail_on_data_loss=self.fail_on_data_loss,
            poll_timeout_ms=self.poll_timeout_ms,
        )


class RangePartition(InputPartition):
    """One Spark input partition: an :class:`~tools.spark.offsets.OffsetRange`."""

    def __init__(self, rng: plan.OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


class KafkaDataSource(DataSource):
    """The data source itself: options in, readers and writers out."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        return schema_ddl(self.options)

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(dict(self.options))


class _Planner:
    """Driver-side state shared by the readers: options, subscription and an offset client."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.subscription: Subscription = parse_subscription(options)
        self.settings = ReadSettings.from_options(options)
        self.min_partitions = positive_int(options, "minPartitions")
        self.strategy = lowered(options).get("startingoffsetsbytimestampstrategy", "error")
        self._client: OffsetClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(self.settings.client)
        return self._client

    def current_partitions(self) -> list[plan.TopicPartition]:
        sub = self.subscription
        topics = list(sub.topics) if sub.kind == "subscribe" else None
        counts = self.client.partition_counts(topics) if sub.kind != "assign" else {}
        return sub.partitions(counts)

    def resolve(
        self,
        spec: plan.OffsetSpec,
        partitions: Sequence[plan.TopicPartition],
        which: str,
        cluster: plan.ClusterOffsets | None = None,
    ) -> plan.OffsetMap:
        lookups = plan.timestamps_to_look_up(spec, partitions)
        if cluster is None or lookups:
            cluster = self.client.offsets(partitions, lookups)
        return plan.resolve(spec, partitions, cluster, which, self.strategy)


class BatchReader(_Planner, DataSourceReader):
    """``spark.read``: plans ranges from startingOffsets to endingOffsets on the driver."""

    def partitions(self) -> Sequence[InputPartition]:
        start_spec = plan.parse_spec(self.options, "starting", "earliest")
        end_spec = plan.parse_spec(self.options, "ending", "latest")
        plan.check_batch_start(start_spec)
        parts = self.current_partitions()
        if not parts:
            return []
        cluster = self.client.offsets(parts)
        start = self.resolve(start_spec, parts, "starting", cluster)
        end = self.resolve(end_spec, parts, "ending", cluster)
        start = plan.check_progress(start, end, cluster.earliest, self.settings.fail_on_data_loss)
        return [RangePartition(r) for r in plan.plan_ranges(start, end, min_partitions=self.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RangePartition)
        return self.settings.read(partition.rng)


class StreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets are ``{"topic": {"partition": next_offset}}`` dicts."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.max_offsets = positive_int(options, "maxOffsetsPerTrigger")
        self._target: plan.OffsetMap | None = None
        self._last_end: plan.OffsetMap | None = None

    def initialOffset(self) -> dict:
        spec = plan.parse_spec(self.options, "starting", "latest")
        parts = self.current_partitions()
        return plan.offsets_to_json(self.resolve(spec, parts, "starting"))

    def getDefaultReadLimit(self) -> Any:
        if self.max_offsets is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.max_offsets)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> plan.OffsetMap:
        parts = self.current_partitions()
        return dict(self.client.offsets(parts).latest) if parts else {}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = plan.offsets_from_json(start) if start is not None else (self._last_end or {})
        latest = self._target if self._target is not None else self._latest()
        latest = {tp: max(off, begin.get(tp, off)) for tp, off in latest.items()}
        max_rows = getattr(limit, "max_rows", None) if limit is not None else self.max_offsets
        fresh = self._new_partition_starts(begin, latest)
        end = plan.rate_limit(begin, latest, max_rows, fresh)
        self._last_end = end
        return plan.offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return plan.offsets_to_json(self._latest())

    def _new_partition_starts(self, begin: plan.OffsetMap, end: Mapping[plan.TopicPartition, int]) -> plan.OffsetMap:
        new = [tp for tp in end if tp not in begin]
        return dict(self.client.offsets(new).earliest) if new else {}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = plan.offsets_from_json(start), plan.offsets_from_json(end)
        if begin == until:
            return []
        fresh = self._new_partition_starts(begin, until)
        earliest = dict(self.client.offsets(sorted(begin)).earliest) if begin else {}
        begin = plan.check_progress(begin, until, earliest, self.settings.fail_on_data_loss)
        ranges = plan.plan_ranges(begin, until, fresh, self.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RangePartition)
        return self.settings.read(partition.rng)

    def commit(self, end: dict) -> None:
        """Spark keeps the offsets in its checkpoint; nothing is committed to Kafka (as Spark)."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@dataclass
class WriteResult(WriterCommitMessage):
    """What one write task reports to the driver: the number of records acknowledged."""

    records: int


class _RowWriter:
    def __init__(self, options: Mapping[str, str]) -> None:
        self.settings = client_settings(options)
        self.topic = sink_topic(options)

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        producer = RowProducer(self.settings, self.topic)
        for row in iterator:
            producer.send(row.asDict() if hasattr(row, "asDict") else dict(row))
        return WriteResult(producer.finish())


class BatchWriter(_RowWriter, DataSourceWriter):
    """``df.write.format("stromkafka")``: every row becomes one record (at least once)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records are acknowledged in ``write``; there is nothing left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Kafka records cannot be taken back; what was acknowledged stays (as Spark's sink)."""


class StreamWriter(_RowWriter, DataSourceStreamWriter):
    """``writeStream.format("stromkafka")``: each micro-batch's rows are sent, then acknowledged."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Acknowledged in ``write``; Spark then records the batch in its commit log."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Acknowledged records stay; a rerun of the batch may write them again (at least once)."""
