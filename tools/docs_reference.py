"""The documentation site's generated reference: Markdown rendered from the code's own registries.

A Sphinx extension (``docs/conf.py`` loads it): the directive ``strom-reference`` takes one of
:data:`GENERATORS`' names and puts that generator's Markdown into the page at build time, parsed
as MyST, so no table of configuration keys, APIs, metrics, znodes, files, dependencies,
compatibility results or benchmark figures is ever copied by hand:

    ```{strom-reference} broker-configs
    ```

Each generator is a plain function returning Markdown (tests call them without Sphinx). What a
generator cannot describe (a file in the data dir, a dependency with no reason given) is a
:class:`ReferenceWarning`: the extension logs it as a Sphinx warning, which fails the ``-W`` build.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_RESULTS = ROOT / "docs" / "reference" / "results"


class ReferenceWarning(Exception):
    """Something a generated page cannot show as it should (the build fails on it under -W)."""


@dataclass
class Rendered:
    markdown: str
    warnings: list[str] = field(default_factory=list)


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _code(text: str) -> str:
    return f"`{text}`" if text else "—"


# --------------------------------------------------------------------------- configuration


def _entry(key: str, meaning: str, facts: list[str]) -> str:
    """One key as a definition list item: the key, then its meaning and its facts."""
    return f"`{key}`\n: {' '.join(meaning.split())} *{'; '.join(facts)}.*\n"


def broker_configs() -> Rendered:
    from strom.broker.config import BROKER_CONFIGS, format_value

    entries = []
    for d in BROKER_CONFIGS.values():
        default = format_value(d.default)
        facts = [d.type, f"default `{default}`" if default else "no default"]
        if d.minimum is not None:
            facts.append(f"at least {d.minimum}")
        if d.choices:
            facts.append("one of " + ", ".join(f"`{c}`" for c in d.choices))
        entries.append(_entry(d.name, d.doc, facts))
    return Rendered("\n".join(entries))


def topic_configs() -> Rendered:
    from strom.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS, format_value

    entries = []
    for key, broker_key, type_, default in TOPIC_CONFIGS.values():
        if broker_key is not None and broker_key in BROKER_CONFIGS:
            meaning = f"The broker's `{broker_key}` for this topic: {BROKER_CONFIGS[broker_key].doc}"
        else:
            meaning = "Topic-level only (no broker default)."
        shown = format_value(default)
        entries.append(_entry(key, meaning, [type_, f"default `{shown}`" if shown else "default empty"]))
    return Rendered("\n".join(entries))


def dev_configs() -> Rendered:
    from strom.broker.config import DEV_CONFIGS

    return Rendered(_table(("key", "value"), [(f"`{k}`", f"`{v}`") for k, v in DEV_CONFIGS.items()]))


# --------------------------------------------------------------------------- APIs


def _docstring(module: Any) -> tuple[str, str]:
    doc = inspect.getdoc(module) or ""
    first, _, rest = doc.partition("\n\n")
    return " ".join(first.split()), rest.strip()


def api_summary() -> Rendered:
    from strom.broker.apis import HANDLERS, SUPPORTED_RANGE
    from strom.protocol.schema import api_spec

    rows = []
    for key in sorted(HANDLERS):
        spec = api_spec(key)
        low, high = SUPPORTED_RANGE[key]
        first, _ = _docstring(HANDLERS[key])
        summary = first.split(":", 1)[1].strip() if first.startswith(spec.name + ":") else first
        rows.append(
            (
                f"[{spec.name}](#api-{_slug(spec.name)})",
                str(key),
                f"{low}–{high}",
                f"{spec.min_version}–{spec.max_version}",
                summary,
            )
        )
    return Rendered(_table(("API", "key", "versions served", "versions in Kafka's schema", "what"), rows))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def api_details() -> Rendered:
    from strom.broker.apis import HANDLERS, SUPPORTED_RANGE
    from strom.protocol.schema import api_spec

    parts = []
    for key in sorted(HANDLERS, key=lambda k: api_spec(k).name):
        spec = api_spec(key)
        low, high = SUPPORTED_RANGE[key]
        first, rest = _docstring(HANDLERS[key])
        module = HANDLERS[key].__name__
        parts.append(f"({'api-' + _slug(spec.name)})=\n### {spec.name}\n")
        parts.append(f"API key {key}, versions {low}–{high} (`{module}`).\n")
        parts.append(_escape_docstring(first) + "\n")
        if rest:
            parts.append(_escape_docstring(rest) + "\n")
    return Rendered("\n".join(parts))


def _escape_docstring(text: str) -> str:
    """A module docstring as Markdown: rST's ``code`` and :role:`x` become `code`."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    # a literal block introduced by "::" in rST: keep it as a code block
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out.append(line.rstrip()[:-1])
            block: list[str] = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["", "```text", *(b[4:] if b.startswith("    ") else b for b in block if True), "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def module_docstring(module: str) -> Rendered:
    """A module's docstring as Markdown (``docstring MODULE``): for docstrings that are not rST."""
    import importlib

    return Rendered(_escape_docstring(inspect.getdoc(importlib.import_module(module)) or ""))


# --------------------------------------------------------------------------- the strom command


def cli_commands() -> Rendered:
    """The extras the commands need, then one sphinx-click section per `strom` subcommand: the
    tools' commands load lazily (the group's `commands` holds only `serve`), so sphinx-click is
    pointed at each one. sphinx-click writes rST, hence the `eval-rst` blocks."""
    from strom.tools.commands import COMMANDS

    rows = [(f"`strom {name}`", f"`{e.extra.name}`" if e.extra else "—") for name, e in sorted(COMMANDS.items())]
    parts = [
        "Commands and the extra each one needs (`pip install 'strom[EXTRA]'`):\n",
        _table(("command", "extra"), rows),
    ]
    entries = [("serve", "strom.broker.cli:serve")]
    entries += [(name, f"{entry.module}:{entry.attribute}") for name, entry in sorted(COMMANDS.items())]
    for name, target in entries:
        parts.append(f"\n```{{eval-rst}}\n.. click:: {target}\n   :prog: strom {name}\n   :nested: full\n```")
    return Rendered("\n".join(parts) + "\n")


# --------------------------------------------------------------------------- metrics


def metrics() -> Rendered:
    from strom.broker.console.metrics import METRIC_NAMES

    return Rendered(_table(("metric", "meaning"), [(f"`{name}`", doc) for name, doc in METRIC_NAMES.items()]))


# --------------------------------------------------------------------------- znodes


def znodes() -> Rendered:
    from strom.broker.auth import zkstore
    from strom.broker.zk import quotas_zk, zkdata

    rows = []
    for name, cls in vars(zkdata).items():
        if not (inspect.isclass(cls) and name.endswith("ZNode")):
            continue
        doc = inspect.getdoc(cls) or ""
        match = re.match(r"``([^`]+)``:?\s*(.*)", doc, re.S)
        if match is None:
            raise ReferenceWarning(f"zkdata.{name}: its docstring does not start with the ``path``")
        rows.append((f"`{match.group(1)}`", f"`{name}`", _escape_docstring(match.group(2)).replace("\n", " ")))
    rows.sort()
    text = _table(("path", "class", "what"), rows)
    acl = [f"`{getattr(zkstore, n)}`" for n in ("LITERAL_ROOT", "PREFIXED_ROOT", "LITERAL_CHANGES", "EXTENDED_CHANGES")]
    text += "\n\nACLs (`strom.broker.auth.zkstore`): " + ", ".join(acl) + ".\n"
    text += "\nClient quotas and dynamic broker configs (`strom.broker.zk.quotas_zk`):\n\n"
    text += _escape_docstring(inspect.getdoc(quotas_zk) or "") + "\n"
    return Rendered(text)


# --------------------------------------------------------------------------- on-disk layout

# What each file of a data dir is; a file the broker writes that no pattern here describes fails
# the build (so this list cannot fall behind what the broker writes).
DATA_FILES: tuple[tuple[str, str], ...] = (
    ("meta.properties", "the dir's identity, as Kafka writes it: `version=0`, `broker.id`, `cluster.id`"),
    ("recovery-point-offset-checkpoint", "per partition, the offset up to which the log is known flushed"),
    ("log-start-offset-checkpoint", "per partition, the first offset still readable (DeleteRecords, retention)"),
    ("replication-offset-checkpoint", "per partition, the high watermark"),
    ("cleaner-offset-checkpoint", "per compacted partition, its first dirty offset (how far the cleaner got)"),
    (".kafka_cleanshutdown", "empty marker written last by a clean stop; without it the next start recovers"),
    (
        "strom-metadata.json",
        "standalone mode's topics (names, ids, partitions, config overrides), cluster id, "
        "next producer id; ACLs, SCRAM users, quotas and dynamic configs (first log dir only)",
    ),
    ("*.log", "a segment: record batches, named after its first offset (20 digits)"),
    ("*.index", "the segment's sparse offset index (offset -> file position)"),
    ("*.timeindex", "the segment's sparse time index (timestamp -> offset)"),
    ("*.txnindex", "the segment's aborted transactions (for read_committed fetches)"),
    ("*.snapshot", "producer state (idempotence, open transactions) at that offset"),
    ("leader-epoch-checkpoint", "the partition's leader epochs and their start offsets"),
)


def _describe(name: str) -> tuple[str, str] | None:
    """The (pattern, meaning) of DATA_FILES that describes a file called ``name``."""
    for pattern, meaning in DATA_FILES:
        if (pattern.startswith("*") and name.endswith(pattern[1:])) or name == pattern:
            return pattern, meaning
    return None


def _sample_data_dir(path: Path) -> None:
    """A real broker's data dir: a topic with records, a consumer group's committed offset."""
    import logging

    from strom.testing import broker

    strom_log = logging.getLogger("strom")
    level = strom_log.level
    strom_log.setLevel(logging.WARNING)  # the build's output is Sphinx's; the broker's INFO lines are noise
    try:
        _fill_data_dir(path, broker)
    finally:
        strom_log.setLevel(level)


def _fill_data_dir(path: Path, broker: Any) -> None:
    with broker(data_dir=path, keep_data=True) as b:
        b.create_topic("orders", partitions=2)
        try:
            from confluent_kafka import Consumer, Producer
        except ImportError:  # the layout without records: segments exist from creation on
            return
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "enable.idempotence": True, "log_level": 3})
        for i in range(10):
            producer.produce("orders", key=str(i).encode(), value=b"order", partition=i % 2)
        if producer.flush(30):
            raise ReferenceWarning("the sample producer did not deliver within 30 s")
        del producer  # its connections close before the broker stops (no reconnect attempts)
        consumer = Consumer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "group.id": "billing",
                "auto.offset.reset": "earliest",
                "log_level": 3,
            }
        )
        consumer.subscribe(["orders"])
        got = 0
        while got < 10:
            msg = consumer.poll(10)
            if msg is None:
                raise ReferenceWarning("the sample consumer received nothing within 10 s")
            got += msg.error() is None
        consumer.commit(asynchronous=False)
        consumer.close()


