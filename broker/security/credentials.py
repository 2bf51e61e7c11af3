"""SCRAM credentials, kept as Kafka keeps them: per user, per mechanism, the string
``salt=..,stored_key=..,server_key=..,iterations=N`` (Kafka's ``/config/users/<user>`` config).

Standalone the users live in the broker's metadata file (``TopicStore.users``)."""

from __future__ import annotations

from strom.protocol.sasl import ScramCredential


class StandaloneCredentials:
    def __init__(self, store):
        self.store = store  # a TopicStore: .users {user: {mechanism: credential string}}, .set_user_configs

    async def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self.store.users.get(user, {}).get(mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.from_kafka_string(text)
        except ValueError:
            return None

    async def describe(self) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} of every user with a SCRAM credential."""
        out: dict[str, dict[str, int]] = {}
        for user, configs in self.store.users.items():
            for mechanism, text in configs.items():
                if mechanism.startswith("SCRAM-"):
                    try:
                        out.setdefault(user, {})[mechanism] = ScramCredential.from_kafka_string(text).iterations
                    except ValueError:
                        continue
        return out

    async def alter(self, upserts: dict[tuple[str, str], ScramCredential], deletions: set[tuple[str, str]]) -> None:
        users = {user for user, _ in [*upserts, *deletions]}
        for user in users:
            configs = dict(self.store.users.get(user, {}))
            for u, mechanism in deletions:
                if u == user:
                    configs.pop(mechanism, None)
            for (u, mechanism), credential in upserts.items():
                if u == user:
                    configs[mechanism] = credential.to_kafka_string()
            self.store.set_user_configs(user, configs)


class ZkCredentials:
    """A cluster's SCRAM credentials in ZooKeeper, as Kafka's ZooKeeper mode keeps them:
    ``/config/users/<user>`` = ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,iterations=4096"}}``.
    Read on each authentication, so every broker sees a change at once."""

    USERS = "users"

    def __init__(self, zk):
        self.zk = zk  # strom.broker.zk.zkclient.KafkaZkClient

    async def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        try:
            text = (await self.zk.get_entity_config(self.USERS, user)).get(mechanism)
        except Exception:  # an unreadable or foreign znode, a bad user name for a path
            return None
        if text is None:
            return None
        try:
            return ScramCredential.from_kafka_string(text)
        except ValueError:
            return None

    async def describe(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for user in await self.zk.get_entity_names(self.USERS):
            for mechanism, text in (await self.zk.get_entity_config(self.USERS, user)).items():
                if mechanism.startswith("SCRAM-"):
                    try:
                        out.setdefault(user, {})[mechanism] = ScramCredential.from_kafka_string(text).iterations
                    except ValueError:
                        continue
        return out

    async def alter(self, upserts: dict[tuple[str, str], ScramCredential], deletions: set[tuple[str, str]]) -> None:
        for user in {user for user, _ in [*upserts, *deletions]}:
            configs = dict(await self.zk.get_entity_config(self.USERS, user))
            for u, mechanism in deletions:
                if u == user:
                    configs.pop(mechanism, None)
            for (u, mechanism), credential in upserts.items():
                if u == user:
                    configs[mechanism] = credential.to_kafka_string()
            await self.zk.set_entity_config(self.USERS, user, configs)
