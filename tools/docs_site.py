"""`strom docs`: build the documentation site from a checkout's `docs/` and serve it locally.

The build is Sphinx's, with warnings as errors and nitpicky references (what CI checks:
`tools/tests/test_docs.py`), incremental into `docs/_build/html` unless `--output` says otherwise.
Serving is the standard library's HTTP server on 127.0.0.1, on a port the OS chooses unless
`--port` gives one; Ctrl-C stops it.
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs"
OUTPUT = SOURCE / "_build" / "html"
SPHINX_OPTIONS = ("-W", "--keep-going", "-n", "-q")


class DocsError(RuntimeError):
    """The site cannot be built (no sources here, or Sphinx failed)."""


def build(source: Path = SOURCE, output: Path = OUTPUT, *, fresh: bool = False) -> str:
    """Build the HTML site; return Sphinx's output (its warnings, if any, are errors)."""
    if not (source / "conf.py").is_file():
        raise DocsError(f"no documentation sources at {source}: `strom docs` builds the site from a checkout")
    args = [sys.executable, "-m", "sphinx", *SPHINX_OPTIONS, "-b", "html", str(source), str(output)]
    if fresh:
        args.insert(3, "-E")
    done = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    report = done.stdout + done.stderr
    if done.returncode != 0:
        raise DocsError(f"the documentation build failed (exit {done.returncode}):\n{report}")
    return report


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def server(site: Path, host: str = "127.0.0.1", port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server of the built site (not yet serving: call ``serve_forever``)."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    return http.server.ThreadingHTTPServer((host, port), handler)


@click.command("docs")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="0: the OS chooses.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=OUTPUT,
    show_default="docs/_build/html in the checkout",
    help="Where the HTML goes.",
)
@click.option("--fresh", is_flag=True, help="Rebuild every page, not only the changed ones.")
@click.option("--no-serve", is_flag=True, help="Build only; exit 1 on any warning.")
def docs(port: int, host: str, output: Path, fresh: bool, no_serve: bool) -> None:
    """Build the documentation site (warnings are errors) and serve it locally."""
    try:
        build(SOURCE, output, fresh=fresh)
    except DocsError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"built {output}")
    if no_serve:
        return
    with server(output, host, port) as httpd:
        bound_host, bound_port = httpd.server_address[:2]
        click.echo(f"serving http://{bound_host}:{bound_port}/ (Ctrl-C stops)")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
