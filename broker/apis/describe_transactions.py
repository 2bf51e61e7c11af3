"""DescribeTransactions: the state of transactional ids this broker coordinates
(what `kafka-transactions.sh describe` shows). An id coordinated elsewhere answers
NOT_COORDINATOR, an unknown one TRANSACTIONAL_ID_NOT_FOUND."""
from __future__ import annotations

from strom.protocol.schema import ApiKey

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
VERSIONS = (0, 0)


async def handle(broker, request) -> dict:
    return {"throttle_time_ms": 0,
            "transaction_states": [broker.txn.describe(tid) for tid in request.body.transactional_ids]}