def data_dir_layout(sample: Path | None = None) -> Rendered:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="strom-docs-") as tmp:
        root = sample or Path(tmp) / "strom-data"
        if sample is None:
            _sample_data_dir(root)
        return _render_tree(root / "data" if sample is None else root)


def _render_tree(root: Path) -> Rendered:
    warnings = []
    lines = [f"{root.name}/   (one of log.dirs)"]
    described: dict[str, str] = {}

    def walk(folder: Path, depth: int) -> Iterator[str]:
        entries = sorted(folder.iterdir(), key=lambda p: (p.is_dir(), p.name))
        shown_offsets = False
        for entry in entries:
            name = entry.name
            if entry.is_dir():
                if name.startswith("__consumer_offsets-") and name != "__consumer_offsets-0":
                    if not shown_offsets:
                        yield "    " * depth + "__consumer_offsets-<n>/     (the other partitions, alike)"
                        shown_offsets = True
                    continue
                yield "    " * depth + name + "/"
                yield from walk(entry, depth + 1)
                continue
            found = _describe(name)
            if found is None:
                warnings.append(f"the data dir has {entry.relative_to(root)}: describe it in docs_reference.DATA_FILES")
            else:
                described[found[0]] = found[1]
            yield "    " * depth + name

    lines += list(walk(root, 1))
    text = "```text\n" + "\n".join(lines) + "\n```\n\n"
    shown = [(f"`{p}`", m + ("" if p in described else " (not in the sample above)")) for p, m in DATA_FILES]
    text += _table(("file", "what"), shown)
    return Rendered(text, warnings)


