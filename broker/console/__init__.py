"""The web console and /metrics, served on the broker's trio loop (see README, "Console").

`Console(broker).run` serves the configured `console.listeners` with Hypercorn's trio worker and
runs the history sampler beside it. The ASGI app only reads the broker through `BrokerSource`,
and `BrokerSource` only what `ConsoleBroker` (a typing.Protocol) names.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .source import ConsoleBroker

log = logging.getLogger("strom.console")

# what the console needs beyond the broker: the 'console' extra (pip install 'strom[console]')
REQUIRED_MODULES = ("hypercorn", "starlette", "jinja2")


def unavailable_reason() -> str | None:
    """Why the console cannot run in this environment (a module of the 'console' extra is missing),
    or None when it can."""
    missing = []
    for name in REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return None
    return (
        f"console.listeners needs {', '.join(missing)}, which come with the 'console' extra: "
        f"pip install 'strom[console]'"
    )


class Console:
    """``broker``: what the console reads (``source.ConsoleBroker``)."""

    def __init__(self, broker: ConsoleBroker) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        from .history import History
        from .source import BrokerSource

        self.config = broker.config
        self.source = BrokerSource(broker)
        config = self.config
        self.history = History(
            self.source, config["console.history.interval.ms"] / 1000, config["console.history.retention.ms"] / 1000
        )
        self.urls: list[str] = []

    @property
    def url(self) -> str | None:
        return self.urls[0] if self.urls else None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from hypercorn.config import Config
        from hypercorn.trio import serve

        from .app import Access, AccessMiddleware, build_app

        config = Config()
        config.bind = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.config.console_listeners]
        config.accesslog = None
        http_log = logging.getLogger("strom.console.http")
        if http_log.level == logging.NOTSET:
            http_log.setLevel(logging.WARNING)  # its "Running on" line repeats ours below
        config.errorlog = http_log
        config.graceful_timeout = 1.0
        config.keep_alive_timeout = 30
        config.include_server_header = False
        access = Access(self.config)
        app = AccessMiddleware(build_app(self.source, self.history), access)
        async with trio.open_nursery() as nursery:
            try:
                self.urls = await nursery.start(serve, app, config)
            except OSError as exc:
                raise OSError(f"console.listeners: cannot listen on {config.bind}: {exc.strerror or exc}") from None
            nursery.start_soon(self.history.run)
            log.info(
                "console listening on %s%s", ", ".join(self.urls), "" if access.open else " (authentication required)"
            )
            task_status.started(self.urls)
