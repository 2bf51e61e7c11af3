"""Per-connection facts a handler may need, without threading them through every call.

Each connection runs in its own trio task, and trio gives every task its own context, so a
value set here by the connection handler is what that connection's request handlers see.
"""

from contextvars import ContextVar

# The peer as Kafka shows it in DescribeGroups: "/127.0.0.1".
client_host: ContextVar[str] = ContextVar("client_host", default="")

# This connection's accounting (strom.broker.stats.ConnectionStats), for the console and metrics.
connection_stats: ContextVar = ContextVar("connection_stats", default=None)

# The listener the connection came in on (Metadata answers with that listener's endpoints).
listener_name: ContextVar[str] = ContextVar("listener_name", default="")

# The authenticated principal of the connection, as Kafka writes it: "User:alice".
principal: ContextVar[str] = ContextVar("principal", default="User:ANONYMOUS")

# Until when (trio clock) the connection reads nothing more: a client over its quota (0: not muted).
muted_until: ContextVar[float] = ContextVar("muted_until", default=0.0)

# Tests' fault injection (strom.testing.faults): send only this many bytes of the answer being
# built, then close the connection (None: the whole answer, as always).
cut_answer_after: ContextVar[int | None] = ContextVar("cut_answer_after", default=None)