# --------------------------------------------------------------------------- source layout


def packages() -> Rendered:
    import importlib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: folder for name, folder in setuptools["package-dir"].items()}
    rows = []
    for name in sorted(setuptools["packages"]):
        root = next(n for n in sorted(folders, key=len, reverse=True) if name == n or name.startswith(n + "."))
        folder = folders[root] + name[len(root) :].replace(".", "/") + "/"
        doc = inspect.getdoc(importlib.import_module(name)) or "—"
        rows.append((f"`{name}`", f"`{folder}`", _escape_docstring(doc.split("\n\n", 1)[0])))
    return Rendered(_table(("package", "folder", "what"), rows))


# --------------------------------------------------------------------------- dependencies

# Why each dependency is there. A package in pyproject.toml without a reason here fails the build.
WHY: dict[str, str] = {
    "trio": "structured concurrency for the server: every connection, wait and shutdown bounded",
    "construct": "the declarative wire-format language the protocol schemas are built in",
    "crc32c": "CRC-32C in C (record batch checksums), about 1000 times faster than pure Python",
    "cramjam": "snappy, lz4 and zstd codecs in one maintained, compiled package",
    "click": "the `strom` command line",
    "kazoo": "the ZooKeeper client of cluster mode",
    "cryptography": "TLS: PKCS12 key and trust stores, client certificates' names for principals, test "
    "certificates (`strom.testing.certs`)",
    "hypercorn": "the console's HTTP server: an ASGI server with a native trio worker, so the console runs on the "
    "broker's own event loop (imported only when `console.listeners` is set)",
    "starlette": "the console's small ASGI app: routing, request parsing, static files; runs on trio through anyio",
    "jinja2": "server-rendered console pages with auto-escaping; the templates ship in the wheel",
    "confluent-kafka": "the client library behind the `strom` tools (loaded only by them), the stromkafka "
    "data source's writer, the documentation's examples",
    "pyspark": "the `stromkafka` data source and `strom pipeline`",
    "pytest": "the tests",
    "pytest-trio": "trio test support",
    "hypothesis": "fuzzing of decoders and the live broker",
    "kafka-python": "another real client in the compatibility tests",
    "aiokafka": "another real client in the compatibility tests",
    "build": "builds the wheel that `compat_tests/packaging/test_wheel.py` installs into a fresh virtual environment",
    "selenium": "drives Debian's headless `chromium` through `chromium-driver` in the console's browser tests",
    "pytest-asyncio": "the sample user project's asyncio tests",
    "pytest-xdist": "the suite's parallel run (module units, scheduled by the root `conftest.py`), and the sample "
    "user project's run with `-n 2`",
    "pytest-timeout": "a bound on every test, so a hung client cannot eat CI's time",
    "prometheus-client": "its parser reads `/metrics` in the tests (the broker writes the text format itself: "
    "`generate_latest` took about 200 ms for 10,000 partitions)",
    "ruff": "lint and format (the static checks)",
    "mypy": "type checks (the static checks)",
    "import-linter": "the layering contracts (the static checks)",
    "sphinx": "builds this documentation site",
    "myst-parser": "lets Sphinx read the pages as Markdown (MyST), so they read well on GitHub too",
    "furo": "the site's theme: readable, searchable, light and dark",
    "sphinx-click": "renders the `strom` command reference from the click commands themselves",
    "strom": "the project itself, with other extras (an extra that includes extras)",
}


