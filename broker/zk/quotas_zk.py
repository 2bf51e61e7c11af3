"""Client quotas in ZooKeeper, where ZooKeeper-era Kafka keeps them:

    /config/users/<user>                     {"version":1,"config":{"producer_byte_rate":"1048576.0"}}
    /config/users/<default>
    /config/users/<user>/clients/<client id>  (and <default> on either side)
    /config/clients/<client id>
    /config/clients/<default>
    /config/ips/<ip>                         {"version":1,"config":{"connection_creation_rate":"5.0"}}
    /config/ips/<default>

Dynamic broker configs live beside them, in /config/brokers/<id> and /config/brokers/<default>,
and group configs (KIP-848/KIP-932; Kafka keeps them in its metadata log, ZooKeeper-era Kafka had
none) in /config/groups/<group id>, the id sanitized.

Names are sanitized as Kafka's Sanitizer does (URL-encoded; "*" as %2A). Other keys in a user's
node (SCRAM credentials) are left as they are. Every change is announced under /config/changes
with the entity path ("users/<u>/clients/<c>"), which makes every broker re-read the quotas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote, unquote

from kazoo.exceptions import NodeExistsError, NoNodeError

from strom.broker.quotas import CLIENT_ID, IP, KEYS, USER
from strom.broker.zk.session import ZkSession
from strom.broker.zk.zkdata import Paths

DEFAULT = "<default>"
QUOTA_KEYS = set(KEYS[USER]) | set(KEYS[IP])


def sanitize(name: str | None) -> str:
    return DEFAULT if name is None else quote(name, safe="~")


def desanitize(name: str) -> str | None:
    return None if name == DEFAULT else unquote(name)


def entity_path(entity) -> str:
    """The path below /config of an entity ((type, name) pairs)."""
    names = dict(entity)
    if IP in names:
        return f"ips/{DEFAULT if names[IP] is None else names[IP]}"  # IPs are kept as they are
    if USER in names and CLIENT_ID in names:
        return f"users/{sanitize(names[USER])}/clients/{sanitize(names[CLIENT_ID])}"
    if USER in names:
        return f"users/{sanitize(names[USER])}"
    return f"clients/{sanitize(names[CLIENT_ID])}"


def _decode(data: bytes) -> dict[str, str]:
    try:
        doc = json.loads(data.decode("utf-8")) if data else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    config = doc.get("config", {}) if isinstance(doc, dict) else {}
    return {k: v for k, v in config.items() if isinstance(v, str)} if isinstance(config, dict) else {}


def _quota_values(config: dict[str, str]) -> dict[str, float]:
    out = {}
    for key, value in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(value)
            except ValueError:
                continue
    return out


async def read_quotas(zk: ZkSession) -> dict[tuple, dict[str, float]]:
    """Every quota entity and its values."""
    out: dict[tuple, dict[str, float]] = {}

    async def children(path: str) -> list[str]:
        try:
            return await zk.get_children(path)
        except NoNodeError:
            return []

    async def config(path: str) -> dict[str, str]:
        try:
            return _decode((await zk.get(path))[0])
        except NoNodeError:
            return {}

    for name in await children(f"{Paths.CONFIG}/clients"):
        values = _quota_values(await config(f"{Paths.CONFIG}/clients/{name}"))
        if values:
            out[((CLIENT_ID, desanitize(name)),)] = values
    for name in await children(f"{Paths.CONFIG}/ips"):
        values = _quota_values(await config(f"{Paths.CONFIG}/ips/{name}"))
        if values:
            out[((IP, None if name == DEFAULT else name),)] = values
    for user in await children(f"{Paths.CONFIG}/users"):
        values = _quota_values(await config(f"{Paths.CONFIG}/users/{user}"))
        if values:
            out[((USER, desanitize(user)),)] = values
        for client in await children(f"{Paths.CONFIG}/users/{user}/clients"):
            values = _quota_values(await config(f"{Paths.CONFIG}/users/{user}/clients/{client}"))
            if values:
                out[((CLIENT_ID, desanitize(client)), (USER, desanitize(user)))] = values
    return out


async def write_quota(zk: ZkSession, entity, values: dict[str, float]) -> None:
    """Replace the quota keys of one entity and announce it."""
    rel = entity_path(entity)
    path = f"{Paths.CONFIG}/{rel}"
    try:
        data, _ = await zk.get(path)
        current = _decode(data)
    except NoNodeError:
        current = {}
    config = {k: v for k, v in current.items() if k not in QUOTA_KEYS}
    config.update({k: repr(float(v)) for k, v in values.items()})
    await _write_config(zk, rel, config)


async def read_broker_configs(zk: ZkSession) -> dict[str, dict[str, str]]:
    """Dynamic broker configs: {"" (the cluster default) or node id: {key: value}}."""
    return await _read_entities(zk, "brokers", lambda node: "" if node == DEFAULT else node)


async def _read_entities(zk: ZkSession, kind: str, name_of: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """{name_of(node): its configs} of every node under /config/<kind> that has any."""
    out: dict[str, dict[str, str]] = {}
    try:
        nodes = await zk.get_children(f"{Paths.CONFIG}/{kind}")
    except NoNodeError:
        return out
    for node in nodes:
        try:
            config = _decode((await zk.get(f"{Paths.CONFIG}/{kind}/{node}"))[0])
        except NoNodeError:
            continue
        if config:
            out[name_of(node)] = config
    return out


async def write_broker_config(zk: ZkSession, name: str, config: dict[str, str]) -> None:
    """Replace the dynamic configs of broker `name` ("" for the default) and announce it."""
    await _write_config(zk, f"brokers/{DEFAULT if name == '' else name}", dict(config))


EMPTY_GROUP = "<empty>"  # the node of group id "" (a znode needs a name)


def group_node(group_id: str) -> str:
    """A group id as a znode name: URL-encoded, "." too ("." and ".." are no znode names)."""
    return quote(group_id, safe="~").replace(".", "%2E") or EMPTY_GROUP


def group_id_of(node: str) -> str:
    return "" if node == EMPTY_GROUP else unquote(node)


async def read_group_configs(zk: ZkSession) -> dict[str, dict[str, str]]:
    """Every group's own configs: {group id: {key: value}}."""
    return await _read_entities(zk, "groups", group_id_of)


async def write_group_config(zk: ZkSession, group_id: str, config: dict[str, str]) -> None:
    """Replace the configs of group `group_id` (empty: its node goes) and announce it."""
    rel = f"groups/{group_node(group_id)}"
    if config:
        await _write_config(zk, rel, dict(config))
        return
    try:
        await zk.delete(f"{Paths.CONFIG}/{rel}")
    except NoNodeError:
        return
    await _announce(zk, rel)


async def _write_config(zk: ZkSession, rel: str, config: dict[str, str]) -> None:
    path = f"{Paths.CONFIG}/{rel}"
    payload = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
    try:
        await zk.set(path, payload)
    except NoNodeError:
        try:
            await zk.create(path, payload, makepath=True)
        except NodeExistsError:
            await zk.set(path, payload)
    await _announce(zk, rel)


async def _announce(zk: ZkSession, rel: str) -> None:
    notification = json.dumps({"version": 2, "entity_path": rel}, separators=(",", ":")).encode()
    await zk.create(f"{Paths.CONFIG_CHANGES}/config_change_", notification, sequence=True, makepath=True)
