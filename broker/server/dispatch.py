"""Request dispatch: the API registry, what ApiVersions advertises, and the interceptors around
every handler call (Kafka's KafkaApis, its request channel's metrics and ApiVersionManager).

The connection handler hands each decoded request to :meth:`RequestDispatcher.dispatch`, which
finds the API's handler, refuses a version the registry does not implement, and runs the request
through a chain of interceptors down to the handler:

    ClientQuotaThrottle  client quotas: throttle_time_ms in the answer, the connection muted after
    HandlerErrors        a handler that raises: UNKNOWN_SERVER_ERROR on what the request named
    RequestMetrics       per-API latency and counts, per-connection and per-topic figures (stats)
    ...installed         interceptors added by the layer above (tests' fault injection)
    handler              ``handle(ctx, request)`` of the API's module

An interceptor is ``async intercept(request, peer, proceed) -> dict | None``; it may change the
request, answer without calling ``proceed``, or raise :class:`DropConnection` (close without an
answer) or :class:`AnswerInVersion` (answer in another version than the request's). Interceptors
are added and removed through :meth:`RequestDispatcher.add_interceptor` /
:meth:`remove_interceptor`; a broker nobody adds one to runs the three above and nothing else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Protocol

import trio

from strom.broker import context
from strom.broker.apis import HANDLERS, SUPPORTED, SUPPORTED_RANGE
from strom.broker.errors import AnswerInVersion, DropConnection
from strom.broker.quotas import QuotaManager
from strom.broker.request_context import RequestContext
from strom.broker.stats import BrokerStats
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import api_spec

log = logging.getLogger("strom.server")

Answer = dict | None
# The rest of the chain below an interceptor: the next interceptor, at the end the handler.
Proceed = Callable[[Request, str], Awaitable[Answer]]


class RequestInterceptor(Protocol):
    """One link of the chain around the handlers."""

    async def intercept(self, request: Request, peer: str, proceed: Proceed) -> Answer: ...


# ----------------------------------------------------------------------------- ApiVersions
class ApiVersionManager:
    """What ApiVersions advertises: the registry's versions (the handlers' ranges within the
    schema's), optionally restricted to a narrower table (a test emulating an older Kafka release
    restricts it; requests outside the restriction are the restricting interceptor's to refuse)."""

    def __init__(self, supported: Sequence[tuple[int, int, int]] = SUPPORTED) -> None:
        self.supported: list[tuple[int, int, int]] = list(supported)
        self._restriction: dict[int, tuple[int, int]] | None = None
        self._advertised = self.supported

    @property
    def restricted(self) -> bool:
        return self._restriction is not None

    def restrict(self, ranges: Mapping[int, tuple[int, int]] | None) -> None:
        """Advertise only what lies inside ``ranges`` (api key -> (min, max)); None lifts it."""
        if ranges is None:
            self._restriction, self._advertised = None, self.supported
            return
        self._restriction = dict(ranges)
        out = []
        for key, lo, hi in self.supported:
            allowed = self._restriction.get(key)
            if allowed is not None and max(lo, allowed[0]) <= min(hi, allowed[1]):
                out.append((key, max(lo, allowed[0]), min(hi, allowed[1])))
        self._advertised = out

    def advertised(self) -> list[tuple[int, int, int]]:
        """(api key, min version, max version) of every API advertised."""
        return self._advertised


# ----------------------------------------------------------------------------- interceptors
class ClientQuotaThrottle:
    """Client quotas (Kafka's ClientQuotaManager): over a quota the answer carries
    throttle_time_ms and the connection reads nothing more until that time has passed."""

    def __init__(self, quotas: QuotaManager) -> None:
        self.quotas = quotas

    async def intercept(self, request: Request, peer: str, proceed: Proceed) -> Answer:
        if not self.quotas.entries:  # no quota configured: nothing to time (the usual broker)
            return await proceed(request, peer)
        started = time.perf_counter()
        body = await proceed(request, peer)
        if body is not None:
            mute_ms = self.quotas.throttle(
                request, body, time.perf_counter() - started, context.principal.get(), trio.current_time()
            )
            if mute_ms:
                context.muted_until.set(trio.current_time() + mute_ms / 1000)
        return body


class HandlerErrors:
    """A handler that raises: logged once and answered UNKNOWN_SERVER_ERROR on everything the
    request named, the connection kept, as Kafka's request handler does; where Kafka closes the
    connection instead (an acks=0 Produce has no answer to carry the error) it is closed."""

    async def intercept(self, request: Request, peer: str, proceed: Proceed) -> Answer:
        try:
            return await proceed(request, peer)
        except (DropConnection, AnswerInVersion):
            raise
        except Exception:
            body = unexpected_error_answer(request, peer)
            if body is None:
                raise DropConnection() from None
            return body


