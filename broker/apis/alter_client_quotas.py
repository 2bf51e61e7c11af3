"""AlterClientQuotas: set or remove quota configs of users, client ids and their defaults
(`kafka-configs.sh --alter --entity-type users/clients --add-config producer_byte_rate=...`).

Each entry is checked and applied on its own, as Kafka does. Standalone, the configs are kept in
the broker's metadata file; in a ZooKeeper cluster under /config/users and /config/clients, as
ZooKeeper-era Kafka keeps them (`strom.broker.cluster.quotas_zk`)."""
from __future__ import annotations

import math

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..errors import TopicError
from ..quotas import CLIENT_ID, IP, KEYS, USER, entity_key

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
VERSIONS = (0, 1)


def _check(entry) -> tuple[ErrorCode, str | None, tuple | None]:
    pairs = list(dict((e.entity_type, e.entity_name) for e in entry.entity).items())  # a type twice: the last counts
    if not pairs:
        return ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity", None
    for t, _ in pairs:
        if t == IP:
            return ErrorCode.INVALID_REQUEST, "IP quotas (connection_creation_rate) are not supported by Strom", None
        if t not in (USER, CLIENT_ID):
            return ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {t}", None
    for op in entry.ops:
        if op.key not in KEYS[USER]:
            return ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}", None
        if not op.remove and (not math.isfinite(op.value) or op.value <= 0):
            return ErrorCode.INVALID_REQUEST, f"Quota {op.key} must be greater than 0", None
    return ErrorCode.NONE, None, entity_key(pairs)


async def handle(broker, request) -> dict:
    body = request.body
    results = []
    quotas = {e: dict(v) for e, v in broker.quotas.entries.items()}
    changed = False
    for entry in body.entries:
        entity = [{"entity_type": t, "entity_name": n}
                  for t, n in sorted(dict((e.entity_type, e.entity_name) for e in entry.entity).items())]
        if not allowed_cluster(broker, Operation.ALTER_CONFIGS):
            results.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "entity": entity})
            continue
        code, message, key = _check(entry)
        if code == ErrorCode.NONE and not body.validate_only:
            values = quotas.setdefault(key, {})
            for op in entry.ops:
                if op.remove:
                    values.pop(op.key, None)
                else:
                    values[op.key] = op.value
            changed = True
        results.append({"error_code": code, "error_message": message, "entity": entity})
    if changed and broker.cluster is not None:
        await _write_zookeeper(broker, quotas, results)
    elif changed:
        try:
            broker.topics.set_quotas(quotas)
        except TopicError as exc:
            for r in results:
                if r["error_code"] == ErrorCode.NONE:
                    r["error_code"], r["error_message"] = exc.code, str(exc)
    return {"throttle_time_ms": 0, "entries": results}


async def _write_zookeeper(broker, quotas, results) -> None:
    """In a cluster: each changed entity's node under /config, announced to every broker."""
    from ..cluster.quotas_zk import write_quota
    from ..cluster.zkclient import ZkClientError
    zk = broker.cluster.zk
    before = broker.quotas.entries
    for entity in set(quotas) | set(before):
        if quotas.get(entity, {}) != before.get(entity, {}):
            try:
                await zk._call(write_quota, zk._zk, entity, quotas.get(entity, {}))
            except (ZkClientError, OSError) as exc:
                for r in results:
                    if r["error_code"] == ErrorCode.NONE:
                        r["error_code"], r["error_message"] = ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {exc}"
                return
    broker.topics.quotas = {e: v for e, v in quotas.items() if v}  # this broker at once; the others on notice
    broker.cluster.mark_dirty()
