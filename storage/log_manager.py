"""All partition logs of a broker, across its log dirs, plus the per-dir checkpoint files."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from strom.storage import clock
from strom.storage.checkpoint import OffsetCheckpointFile, atomic_write
from strom.storage.cleaner import CleanResult, LogCleaner
from strom.storage.config import LogConfig
from strom.storage.errors import CorruptLog, KafkaStorageError, LogDirOffline, StorageError
from strom.storage.faults import storage_error
from strom.storage.log import Log, parse_dir_name, wall_clock_ms

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"

TopicPartition = tuple[str, int]
_log = logging.getLogger("strom.storage")


class LogDirInfo(NamedTuple):
    """What DescribeLogDirs and ``strom log-dirs`` show of one log dir."""

    path: Path
    offline: str | None  # why it failed, None while it works
    # (topic, partition) -> (size in bytes, offset lag as Kafka: max(HW - LEO, 0))
    partitions: dict[tuple[str, int], tuple[int, int]]
    total_bytes: int  # of the volume; -1 if unknown
    usable_bytes: int


def _dir_writable(log_dir: Path) -> bool:
    """Whether a file can still be created, written and fsynced in ``log_dir``."""
    probe = log_dir / ".strom-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"probe")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
        return True
    except OSError as exc:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE)


def read_properties(path: Path) -> dict[str, str]:
    """Java-properties subset: ``key=value`` lines, ``#`` comments."""
    props = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


def write_properties(path: Path, props: dict[str, str]) -> None:
    text = "#\n#" + time.strftime("%a %b %d %H:%M:%S %Z %Y") + "\n"
    text += "".join(f"{key}={value}\n" for key, value in props.items())
    atomic_write(path, text.encode())