def _requirement_name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower()


def dependencies() -> Rendered:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups: list[tuple[str, list[str]]] = [("(always)", project["dependencies"])]
    groups += sorted(project.get("optional-dependencies", {}).items())
    rows, warnings = [], []
    for extra, reqs in groups:
        for req in reqs:
            name = _requirement_name(req)
            why = WHY.get(name)
            if why is None:
                warnings.append(f"pyproject.toml needs {name!r} ({extra}): say why in docs_reference.WHY")
                why = "?"
            rows.append((f"`{req}`", extra if extra == "(always)" else f"`{extra}`", why))
    return Rendered(_table(("requirement", "extra", "why"), rows), warnings)


# --------------------------------------------------------------------------- compatibility


def compat_table() -> Rendered:
    from strom.tools.dev import compat_table as ct

    lines = ct.render(ct.load()).split("\n")
    return Rendered("\n".join(line for line in lines if not line.startswith("<!--")))


def compat_details() -> Rendered:
    """Per recorded suite: what did not pass, with its recorded detail."""
    from strom.tools.dev import compat_table as ct

    parts = []
    for path in ct.RESULT_FILES:
        if not path.exists():
            continue
        results = ct.read_results(path)
        rel = path.relative_to(ROOT)
        bad = [(n, o) for n, o in sorted(results.tests.items()) if o.state != "PASSED"]
        parts.append(
            f"**{results.client}** {results.version} (`{rel}`): {len(results.tests)} recorded, {len(bad)} not passed.\n"
        )
        if bad and len(bad) <= 60:
            parts.append(
                _table(("test", "outcome", "detail"), [(f"`{n}`", o.state, (o.detail or "")[:200]) for n, o in bad])
                + "\n"
            )
        elif bad:
            parts.append(f"The {len(bad)} scenarios that differ are each explained in the findings below.\n")
    return Rendered("\n".join(parts))


