"""Every tool is a `strom` subcommand with help, and the shared option parsing behaves."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from strom.broker.cli import main
from strom.tools import commands
from strom.tools.commands import COMMANDS, Extra, load
from strom.tools.common import parse_kv, read_properties


def _paths(command: click.Command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    path = prefix + (command.name,)
    subs = getattr(command, "commands", {})
    return [path] + [p for sub in subs.values() for p in _paths(sub, path)]


ALL_PATHS = [p for name in COMMANDS for p in _paths(load(name))]


def test_every_tool_is_registered_on_strom() -> None:
    names = set(COMMANDS)
    assert {"topics", "produce", "consume", "groups", "configs", "dump-log", "perf"} <= names
    ctx = click.Context(main)
    assert names <= set(main.list_commands(ctx))
    assert all(main.get_command(ctx, name) is not None for name in names)


@pytest.mark.parametrize("path", ALL_PATHS, ids=" ".join)
def test_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="strom")
    assert result.exit_code == 0, result.output
    assert "Usage: strom " + " ".join(path) in result.output


def test_a_command_whose_extra_is_missing_says_which_extra_to_install(monkeypatch) -> None:
    monkeypatch.setattr(Extra, "missing", lambda self: list(self.modules[:1]))
    for argv, extra in ((["topics", "list"], "tools"), (["pipeline"], "spark"), (["bench", "--quick"], "tools")):
        result = CliRunner().invoke(main, argv, prog_name="strom")
        assert result.exit_code == 1, result.output
        assert f"pip install 'strom[{extra}]'" in result.output and f"`strom {argv[0]}` needs" in result.output
        assert CliRunner().invoke(main, [*argv[:1], "--help"], prog_name="strom").exit_code == 0
    assert CliRunner().invoke(main, ["dump-log", "--help"], prog_name="strom").exit_code == 0


def test_serve_with_the_console_but_without_its_extra_says_which_extra_to_install(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['hypercorn'] = None; from strom.broker.cli import main; "
        "main(['serve', '--override', 'listeners=PLAINTEXT://127.0.0.1:0', '--override', "
        f"'console.listeners=http://127.0.0.1:0', '--override', 'log.dirs={tmp_path}'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "console.listeners needs hypercorn" in done.stderr and "pip install 'strom[console]'" in done.stderr


def test_a_command_loads_only_its_own_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from strom.tools.commands import load; load('topics'); load('dump-log'); "
        "print(sorted(m for m in sys.modules if m.startswith(('strom.tools.bench', 'strom.tools.spark', "
        "'confluent_kafka', 'pyspark'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
    assert commands.COMMANDS["bench"].module == "strom.tools.bench.benchmark"


def test_parse_kv_rejects_items_without_equals() -> None:
    assert parse_kv(["a=b=c", "x="], "--x") == {"a": "b=c", "x": ""}
    with pytest.raises(click.BadParameter):
        parse_kv(["oops"], "--x")


def test_read_properties(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# comment\nsecurity.protocol=PLAINTEXT\nclient.id: me\n\n")
    assert read_properties(path) == {"security.protocol": "PLAINTEXT", "client.id": "me"}


@pytest.mark.parametrize("frame", [b"\x00\x00\x00\x01", b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x05"])
def test_api_versions_probe_rejects_a_short_or_truncated_answer_with_value_error(frame: bytes) -> None:
    import socket
    import struct

    from strom.tools.common import api_versions

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(struct.pack(">i", len(frame)) + frame)  # answered before it is even asked
        ours.settimeout(5)
        with pytest.raises(ValueError):
            api_versions(ours)
