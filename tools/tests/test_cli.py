"""Every tool is a `strom` subcommand with help, and the shared option parsing behaves."""
from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from strom.broker.cli import main
from strom.tools.commands import COMMANDS
from strom.tools.common import parse_kv, read_properties


def _paths(command: click.Command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    path = prefix + (command.name,)
    subs = getattr(command, "commands", {})
    return [path] + [p for sub in subs.values() for p in _paths(sub, path)]


ALL_PATHS = [p for c in COMMANDS for p in _paths(c)]


def test_every_tool_is_registered_on_strom() -> None:
    names = {c.name for c in COMMANDS}
    assert {"topics", "produce", "consume", "groups", "configs", "dump-log", "perf"} <= names
    import click
    ctx = click.Context(main)
    assert names <= set(main.list_commands(ctx))
    assert all(main.get_command(ctx, name) is not None for name in names)


@pytest.mark.parametrize("path", ALL_PATHS, ids=" ".join)
def test_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="strom")
    assert result.exit_code == 0, result.output
    assert "Usage: strom " + " ".join(path) in result.output


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
