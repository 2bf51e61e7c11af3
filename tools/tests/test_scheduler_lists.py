"""The root conftest.py's scheduler lists (HEAVY, SLOW_FIRST) name test modules that exist and
suite runs that some test marks, so a moved or renamed test module does not silently lose its
place (a heavy module no longer capped, a slow one started last)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _scheduler_names() -> dict[str, list[str]]:
    tree = ast.parse((ROOT / "conftest.py").read_text())
    found: dict[str, list[str]] = {}
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id in {"HEAVY", "SLOW_FIRST"}:
            found[target.id] = [
                c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
    return found


def test_every_unit_the_scheduler_names_exists() -> None:
    lists = _scheduler_names()
    assert set(lists) == {"HEAVY", "SLOW_FIRST"} and all(lists.values())
    groups = {
        line.split('xdist_group("', 1)[1].split('"', 1)[0]
        for path in (ROOT / "compat_tests").rglob("test_*.py")
        if "node_modules" not in path.parts
        for line in path.read_text().splitlines()
        if 'xdist_group("' in line
    }
    missing = [
        name
        for names in lists.values()
        for name in names
        if not (name.endswith(".py") and (ROOT / name).is_file()) and name not in groups
    ]
    assert missing == [], f"conftest.py names units that no longer exist: {missing}"
