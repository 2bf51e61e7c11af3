"""What every cluster-facing `strom` tool shares: connection options, client construction,
key=value parsing, error reporting with a next step, and JSON output.

Exit codes follow the Kafka tools' spirit: 0 ok, 1 an error reported by (or reaching) the
cluster (:class:`ClusterError`), 2 a usage error (click's own ``UsageError``/``BadParameter``).

confluent-kafka is imported inside the functions that need it, so importing this module (which
`strom serve` does through ``tools.commands``) costs nothing.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "STROM_BOOTSTRAP_SERVER"
REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 3.0

F = TypeVar("F", bound=Callable[..., Any])


class ClusterError(click.ClickException):
    """The cluster answered with an error, or could not be reached: exit code 1."""

    exit_code = 1


# --------------------------------------------------------------------------- options


def connection_options(func: F) -> F:
    """``--bootstrap-server`` and ``--command-config``, usable on a group and on its subcommands."""
    func = click.option(
        "--command-config",
        "command_config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A client .properties file (security settings and the like).",
    )(func)
    func = click.option(
        "--bootstrap-server",
        "bootstrap_server",
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"Brokers to connect to [default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP}].",
    )(func)
    return func


def remember_connection(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> None:
    """Store a group's connection options so its subcommands can fall back on them."""
    ctx.ensure_object(dict)
    ctx.obj["bootstrap_server"] = bootstrap_server
    ctx.obj["command_config"] = command_config


def resolve_connection(bootstrap_server: str | None, command_config: Path | None) -> tuple[str, dict[str, str]]:
    """(bootstrap servers, extra client config) from the subcommand's options, then the group's."""
    ctx = click.get_current_context()
    parent = ctx.find_object(dict) or {}
    bootstrap = bootstrap_server or parent.get("bootstrap_server") or _env_bootstrap() or DEFAULT_BOOTSTRAP
    config_path = command_config or parent.get("command_config")
    extra = read_properties(config_path) if config_path else {}
    return bootstrap, extra


def _env_bootstrap() -> str | None:
    return os.environ.get(BOOTSTRAP_ENV) or None


# --------------------------------------------------------------------------- key=value


