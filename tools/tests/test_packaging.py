"""The installed distribution exposes the repository's folders under the `strom` namespace only.

A module that imported `tools.x` or `broker.x` would work here (pytest puts the repository root on
sys.path) and break in an installed wheel, so the imports are checked from the source; the wheel
itself is built and installed into a fresh virtual environment by compat_tests/packaging/test_wheel.py.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"broker": "strom.broker", "protocol": "strom.protocol", "storage": "strom.storage", "tools": "strom.tools"}
SOURCE_DIRS = [*PACKAGES, "compat_tests"]


def _python_files() -> list[Path]:
    # compat_tests/packaging/sample_project is a user's project: its `tools` is its own package, not Strom's
    return [
        p
        for d in SOURCE_DIRS
        for p in (ROOT / d).rglob("*.py")
        if "node_modules" not in p.parts and ".work" not in p.parts and "sample_project" not in p.parts
    ]


def _old_style_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names if name.split(".")[0] in PACKAGES]
    return found


def test_every_import_of_strom_code_uses_the_strom_namespace():
    offenders = [line for path in _python_files() for line in _old_style_imports(path)]
    assert offenders == [], "import these as strom.<package>:\n" + "\n".join(offenders)


def _tests_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names if "tests" in name.split(".")]
    return found


def test_no_module_of_the_wheel_imports_a_tests_package():
    """The wheel carries no tests packages: a shipped module importing one (as storage/bench.py
    once did) fails from an installed wheel while passing here."""
    shipped = [
        p for p in _python_files() if "tests" not in p.relative_to(ROOT).parts and p.parts[len(ROOT.parts)] in PACKAGES
    ]
    offenders = [line for path in shipped for line in _tests_imports(path)]
    assert offenders == [], "move what these need out of the tests package:\n" + "\n".join(offenders)


def test_the_import_check_sees_an_old_style_import(tmp_path):
    sample = ROOT / "tools" / "tests" / "_sample_old_import.py"
    try:
        sample.write_text("import os\nfrom tools.common import x\nimport strom.tools\n")
        assert _old_style_imports(sample) == ["tools/tests/_sample_old_import.py:2: tools.common"]
    finally:
        sample.unlink()


def _declared() -> tuple[set[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), config["package-dir"]


def test_pyproject_lists_every_package_of_the_tree_and_no_tests():
    """Every package ships except tests and tools/dev (developer generators, run from a checkout);
    tools/testing ships as strom.testing and tools/sim as strom.sim, their own roots."""
    declared, package_dir = _declared()
    roots = {**{folder: name for name, folder in package_dir.items()}}
    assert roots == {**PACKAGES, "tools/testing": "strom.testing", "tools/sim": "strom.sim"}
    expected = set()
    for folder, name in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if "tests" in rel or (folder == "tools" and rel[:1] in {("testing",), ("dev",), ("sim",)}):
                continue
            expected.add(".".join((name, *rel)))
    assert declared == expected


def test_the_console_script_is_in_the_namespace():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["strom"] == "strom.broker.cli:main"
