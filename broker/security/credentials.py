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
            for (u, mechanism) in deletions:
                if u == user:
                    configs.pop(mechanism, None)
            for (u, mechanism), credential in upserts.items():
                if u == user:
                    configs[mechanism] = credential.to_kafka_string()
            self.store.set_user_configs(user, configs)