def parse_kv(items: Iterable[str], option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a malformed item is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected key=value", param_hint=option)
        out[key.strip()] = value
    return out


def split_config_list(text: str) -> list[str]:
    """Split Kafka's ``k1=v1,k2=[a,b]`` on the commas outside square brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_config_items(items: Iterable[str], option: str) -> dict[str, str]:
    """Repeatable ``k=v`` or comma lists ``k1=v1,k2=[a,b]`` (brackets hold list values)."""
    pairs = [part for item in items for part in split_config_list(item)]
    parsed = parse_kv(pairs, option)
    return {k: _unbracket(v) for k, v in parsed.items()}


def _unbracket(value: str) -> str:
    value = value.strip()
    return value[1:-1] if value.startswith("[") and value.endswith("]") else value


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style .properties file (``k=v`` or ``k: v``; ``#``/``!`` comments)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    out: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise click.BadParameter(f"{path}: {line!r} is not key=value")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


# --------------------------------------------------------------------------- clients


def import_confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise click.ClickException(
            "this command needs the confluent-kafka client, which comes with the 'tools' extra: "
            "pip install 'strom[tools]'"
        ) from None
    return confluent_kafka


def quiet_logger() -> logging.Logger:
    """librdkafka's own log lines, routed to Python logging and kept quiet unless -v is used."""
    logger = logging.getLogger("strom.tools.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def client_config(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": quiet_logger(), **(extra or {})}


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for entry in bootstrap.split(","):
        entry = entry.strip().split("://")[-1]
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit():
            raise click.BadParameter(f"{entry!r}: expected HOST:PORT", param_hint="--bootstrap-server")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    return out


def unreachable_message(bootstrap: str) -> str:
    return (
        f"cannot reach {bootstrap}: is the broker running? start it with `strom serve`, "
        f"or point --bootstrap-server at a running broker"
    )


def ensure_reachable(bootstrap: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast with a helpful message when no bootstrap address accepts a TCP connection."""
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError:
            continue
    raise ClusterError(unreachable_message(bootstrap))


def admin_client(bootstrap: str, extra: Mapping[str, str] | None = None) -> Any:
    import_confluent()
    ensure_reachable(bootstrap)
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(bootstrap, extra))


# --------------------------------------------------------------------------- errors

_HINTS: dict[str, str] = {
    "UNKNOWN_TOPIC_OR_PART": "list the topics with `strom topics list`",
    "UNKNOWN_TOPIC_ID": "list the topics with `strom topics list`",
    "TOPIC_ALREADY_EXISTS": "pass --if-not-exists to ignore existing topics",
    "INVALID_REPLICATION_FACTOR": "a replication factor cannot exceed the number of brokers",
    "INVALID_PARTITIONS": "the partition count must be positive and larger than the current one",
    "INVALID_CONFIG": "check the config name and value with `strom configs describe --all`",
    "GROUP_ID_NOT_FOUND": "list the groups with `strom groups list`",
    "NON_EMPTY_GROUP": "stop the group's consumers first",
    "UNSUPPORTED_VERSION": "the broker does not support this request",
    "_TRANSPORT": "is the broker running? start it with `strom serve`",
    "_TIMED_OUT": "the cluster did not answer in time; is it running and reachable?",
    "_ALL_BROKERS_DOWN": "is the broker running? start it with `strom serve`",
}


def describe_kafka_error(err: Any, what: str = "") -> str:
    """A one-line message for a confluent_kafka KafkaError (or exception), with a next step."""
    kafka_error = err.args[0] if hasattr(err, "args") and err.args and hasattr(err.args[0], "name") else err
    name = getattr(kafka_error, "name", lambda: "")()
    text = kafka_error.str() if hasattr(kafka_error, "str") else str(kafka_error)
    message = f"{what}: {text}" if what else text
    hint = _HINTS.get(name)
    return f"{message} ({hint})" if hint else message


def error_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    return err.name() if hasattr(err, "name") else ""


IGNORED = object()
"""What :func:`wait_futures` gives for a key whose error was in ``ignore``."""


def wait_futures(
    futures: Mapping[Any, Any],
    what: Callable[[Any], str],
    ignore: frozenset[str] = frozenset(),
    timeout: float = REQUEST_TIMEOUT_S,
) -> dict[Any, Any]:
    """Results of an AdminClient futures map; errors named in ``ignore`` give IGNORED, others raise."""
    ck = import_confluent()
    results: dict[Any, Any] = {}
    failures: list[str] = []
    for key, future in futures.items():
        try:
            results[key] = future.result(timeout=timeout)
        except ck.KafkaException as exc:
            if error_name(exc) in ignore:
                results[key] = IGNORED
            else:
                failures.append(describe_kafka_error(exc, what(key)))
        except TimeoutError:
            failures.append(f"{what(key)}: no answer within {timeout:.0f}s")
    if failures:
        raise ClusterError("\n".join(failures))
    return results


def cluster_errors(func: F) -> F:
    """Turn a client-library KafkaException escaping a command into a :class:`ClusterError`."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ != "KafkaException" or "confluent_kafka" not in type(exc).__module__:
                raise
            raise ClusterError(describe_kafka_error(exc)) from None

    return wrapper  # type: ignore[return-value]


def cluster_call(func: Callable[[], Any], what: str) -> Any:
    """Run a blocking client call, turning a KafkaException into a :class:`ClusterError`."""
    ck = import_confluent()
    try:
        return func()
    except ck.KafkaException as exc:
        raise ClusterError(describe_kafka_error(exc, what)) from None


# --------------------------------------------------------------------------- output


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, sort_keys=False, default=str))


def text_or_base64(data: bytes | None) -> dict[str, Any]:
    """``{"text": ...}`` for UTF-8 data, ``{"base64": ...}`` otherwise, ``None`` stays None."""
    import base64

    if data is None:
        return {"text": None}
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def print_table(rows: list[list[Any]], headers: list[str]) -> None:
    """Left-aligned columns, as kafka-consumer-groups prints them."""
    cells = [headers] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def stderr(message: str) -> None:
    click.echo(message, err=True)