class LogManager:
    """Owns every ``Log`` under the configured log dirs.

    Per log dir (Kafka's files, see storage.checkpoint for the text format):
    ``meta.properties`` (``version=0``, ``broker.id``, ``cluster.id``),
    ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
    ``replication-offset-checkpoint`` (high watermarks), ``cleaner-offset-checkpoint`` (each
    compacted log's first dirty offset, written by :meth:`clean_compacted`; a lost one only
    means the next pass cleans from the log start), and ``.kafka_cleanshutdown``, an empty
    marker written last by :meth:`shutdown` and removed by :meth:`startup`.

    After a crash there is no marker, so every log is recovered from its checkpointed recovery
    point (see Log). Checkpoints are replaced atomically; a missing or unreadable checkpoint
    counts as empty (recovery point 0: the whole log is re-validated). Directories renamed to
    ``<topic>-<partition>.<uuid>-delete`` by an interrupted :meth:`delete_log` are removed.

    Threading: :meth:`flush_dirty`, :meth:`checkpoint` and :meth:`clean_compacted` may run on a
    worker thread; the map of logs is guarded by a lock and they work on a copy.
    """

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._now_ms = now_ms
        self._progress = progress or (lambda message: None)
        self._lock = threading.Lock()
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self.cluster_id: str | None = None
        self.broker_id: int | None = None
        self.had_clean_shutdown = True
        self._cleaner = LogCleaner()
        self.uncleanable: set[TopicPartition] = set()
        self.offline_dirs: dict[Path, str] = {}
        self.dir_failure_listener: Callable[[Path, list[TopicPartition]], None] | None = None

    # ------------------------------------------------------------ startup
    def startup(
        self,
        broker_id: int | None = None,
        cluster_id: str | None = None,
        topic_configs: dict[str, LogConfig] | None = None,
    ) -> None:
        """Load meta.properties and checkpoints, then open (recovering) every partition log."""
        started = clock.monotonic()
        self._topic_configs.update(topic_configs or {})
        for log_dir in self.log_dirs:
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
                self._load_meta(log_dir, broker_id, cluster_id)
            except OSError as exc:
                self._fail_at_start(log_dir, exc)
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                self._fail_at_start(log_dir, exc)
        self._progress(
            f"loaded {len(self._logs)} logs from {len(self.log_dirs)} log dirs in "
            f"{(clock.monotonic() - started) * 1000:.0f} ms"
        )

    def _fail_at_start(self, log_dir: Path, exc: OSError) -> None:
        """A log dir that cannot be loaded goes offline; the broker starts if another one works."""
        error = storage_error(exc, "load log dir", str(log_dir), str(log_dir))
        self.mark_offline(log_dir, str(error))
        if all(d in self.offline_dirs for d in self.log_dirs):
            raise StorageError(f"every log dir failed; the last: {error}") from None

    # ------------------------------------------------------------ failed log dirs
    def _on_io_failure(self, log: Log, error: KafkaStorageError) -> None:
        """A log's system call failed: a failing or vanished dir goes offline (Kafka's rule),
        a full one does not (its appends resume when space comes back)."""
        if error.transient:
            return
        log_dir = self._log_dir_of.get((log.topic, log.partition))
        if log_dir is None or log_dir in self.offline_dirs:
            return
        if error.errno in (errno.EIO, errno.EROFS) or not _dir_writable(log_dir):
            self.mark_offline(log_dir, str(error))

    def mark_offline(self, log_dir: Path, reason: str) -> None:
        """Take a log dir offline: its partitions answer KAFKA_STORAGE_ERROR from now on, the
        other dirs keep serving, and ``dir_failure_listener`` hears of it (the cluster moves
        leadership away). Until the broker restarts with the disk repaired."""
        with self._lock:
            if log_dir in self.offline_dirs:
                return
            self.offline_dirs[log_dir] = reason
            affected = [(tp, log) for tp, log in self._logs.items() if self._log_dir_of[tp] == log_dir]
        for _, log in affected:
            log.mark_offline(reason)
        _log.error(
            "log dir %s is offline (%s): its %d partitions answer KAFKA_STORAGE_ERROR until "
            "the disk is repaired and the broker restarted; %d other log dirs keep serving",
            log_dir,
            reason,
            len(affected),
            len(self.log_dirs) - len(self.offline_dirs),
        )
        listener = self.dir_failure_listener
        if listener is not None:
            listener(log_dir, [tp for tp, _ in affected])

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def describe_dirs(self) -> list[LogDirInfo]:
        """Each log dir: offline reason, its partitions' sizes and offset lags, volume sizes."""
        with self._lock:
            logs = list(self._logs.items())
        out = []
        for log_dir in self.log_dirs:
            total = usable = -1
            reason = self.offline_dirs.get(log_dir)
            if reason is None:
                try:
                    st = os.statvfs(log_dir)
                    total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
                except OSError as exc:
                    reason = str(storage_error(exc, "stat", str(log_dir), str(log_dir)))
            partitions = (
                {}
                if reason is not None
                else {
                    tp: (log.size_in_bytes, max(0, log.high_watermark - log.log_end_offset))
                    for tp, log in logs
                    if self._log_dir_of.get(tp) == log_dir
                }
            )
            out.append(LogDirInfo(log_dir, reason, partitions, total, usable))
        return out

    def _load_meta(self, log_dir: Path, broker_id: int | None, cluster_id: str | None) -> None:
        path = log_dir / META_PROPERTIES
        props = read_properties(path) if path.exists() else {}
        stored_broker = props.get("broker.id")
        if broker_id is not None and stored_broker is not None and int(stored_broker) != broker_id:
            raise StorageError(f"{path}: broker.id {stored_broker} does not match {broker_id}")
        stored_cluster = props.get("cluster.id")
        if cluster_id is not None and stored_cluster is not None and stored_cluster != cluster_id:
            raise StorageError(f"{path}: cluster.id {stored_cluster} does not match {cluster_id}")
        self.broker_id = int(stored_broker) if stored_broker is not None else broker_id
        self.cluster_id = stored_cluster or cluster_id
        if not props:
            wanted = {"version": "0"}
            if self.broker_id is not None:
                wanted["broker.id"] = str(self.broker_id)
            if self.cluster_id is not None:
                wanted["cluster.id"] = self.cluster_id
            write_properties(path, wanted)

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CorruptLog as exc:
            self._progress(f"ignoring unreadable checkpoint: {exc}")
            return {}

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self.had_clean_shutdown = self.had_clean_shutdown and clean
        recovery = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        starts = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        first_dirty = self._read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
        self._progress(f"loading logs from {log_dir} ({'clean' if clean else 'unclean'} shutdown)")
        for path in sorted(log_dir.iterdir()):
            if path.name.endswith(".tmp") and path.is_file():
                path.unlink(missing_ok=True)  # a checkpoint or metadata write a crash interrupted
                continue
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            try:
                tp = parse_dir_name(path.name)
            except ValueError:
                continue
            if tp in self._logs:
                raise StorageError(f"{tp[0]}-{tp[1]} exists in {self._log_dir_of[tp]} and {log_dir}")
            log = Log.open(
                path,
                self._config_for(tp[0]),
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0),
                high_watermark=watermarks.get(tp, 0),
                now_ms=self._now_ms,
                clean_shutdown=clean,
            )
            log.cleaner_state.first_dirty_offset = first_dirty.get(tp, 0)
            self._register(tp, log, log_dir)
        marker.unlink(missing_ok=True)

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def _register(self, tp: TopicPartition, log: Log, log_dir: Path) -> None:
        log.io_failure_listener = self._on_io_failure
        with self._lock:
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir

    # ------------------------------------------------------------ lookup / create / delete
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, *, is_new: bool = True
    ) -> Log:
        """The partition's log, created in the log dir holding the fewest partitions.

        A log that should exist (``is_new`` False: a partition known from before) and is in no
        working dir while a dir is offline is not created afresh (it may be in the failed dir;
        an empty copy elsewhere would hide its data): LogDirOffline, as Kafka does."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            return log
        if not is_new and self.offline_dirs:
            raise LogDirOffline(
                f"{topic}-{partition} is in no working log dir and log dirs "
                f"{', '.join(map(str, self.offline_dirs))} are offline"
            )
        if config is not None:
            self._topic_configs[topic] = config
        online = self.online_dirs()
        if not online:
            raise LogDirOffline(f"cannot create {topic}-{partition}: every log dir is offline")
        counts = {d: 0 for d in online}
        for d in self._log_dir_of.values():
            if d in counts:
                counts[d] += 1
        log_dir = min(online, key=lambda d: counts[d])
        path = log_dir / f"{topic}-{partition}"
        existed = path.exists()
        try:
            log = Log.open(path, self._config_for(topic), now_ms=self._now_ms)
        except OSError as exc:
            if not existed:
                shutil.rmtree(path, ignore_errors=True)
            raise storage_error(exc, "create log", f"{topic}-{partition}", str(log_dir)) from None
        self._register(tp, log, log_dir)
        return log

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the dir to ``<topic>-<partition>.<uuid>-delete``, then remove it."""
        tp = (topic, partition)
        with self._lock:
            log = self._logs.pop(tp, None)
            self._log_dir_of.pop(tp, None)
            self.uncleanable.discard(tp)
        if log is None:
            return
        target = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        try:
            os.rename(log.dir, target)
        except OSError as exc:
            self._register(tp, log, log.dir.parent)
            raise storage_error(exc, "delete log", f"{topic}-{partition}", str(log.dir.parent)) from None
        log.dir = target
        log.delete()

    def update_config(self, topic: str, config: LogConfig) -> None:
        self._topic_configs[topic] = config
        for (t, _), log in self.all_logs().items():
            if t == topic:
                log.update_config(config)

    # ------------------------------------------------------------ periodic work
    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every log dir.

        A dir whose files cannot be written keeps its last good ones (logged, not raised)."""
        self._checkpoint_dirs()

    def _checkpoint_dirs(self) -> set[Path]:
        """:meth:`checkpoint`; returns the dirs whose checkpoints could not be written."""
        failed: set[Path] = set()
        with self._lock:
            by_dir: dict[Path, dict[TopicPartition, Log]] = {d: {} for d in self.log_dirs}
            for tp, log in self._logs.items():
                by_dir[self._log_dir_of[tp]][tp] = log
        for log_dir, logs in by_dir.items():
            if log_dir in self.offline_dirs:
                failed.add(log_dir)
                continue
            try:
                self._write_checkpoints(log_dir, logs)
            except OSError as exc:  # the last good checkpoints stay; retried at the next interval
                error = storage_error(exc, "write checkpoints of", str(log_dir), str(log_dir))
                failed.add(log_dir)
                if not error.transient and (exc.errno in (errno.EIO, errno.EROFS) or not _dir_writable(log_dir)):
                    self.mark_offline(log_dir, str(error))
        return failed

    @staticmethod
    def _write_checkpoints(log_dir: Path, logs: dict[TopicPartition, Log]) -> None:
        OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
            {tp: log.recovery_point for tp, log in logs.items()}
        )
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
            {tp: log.log_start_offset for tp, log in logs.items()}
        )
        OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write(
            {tp: log.high_watermark for tp, log in logs.items()}
        )

    def flush_dirty(self) -> None:
        """fsync every log up to its end and checkpoint the new recovery points (thread-safe)."""
        for log in self.all_logs().values():
            try:
                log.flush()
            except StorageError:
                pass  # logged by the log; its recovery point stays
        self.checkpoint()

    def cleanup(self) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = 0
        for log in self.all_logs().values():
            if log.offline is not None:
                continue
            try:
                deleted += log.delete_old_segments()
            except OSError as exc:
                storage_error(exc, "apply retention to", f"{log.topic}-{log.partition}", str(log.dir.parent))
        if deleted:
            self.checkpoint()
        return deleted

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """producer.id.expiration.ms over every log; returns how many producers were forgotten."""
        return sum(log.remove_expired_producers(expiration_ms) for log in self.all_logs().values())

    def clean_compacted(self, now_ms: int | None = None) -> dict[TopicPartition, CleanResult]:
        """Compact every log whose policy asks for it (dirtiest first); returns what was done.

        Synchronous, meant for a worker thread. A log whose data cannot be decoded is reported
        through ``progress`` and skipped from then on (Kafka marks it uncleanable).
        """
        now = self._now_ms() if now_ms is None else now_ms
        logs = {log: tp for tp, log in self.all_logs().items() if tp not in self.uncleanable and log.offline is None}
        results: dict[TopicPartition, CleanResult] = {}
        for log in self._cleaner.choose(logs, now):
            tp = logs[log]
            try:
                results[tp] = self._cleaner.clean(log, now)
            except StorageError as exc:
                self.uncleanable.add(tp)
                self._progress(f"cannot clean {tp[0]}-{tp[1]}, skipping it from now on: {exc}")
        if results:
            self.write_cleaner_checkpoints()
        return results

    def write_cleaner_checkpoints(self) -> None:
        """Write each log dir's ``cleaner-offset-checkpoint`` (compacted logs only)."""
        with self._lock:
            by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
            for tp, log in self._logs.items():
                if log.config.compact_enabled:
                    by_dir[self._log_dir_of[tp]][tp] = log.cleaner_state.first_dirty_offset
        for log_dir, offsets in by_dir.items():
            if log_dir in self.offline_dirs:
                continue
            try:
                OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(offsets)
            except OSError as exc:
                storage_error(exc, "write", CLEANER_OFFSET_CHECKPOINT, str(log_dir))

    def shutdown(self) -> None:
        """Close every log (flush + snapshots), write checkpoints, then the clean-shutdown marker."""
        started = clock.monotonic()
        failed: set[Path] = set()
        for tp, log in self.all_logs().items():
            try:
                log.close()
            except StorageError:
                failed.add(self._log_dir_of[tp])  # logged; this dir recovers at the next start
        failed |= self._checkpoint_dirs()
        for log_dir in self.log_dirs:
            if log_dir in failed:
                self._progress(
                    f"{log_dir}: not marked as cleanly shut down (a write failed); "
                    f"its logs are re-validated at the next start"
                )
                continue
            try:
                atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")
            except OSError as exc:
                storage_error(exc, "write", CLEAN_SHUTDOWN_FILE, str(log_dir))
        self._progress(f"shut down {len(self._logs)} logs in {(clock.monotonic() - started) * 1000:.0f} ms")
