"""The documentation site (docs/, `strom docs`): it builds with warnings as errors, its generated
reference shows everything the code has, its internal links resolve, and its examples run."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from strom.tools import docs_reference, docs_site

ROOT = docs_site.ROOT


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built fresh the way CI and `strom docs` build it (-W --keep-going -n)."""
    output = tmp_path_factory.mktemp("site")
    report = docs_site.build(docs_site.SOURCE, output, fresh=True)
    assert "WARNING" not in report and "ERROR" not in report, report
    return output


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_every_config_key_api_metric_and_command_is_on_its_reference_page(site: Path) -> None:
    from strom.broker.apis import HANDLERS, SUPPORTED_RANGE
    from strom.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS
    from strom.broker.console.metrics import METRIC_NAMES
    from strom.protocol.schema import api_spec
    from strom.tools.commands import COMMANDS

    configuration = _text(site / "reference" / "configuration.html")
    missing = [key for key in [*BROKER_CONFIGS, *TOPIC_CONFIGS] if key not in configuration]
    assert not missing, f"config keys the configuration reference does not show: {missing}"

    apis = _text(site / "reference" / "apis.html")
    for key in HANDLERS:
        name = api_spec(key).name
        low, high = SUPPORTED_RANGE[key]
        assert re.search(rf"{name}\s+{key}\s+{low}–{high}", apis), f"{name} (key {key}, v{low}-{high}) not in apis"

    metrics = _text(site / "reference" / "metrics.html")
    missing = [name for name in METRIC_NAMES if name not in metrics]
    assert not missing, f"metrics the metrics reference does not show: {missing}"

    cli = _text(site / "reference" / "cli.html")
    missing = [name for name in ["serve", *COMMANDS] if f"strom {name} [OPTIONS]" not in cli]
    assert not missing, f"commands the CLI reference does not show: {missing}"


def test_no_page_shows_rst_markup_as_text(site: Path) -> None:
    """rST handed to the Markdown parser (sphinx-click or autodoc output outside `eval-rst`)
    comes out as text, without a warning."""
    leaked = [
        str(page.relative_to(site))
        for page in site.rglob("*.html")
        if re.search(r"\.\. (option|rubric|program|code-block|click)::", _text(page))
    ]
    assert not leaked, leaked


def test_every_console_route_is_in_the_console_guide() -> None:
    """The console's pages and actions are described by hand (their meaning is not in the code):
    a route the guide does not name fails here."""
    from starlette.routing import Route

    from strom.broker.console.app import build_app

    guide = (ROOT / "docs" / "how-to" / "console-and-metrics.md").read_text(encoding="utf-8")
    paths = [r.path for r in build_app(None, None).routes if isinstance(r, Route)]
    assert "/api/groups/{group}/reset-offsets" in paths
    missing = [p for p in paths if not re.search("`" + re.sub(r"\\\{\w+\\\}", "<[^>]+>", re.escape(p)) + "`", guide)]
    assert not missing, f"console routes the guide does not describe: {missing}"


def test_every_test_folder_is_in_the_testing_guide() -> None:
    guide = (ROOT / "docs" / "how-to" / "run-the-tests.md").read_text(encoding="utf-8")
    folders = sorted({p.parent.relative_to(ROOT).parts[1] for p in (ROOT / "compat_tests").glob("*/test_*.py")})
    assert "cluster" in folders
    missing = [f for f in folders if f"compat_tests/{f}" not in guide and f"`{f}`" not in guide]
    assert not missing, f"compat_tests folders the testing guide does not describe: {missing}"


def test_the_data_dir_page_shows_a_real_brokers_files(site: Path) -> None:
    page = _text(site / "reference" / "data-dir.html")
    for name in ("meta.properties", "orders-0/", "orders-1/", "00000000000000000000.log", "leader-epoch-checkpoint"):
        assert name in page


def test_a_file_or_dependency_the_generators_cannot_describe_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("version=0\n")
    (tmp_path / "orders-0").mkdir()
    (tmp_path / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "orders-0" / "mystery.bin").write_bytes(b"")
    rendered = docs_reference.data_dir_layout(tmp_path)
    assert rendered.warnings == ["the data dir has orders-0/mystery.bin: describe it in docs_reference.DATA_FILES"]
    assert "| `*.log` |" in rendered.markdown and "mystery.bin" in rendered.markdown
    assert docs_reference.dependencies().warnings == []
    assert docs_reference._requirement_name("pyspark[sql]>=4.2,<5") == "pyspark"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag in ("a", "link", "img", "script"):
            target = values.get("href") or values.get("src")
            if target:
                self.hrefs.append(target)


def test_every_internal_link_of_the_site_resolves(site: Path) -> None:
    """Sphinx's linkcheck needs the network for external links (none here); this checks every
    link inside the built site, anchors included."""
    pages: dict[Path, _Links] = {}
    for page in site.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parser
    broken = []
    for page, parser in pages.items():
        for href in parser.hrefs:
            if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", href) or href.startswith("//"):
                continue  # external (http:, mailto:, ...): not checked here
            path, _, anchor = href.partition("#")
            target = (page.parent / path.split("?")[0]).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {href}")
            elif anchor and target.suffix == ".html" and anchor not in pages[target].ids:
                broken.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_every_relative_link_of_the_readme_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)", readme)
    assert targets, "the README links into the docs"
    missing = [t for t in targets if not re.match(r"^[a-z]+:", t) and not (ROOT / t).exists()]
    assert not missing, missing


def test_strom_docs_serves_the_built_site(site: Path) -> None:
    httpd = docs_site.server(site, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        host, port = httpd.server_address[:2]
        with urllib.request.urlopen(f"http://{host}:{port}/reference/configuration.html", timeout=10) as answer:
            assert answer.status == 200 and b"log.retention.ms" in answer.read()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_strom_docs_without_sources_says_it_needs_a_checkout(tmp_path: Path) -> None:
    with pytest.raises(docs_site.DocsError, match="from a checkout"):
        docs_site.build(tmp_path, tmp_path / "out")


# --------------------------------------------------------------------------- the examples

FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!-- docs-test: skip: (.+?) -->\s*$")


def _examples() -> Iterator[tuple[str, str, str | None]]:
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for source in sources:
        if "_build" in source.parts:
            continue
        text = source.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKIP.search(before)
            yield f"{source.relative_to(ROOT)}:{line}", match.group(1), skip.group(1) if skip else None


EXAMPLES = list(_examples())


@pytest.fixture(scope="module")
def example_broker() -> Iterator[str]:
    from strom.testing import broker

    with broker() as b:
        yield b.bootstrap_servers


def test_the_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 5 and any("README.md" in where for where, _, _ in EXAMPLES)


@pytest.mark.parametrize(("where", "code", "skip"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_runs(where: str, code: str, skip: str | None, example_broker: str, tmp_path: Path) -> None:
    """A block with a `test_` function runs as a pytest file (the Strom plugin gives it its
    broker); any other block runs as a script against a real embedded broker, which takes the
    place of `127.0.0.1:9092`."""
    if skip is not None:
        pytest.skip(skip)
    if re.search(r"^def test_", code, re.M):
        (tmp_path / "test_example.py").write_text(code)
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"]
    else:
        args = [sys.executable, "-c", code.replace("127.0.0.1:9092", example_broker)]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr}"