# --------------------------------------------------------------------------- benchmark


def _fmt(value: float, unit: str) -> str:
    if unit in ("records/s", "B/s") or abs(value) >= 1000:
        return f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}"


def benchmark() -> Rendered:
    files = sorted(BENCH_RESULTS.glob("bench-*.json"))
    if not files:
        return Rendered("No recorded run.", [f"no bench-*.json in {BENCH_RESULTS}"])
    parts = []
    for path in files:
        doc = json.loads(path.read_text())
        refs = doc["references"]
        rows = []
        for f in doc["figures"]:
            ref_text = f"`{f['reference']}`"
            target = f["target"] or ""
            if target:
                target += ": met" if f["met"] else ": not met"
            rows.append((f"`{f['key']}`", _fmt(f["value"], f["unit"]), ref_text, f"{f['ratio']:.2f}", target))
        parts.append(f"## `{path.name}`\n")
        parts.append(_table(("figure", "value", "divided by (below)", "ratio", "target"), rows) + "\n")
        ref_rows = [(f"`{k}`", _fmt(v["value"], v["unit"]), v["what"]) for k, v in refs.items()]
        parts.append("The machine's references measured in the same run:\n")
        parts.append(_table(("reference", "value", "what"), ref_rows) + "\n")
    return Rendered("\n".join(parts))


# --------------------------------------------------------------------------- the extension

GENERATORS: dict[str, Callable[[], Rendered]] = {
    "broker-configs": broker_configs,
    "topic-configs": topic_configs,
    "dev-configs": dev_configs,
    "api-summary": api_summary,
    "api-details": api_details,
    "cli-commands": cli_commands,
    "metrics": metrics,
    "znodes": znodes,
    "data-dir": data_dir_layout,
    "packages": packages,
    "dependencies": dependencies,
    "compat-table": compat_table,
    "compat-details": compat_details,
    "benchmark": benchmark,
}


def setup(app: Any) -> dict[str, Any]:
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util import logging
    from sphinx.util.docutils import SphinxDirective

    log = logging.getLogger(__name__)

    class StromReference(SphinxDirective):
        """```{strom-reference} NAME``` -> the generator's Markdown, parsed in place."""

        required_arguments = 1
        optional_arguments = 1
        has_content = False

        def run(self) -> list[nodes.Node]:
            name = self.arguments[0]
            generator = GENERATORS.get(name)
            if name == "docstring" and len(self.arguments) == 2:
                module = self.arguments[1]
                generator = functools.partial(module_docstring, module)
            location = self.get_location()
            if generator is None:
                log.warning(
                    "strom-reference: no generator %r (one of %s)", name, ", ".join(GENERATORS), location=location
                )
                return []
            try:
                rendered = generator()
            except ReferenceWarning as exc:
                log.warning("strom-reference %s: %s", name, exc, location=location)
                return []
            self.env.note_reread()  # generated from the code: read again at every build, never stale
            for warning in rendered.warnings:
                log.warning("strom-reference %s: %s", name, warning, location=location)
            container = nodes.section() if "\n#" in "\n" + rendered.markdown else nodes.container()
            self.state.nested_parse(
                StringList(rendered.markdown.split("\n"), source=f"<strom-reference {name}>"),
                self.content_offset,
                container,
                match_titles=True,
            )
            return list(container.children)

    app.add_directive("strom-reference", StromReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