# --------------------------------------------------------------------------- requests over a socket

API_VERSIONS_KEY = 18
FIND_COORDINATOR_KEY = 10
_MAX_PROBE_RESPONSE = 1 << 20


class KafkaSocket:
    """Kafka requests over one connected blocking socket (its timeout bounds every wait), through
    the protocol's client-role ``Connection``: it frames, numbers and decodes; this only moves bytes.
    ``ValueError`` when the broker closes the connection or answers something unusable."""

    def __init__(
        self, sock: socket.socket, client_id: str | None = "strom-tools", max_response_size: int = 0x7FFFFFFF
    ) -> None:
        from strom.protocol.connection import CLIENT, Connection  # the codec loads on first use only

        self.sock = sock
        self.conn = Connection(CLIENT, max_response_size, client_id, first_correlation_id=1)

    def send(self, api_key: int, version: int, body: dict) -> int:
        """Send a request; its correlation id."""
        self.sock.sendall(self.conn.send_request(api_key, version, body))
        return self.conn.last_correlation_id

    def receive(self) -> Any:
        """The next response (a ``strom.protocol.connection.Response``)."""
        from strom.protocol.connection import Response

        event = self._next_event()
        if not isinstance(event, Response):
            raise ValueError(f"unusable response: {event}")
        return event

    def receive_frame(self) -> bytes:
        """The next frame undecoded (its correlation id first)."""
        from strom.protocol.connection import RawFrame

        self.conn.raw_frames = True
        try:
            event = self._next_event()
        finally:
            self.conn.raw_frames = False
        assert isinstance(event, RawFrame)
        return event.data

    def request(self, api_key: int, version: int, body: dict) -> Any:
        """Send a request and wait for its answer: the decoded body."""
        self.send(api_key, version, body)
        return self.receive().body

    def close(self) -> None:
        self.sock.close()

    def _next_event(self) -> Any:
        from strom.protocol.connection import NEED_DATA, ConnectionClosed, FrameTooLarge

        while (event := self.conn.next_event()) is NEED_DATA:
            self.conn.receive_data(self.sock.recv(1 << 16))
        if isinstance(event, ConnectionClosed):
            raise ValueError("connection closed mid-response")
        if isinstance(event, FrameTooLarge):
            raise ValueError(f"implausible response size {event.size}")
        return event


def supported_apis(
    bootstrap: str, extra: Mapping[str, str] | None = None, timeout: float = CONNECT_TIMEOUT_S
) -> dict[int, tuple[int, int]] | None:
    """{api_key: (min, max)} from an ApiVersions v0 request to the first reachable bootstrap broker.

    Only over PLAINTEXT (None for other security protocols, or when no broker answers sanely).
    """
    if (extra or {}).get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        return None
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                return api_versions(sock)
        except (OSError, ValueError):
            continue
    return None


def api_versions(sock: socket.socket) -> dict[int, tuple[int, int]]:
    """Ask over a connected socket (blocking, with its timeout); ValueError if the answer is unusable."""
    answer = KafkaSocket(sock, max_response_size=_MAX_PROBE_RESPONSE).request(API_VERSIONS_KEY, 0, {})
    if answer.error_code != 0:
        raise ValueError(f"ApiVersions answered error {answer.error_code}")
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


GROUPS_UNSUPPORTED = "broker does not support consumer groups yet"


def require_group_support(bootstrap: str, extra: Mapping[str, str] | None = None) -> None:
    """Fail clearly instead of timing out when the broker has no group coordinator."""
    apis = supported_apis(bootstrap, extra)
    if apis is not None and FIND_COORDINATOR_KEY not in apis:
        raise ClusterError(
            f"{GROUPS_UNSUPPORTED} (it does not offer FindCoordinator): "
            f"consume without --group, which assigns partitions directly"
        )