class RequestMetrics:
    """Per-API latency histogram, request and error counts, and what the connection and the
    topics did (`strom.broker.stats`), for the console and /metrics."""

    def __init__(self, stats: BrokerStats, topic_name_by_id: Callable[[bytes], str | None]) -> None:
        self.stats = stats
        self.topic_name_by_id = topic_name_by_id

    async def intercept(self, request: Request, peer: str, proceed: Proceed) -> Answer:
        api = self.stats.begin(request.header.api_key)
        started = time.perf_counter()
        body, failed = None, True
        try:
            body = await proceed(request, peer)
            failed = False
        except AnswerInVersion:
            failed = False
            raise
        finally:
            self.stats.end(
                api,
                context.connection_stats.get(None),
                request,
                body,
                time.perf_counter() - started,
                failed,
                self.topic_name_by_id,
            )
        return body


# ----------------------------------------------------------------------------- the dispatcher
class RequestDispatcher:
    """Finds each request's handler and runs it inside the interceptor chain.

    ``context``: what every handler receives as its first argument (the broker's request context).
    """

    def __init__(
        self,
        context: RequestContext | None,
        api_versions: ApiVersionManager,
        quotas: QuotaManager,
        stats: BrokerStats,
        topic_name_by_id: Callable[[bytes], str | None],
    ) -> None:
        self.context = context
        self.api_versions = api_versions
        self.topic_name_by_id = topic_name_by_id
        self._builtin: list[RequestInterceptor] = [
            ClientQuotaThrottle(quotas),
            HandlerErrors(),
            RequestMetrics(stats, topic_name_by_id),
        ]
        self._installed: list[RequestInterceptor] = []
        self._chain: Proceed = self._link(self._builtin)

    @property
    def interceptors(self) -> tuple[RequestInterceptor, ...]:
        """The chain, outermost first (the built-in ones, then those added)."""
        return (*self._builtin, *self._installed)

    def add_interceptor(self, interceptor: RequestInterceptor) -> None:
        """Run ``interceptor`` around every handler call from the next request on, inside the
        built-in ones (quotas, error answers, metrics); added twice it is still there once."""
        if interceptor not in self._installed:
            self._installed.append(interceptor)
            self._chain = self._link(self.interceptors)

    def remove_interceptor(self, interceptor: RequestInterceptor) -> None:
        if interceptor in self._installed:
            self._installed.remove(interceptor)
            self._chain = self._link(self.interceptors)

    def _link(self, interceptors: Sequence[RequestInterceptor]) -> Proceed:
        proceed: Proceed = self._call_handler
        for interceptor in reversed(interceptors):  # each bound to the rest of the chain below it
            proceed = partial(interceptor.intercept, proceed=proceed)
        return proceed

    def _call_handler(self, request: Request, peer: str) -> Awaitable[Answer]:
        module = HANDLERS[request.header.api_key]
        # every handler gets the request context (the services it may use), never the broker; the
        # root sets it once the storage is open, before any listener accepts
        assert self.context is not None
        return module.handle(self.context, request)

    def dispatch(self, request: Request, peer: str) -> Awaitable[Answer]:
        """Handle one request (await the result): its answer, None for none (acks=0). Raises
        DropConnection when the connection must close (a version the registry lacks, an
        interceptor's decision) and AnswerInVersion when the answer goes out in another version
        than the request's. Not a coroutine itself: the chain's first link is what is awaited."""
        header = request.header
        key, version = header.api_key, header.api_version
        supported = SUPPORTED_RANGE.get(key)
        if supported is None or not supported[0] <= version <= supported[1]:
            log.warning(
                "closing connection peer=%s: api_key=%d version=%d is not supported by this broker "
                "(ApiVersions lists what is)",
                peer,
                key,
                version,
            )
            raise DropConnection()
        return self._chain(request, peer)


def unexpected_error_answer(request: Request, peer: str) -> dict | None:
    """Log the handler's exception once; the UNKNOWN_SERVER_ERROR answer, or None when there is none."""
    header = request.header
    api = api_spec(header.api_key).name
    try:
        body = HANDLERS[header.api_key].error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR)
    except Exception:
        body = None
    log.exception(
        "unexpected error handling %s v%d peer=%s correlation_id=%d; %s",
        api,
        header.api_version,
        peer,
        header.correlation_id,
        "answered UNKNOWN_SERVER_ERROR" if body is not None else "closing the connection",
    )
    return body
