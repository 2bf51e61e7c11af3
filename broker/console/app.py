"""The console's ASGI application (Starlette): pages, the JSON API, actions and /metrics.

Pages render the same dicts the JSON endpoints return (`views.Views`). Actions are POSTs carrying
the CSRF token the pages embed (form field `csrf` or header `X-CSRF-Token`) and answer JSON:
`{"ok": true, ...}` or `{"error": "<Kafka error name>", "message": "..."}` with a 4xx status.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import logging
import secrets
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs

import anyio
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import metrics, records
from .chart import svg_chart
from .source import BrokerSource, ConsoleError
from .views import Views, gc_paused

log = logging.getLogger("strom.console")

STATIC_DIR = Path(__file__).parent / "static"
MAX_CHARTS = 12
TOPICS_PER_PAGE = 100


def _human_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _duration(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def _timestamp(ms) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


class Access:
    """Who may use the console: loopback peers when no secret is set; otherwise whoever presents
    the basic-auth credentials or the bearer token (compared in constant time)."""

    def __init__(self, config):
        self.username = config["console.auth.username"]
        self.password = config["console.auth.password"]
        self.token = config["console.auth.token"]

    @property
    def open(self) -> bool:
        return not self.password and not self.token

    def allowed(self, scope) -> bool:
        if self.open:
            client = scope.get("client")
            try:
                return client is not None and ipaddress.ip_address(client[0]).is_loopback
            except ValueError:
                return False
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and self.token:
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip()).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            if (
                self.password
                and hmac.compare_digest(user.encode(), (self.username or "").encode())
                and hmac.compare_digest(password.encode(), self.password.encode())
            ):
                return True
            if self.token and hmac.compare_digest(password.encode(), self.token.encode()):
                return True
        return False


class AccessMiddleware:
    def __init__(self, app, access: Access):
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not self.access.allowed(scope):
            if self.access.open:
                response = Response(
                    "The console answers loopback clients only (set console.auth.* to open it).\n",
                    status_code=403,
                    media_type="text/plain",
                )
            else:
                response = Response(
                    "Authentication required.\n",
                    status_code=401,
                    media_type="text/plain",
                    headers={"WWW-Authenticate": 'Basic realm="strom console"'},
                )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _paused(endpoint):
    """Build the answer with the cyclic collector paused (see views.gc_paused); sending it,
    however slow the client, happens after."""

    async def wrapped(request):
        with gc_paused():
            return await endpoint(request)

    return wrapped


def build_app(source: BrokerSource, history) -> Starlette:
    views = Views(source, history)
    csrf = secrets.token_urlsafe(32)
    env = Environment(loader=PackageLoader("strom.broker.console", "templates"), autoescape=select_autoescape(["html"]))
    env.filters.update(
        bytes=_human_bytes,
        duration=_duration,
        timestamp=_timestamp,
        rate=lambda v: f"{v:,.1f}" if v is not None else "-",
    )
    env.globals.update(csrf=csrf)

    async def page(name: str, status: int = 200, **context) -> HTMLResponse:
        """Render from the snapshot dicts in a worker thread: a page of 1,000 topics takes tens
        of milliseconds of templating that Kafka requests need not wait behind."""
        template = env.get_template(name)
        context.setdefault("node_id", source.node_id)
        context.setdefault("cluster_id", source.cluster_id())
        html = await anyio.to_thread.run_sync(lambda: template.render(**context))
        return HTMLResponse(html, status_code=status)

    async def not_found(what: str) -> HTMLResponse:
        return await page("error.html", 404, title="Not found", message=what)

    def json_error(exc: ConsoleError) -> JSONResponse:
        return JSONResponse({"error": exc.code, "message": exc.message}, status_code=exc.status)

    # ------------------------------------------------------------------ pages
    async def overview_page(request: Request):
        return await page("overview.html", title="Overview", data=await views.overview())

    async def topics_page(request: Request):
        query = request.query_params.get("q") or None
        names = views.topic_names(query)
        pages = max(1, -(-len(names) // TOPICS_PER_PAGE))
        try:
            number = min(max(1, int(request.query_params.get("page", "1"))), pages)
        except ValueError:
            number = 1
        shown = names[(number - 1) * TOPICS_PER_PAGE : number * TOPICS_PER_PAGE]
        return await page(
            "topics.html",
            title="Topics",
            topics=await views.topics(shown),
            query=query or "",
            page_number=number,
            pages=pages,
            matching=len(names),
        )

    async def topic_page(request: Request):
        name = request.path_params["name"]
        data = views.topic(name)
        if data is None:
            return await not_found(f"Topic {name} does not exist.")
        hist = history.topic(name)
        chart = svg_chart(hist["times"], [("log end offset", hist["log_end_offset"], "#2563eb")])
        return await page("topic.html", title=f"Topic {name}", data=data, chart=Markup(chart))

    async def records_page(request: Request):
        name = request.path_params["name"]
        try:
            data = await _browse(request, name)
        except ConsoleError as exc:
            return await page("error.html", exc.status, title="Records", message=exc.message)
        return await page(
            "records.html",
            title=f"Records of {name}",
            data=data,
            query=dict(request.query_params),
            partitions=(source.topic(name).partitions if source.topic(name) else 0),
        )

    async def groups_page(request: Request):
        return await page("groups.html", title="Consumer groups", groups=await views.groups())

    async def group_page(request: Request):
        group_id = request.path_params["group"]
        data = views.group(group_id)
        if data is None:
            other = source.group_coordinator_id(group_id) if source.clustered else None
            if other is not None and other != source.node_id:
                return await not_found(f"Group {group_id} is coordinated by broker {other}: its console shows it.")
            return await not_found(f"Group {group_id} does not exist.")
        hist = history.group(group_id)
        charts = []
        # a chart per partition, the largest lag first, at most MAX_CHARTS (the API has them all)
        ranked = sorted(
            hist["partitions"], key=lambda p: (-(p["lag"][-1] if p["lag"] else 0), p["topic"], p["partition"])
        )
        for p in ranked[:MAX_CHARTS]:
            svg = svg_chart(
                p["times"],
                [
                    ("log end offset", p["log_end_offset"], "#2563eb"),
                    ("committed offset", p["committed_offset"], "#16a34a"),
                    ("lag", p["lag"], "#dc2626"),
                ],
            )
            charts.append({"topic": p["topic"], "partition": p["partition"], "svg": Markup(svg)})
        return await page(
            "group.html",
            title=f"Group {group_id}",
            data=data,
            charts=charts,
            more_charts=max(0, len(ranked) - MAX_CHARTS),
        )

    async def clients_page(request: Request):
        return await page("clients.html", title="Clients", clients=views.clients())

    # ------------------------------------------------------------------ JSON
    async def api_overview(request: Request):
        return JSONResponse(await views.overview())

    async def api_brokers(request: Request):
        return JSONResponse(views.brokers())

    async def api_topics(request: Request):
        return JSONResponse(await views.topics(views.topic_names(request.query_params.get("q") or None)))

    async def api_topic(request: Request):
        data = views.topic(request.path_params["name"])
        if data is None:
            return JSONResponse({"error": "UNKNOWN_TOPIC_OR_PARTITION", "message": "no such topic"}, 404)
        return JSONResponse(data)

    async def api_topic_history(request: Request):
        return JSONResponse(history.topic(request.path_params["name"]))

    async def api_records(request: Request):
        try:
            return JSONResponse(await _browse(request, request.path_params["name"]))
        except ConsoleError as exc:
            return json_error(exc)

    async def share_groups_page(request: Request):
        return await page("share_groups.html", title="Share groups", groups=await views.share_groups())

    async def api_share_groups(request: Request):
        return JSONResponse(await views.share_groups())

    async def api_groups(request: Request):
        return JSONResponse(await views.groups())

    async def api_group(request: Request):
        data = views.group(request.path_params["group"])
        if data is None:
            return JSONResponse(
                {"error": "GROUP_ID_NOT_FOUND", "message": "group not coordinated by this broker or unknown"}, 404
            )
        return JSONResponse(data)

    async def api_group_history(request: Request):
        return JSONResponse(history.group(request.path_params["group"]))

    async def api_clients(request: Request):
        return JSONResponse(views.clients())

    async def metrics_endpoint(request: Request):
        families = await metrics.collect(source)
        body = await anyio.to_thread.run_sync(metrics.render, families)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    async def _browse(request: Request, name: str) -> dict:
        q = request.query_params
        try:
            partition = int(q.get("partition", "0"))
            offset = int(q["offset"]) if q.get("offset") not in (None, "") else None
            timestamp = int(q["timestamp"]) if q.get("timestamp") not in (None, "") else None
            to_offset = int(q["to_offset"]) if q.get("to_offset") not in (None, "") else None
            to_timestamp = int(q["to_timestamp"]) if q.get("to_timestamp") not in (None, "") else None
            limit = int(q.get("limit") or 50)
        except ValueError:
            raise ConsoleError(
                "INVALID_REQUEST",
                "partition, offset, timestamp, to_offset, to_timestamp and limit must be integers",
                400,
            ) from None
        return await records.browse(
            source,
            name,
            partition,
            offset=offset,
            timestamp=timestamp,
            to_offset=to_offset,
            to_timestamp=to_timestamp,
            limit=limit,
            fmt=q.get("format") or "text",
        )

    # ------------------------------------------------------------------ actions
    async def _form(request: Request) -> dict:
        raw = await request.body()
        if len(raw) > 65536:
            raise ConsoleError("INVALID_REQUEST", "request body too large", 413)
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            try:
                data = json.loads(raw or b"{}")
            except ValueError:
                raise ConsoleError("INVALID_REQUEST", "body is not JSON", 400) from None
            if not isinstance(data, dict):
                raise ConsoleError("INVALID_REQUEST", "body must be a JSON object", 400)
            return {k: str(v) if v is not None else "" for k, v in data.items()}
        return {k: v[-1] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}

    def _check_csrf(request: Request, form: dict) -> None:
        token = request.headers.get("x-csrf-token") or form.get("csrf", "")
        if not hmac.compare_digest(token.encode(), csrf.encode()):
            raise ConsoleError("INVALID_CSRF_TOKEN", "missing or wrong CSRF token: reload the page and try again", 403)
        if form.get("confirm") not in ("yes", "true", "1"):
            raise ConsoleError("NOT_CONFIRMED", "actions need confirm=yes", 400)

    def action(handler):
        async def endpoint(request: Request):
            try:
                form = await _form(request)
                _check_csrf(request, form)
                result = await handler(request, form)
            except ConsoleError as exc:
                log.info("console action %s refused: %s %s", request.url.path, exc.code, exc.message)
                return json_error(exc)
            log.info("console action %s done: %s", request.url.path, result.get("message"))
            return JSONResponse({"ok": True, **result})

        return endpoint

    def _int(form: dict, key: str, default=None) -> int:
        value = form.get(key)
        if value in (None, ""):
            if default is not None:
                return default
            raise ConsoleError("INVALID_REQUEST", f"{key} is required", 400)
        try:
            return int(value)
        except ValueError:
            raise ConsoleError("INVALID_REQUEST", f"{key} must be an integer", 400) from None

    async def delete_group(request: Request, form: dict):
        group_id = request.path_params["group"]
        source.delete_group(group_id)
        return {"message": f"Group {group_id} deleted."}

    async def reset_offsets(request: Request, form: dict):
        group_id = request.path_params["group"]
        group = source.group(group_id)
        if group is None and source.consumer_group(group_id) is None:
            raise ConsoleError("GROUP_ID_NOT_FOUND", f"Group {group_id} does not exist.", 404)
        committed = group.offsets if group is not None else {}
        to = form.get("to", "")
        topic = form.get("topic") or None
        partition = _int(form, "partition", -1)
        wanted = [
            tp
            for tp in sorted(committed)
            if (topic is None or tp[0] == topic) and (partition < 0 or tp[1] == partition)
        ]
        if topic is not None and not wanted:
            info = source.topic(topic)
            if info is None:
                raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic} does not exist.", 404)
            wanted = [(topic, p) for p in range(info.partitions) if partition < 0 or p == partition]
        if not wanted:
            raise ConsoleError("INVALID_REQUEST", "the group has no committed offsets; name a topic", 400)
        targets = {}
        for t, p in wanted:
            part = source.local_partition(t, p)
            if part is None or not part.is_leader:
                raise ConsoleError("NOT_LEADER_OR_FOLLOWER", f"{t}-{p} is not led by this broker", 409)
            start, end = part.log.log_start_offset, part.high_watermark
            if to == "earliest":
                targets[(t, p)] = start
            elif to == "latest":
                targets[(t, p)] = end
            elif to == "offset":
                targets[(t, p)] = min(max(_int(form, "offset"), start), end)
            elif to == "timestamp":
                import trio

                found = await trio.to_thread.run_sync(part.log.fetch_offset_by_timestamp, _int(form, "timestamp"))
                targets[(t, p)] = found.offset if found is not None else end
            else:
                raise ConsoleError("INVALID_REQUEST", "to must be earliest, latest, offset or timestamp", 400)
        source.reset_offsets(group_id, targets)
        return {
            "message": f"Offsets of group {group_id} reset ({to}).",
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(targets.items())],
        }

    async def remove_member(request: Request, form: dict):
        group_id = request.path_params["group"]
        instance = form.get("instance_id") or ""
        if not instance:
            raise ConsoleError("INVALID_REQUEST", "instance_id is required", 400)
        source.remove_static_member(group_id, instance)
        return {"message": f"Static member {instance} removed from group {group_id}."}

    async def delete_records(request: Request, form: dict):
        name = request.path_params["name"]
        partition = _int(form, "partition")
        offset = _int(form, "offset")
        start = source.delete_records(name, partition, offset)
        return {"message": f"Records of {name}-{partition} before offset {start} deleted.", "log_start_offset": start}

    async def delete_topic(request: Request, form: dict):
        name = request.path_params["name"]
        await source.delete_topic(name)
        return {"message": f"Topic {name} deleted."}

    routes = [
        Route("/", overview_page),
        Route("/topics", topics_page),
        Route("/topics/{name}", topic_page),
        Route("/topics/{name}/records", records_page),
        Route("/groups", groups_page),
        Route("/groups/{group}", group_page),
        Route("/share-groups", share_groups_page),
        Route("/clients", clients_page),
        Route("/api/overview", api_overview),
        Route("/api/brokers", api_brokers),
        Route("/api/topics", api_topics),
        Route("/api/topics/{name}", api_topic),
        Route("/api/topics/{name}/history", api_topic_history),
        Route("/api/topics/{name}/records", api_records),
        Route("/api/topics/{name}/delete-records", action(delete_records), methods=["POST"]),
        Route("/api/topics/{name}/delete", action(delete_topic), methods=["POST"]),
        Route("/api/groups", api_groups),
        Route("/api/share-groups", api_share_groups),
        Route("/api/groups/{group}", api_group),
        Route("/api/groups/{group}/history", api_group_history),
        Route("/api/groups/{group}/delete", action(delete_group), methods=["POST"]),
        Route("/api/groups/{group}/reset-offsets", action(reset_offsets), methods=["POST"]),
        Route("/api/groups/{group}/remove-member", action(remove_member), methods=["POST"]),
        Route("/api/clients", api_clients),
        Route("/metrics", metrics_endpoint),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    routes = [Route(r.path, _paused(r.endpoint), methods=r.methods) if isinstance(r, Route) else r for r in routes]
    app = Starlette(routes=routes)
    app.state.csrf = csrf
    return app
