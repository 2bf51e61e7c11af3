"""The wheel, built with `python -m build`, installs into a fresh virtual environment and works
there with no repository present: only `strom` lands at the top level of site-packages, and
`strom serve` answers a produce and a fetch.

The virtual environment has no system site-packages, so its dependencies come from the package
index (pip's cache makes a second run quick); the test runs from a directory that holds a
`tools` package of its own, as a user's project might. The wheel is installed bare first (what
`pip install strom` gives: a broker serves, and a command whose extra is missing names it), then
with the `tools` extra for the client round trips.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 600

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S * 2)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, **kw)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import build  # noqa: F401
    except ImportError:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL"):
            raise
        pytest.skip("the 'build' package is not installed (pip install build)")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)])
    (found,) = out.glob("strom-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(env_dir)])
    _run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)])
    return env_dir


@pytest.fixture(scope="module")
def tools_venv(venv: Path, wheel: Path) -> Path:
    """The same environment with the `tools` extra (confluent-kafka) installed too."""
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[tools]"])
    return venv


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


# Put in front of the scripts below, which run in the virtual environment.
SERVE = textwrap.dedent("""
    import json, subprocess, sys, tempfile, time
    from pathlib import Path

    STROM = str(Path(sys.executable).with_name("strom"))


    def serve_strom(work):
        \"\"\"`strom serve` of this environment on an OS-chosen port: (the process, its ready file's JSON).\"\"\"
        ready = work / "ready.json"
        proc = subprocess.Popen([STROM, "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                 "--override", f"log.dirs={work / 'data'}", "--ready-file", str(ready)],
                                cwd=work, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("strom serve did not start")
            time.sleep(0.05)
        return proc, json.loads(ready.read_text())
""")


def test_the_wheel_installs_only_the_strom_namespace(wheel: Path):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"strom"}
    assert "strom/protocol/schema_data.json" in names
    assert "strom/testing/__init__.py" in names
    assert not [n for n in names if "/tests/" in n], "unit tests stay out of the wheel"
    assert "strom/tools/bench/benchmark.py" in names, "strom bench works from the wheel"
    assert not [n for n in names if n.startswith("strom/tools/dev/")], "developer generators stay out"


def test_a_bare_install_serves_without_the_extras_and_names_a_missing_one(venv: Path, tmp_path: Path):
    script = tmp_path / "bare.py"
    script.write_text(
        SERVE
        + textwrap.dedent("""
        import importlib.util, socket, struct

        absent = ("confluent_kafka", "hypercorn", "starlette", "jinja2", "pyspark", "pytest")
        assert [m for m in absent if importlib.util.find_spec(m) is not None] == [], "extras installed"
        work = Path(tempfile.mkdtemp())
        proc, info = serve_strom(work)
        try:
            with socket.create_connection((info["host"], info["port"]), timeout=10) as s:  # ApiVersions v0
                s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
                assert struct.unpack(">i", s.recv(4))[0] > 0
            bootstrap = f"{info['host']}:{info['port']}"
            topics = subprocess.run([STROM, "topics", "list", "--bootstrap-server", bootstrap],
                                    capture_output=True, text=True, timeout=60)
            assert topics.returncode == 1 and "pip install 'strom[tools]'" in topics.stderr, topics
        finally:
            proc.terminate()
            proc.wait(30)
        console = subprocess.run([STROM, "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                  "--override", "console.listeners=http://127.0.0.1:0",
                                  "--override", f"log.dirs={work / 'data2'}"],
                                 capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert console.returncode == 1 and "pip install 'strom[console]'" in console.stderr, console
        print("BARE OK")
    """)
    )
    done = _run([str(venv / "bin" / "python"), str(script)], cwd=tmp_path, env=_clean_env())
    assert "BARE OK" in done.stdout


def test_installed_strom_serves_a_round_trip_beside_a_users_own_tools_package(tools_venv: Path, tmp_path: Path):
    project = tmp_path / "project"
    (project / "tools").mkdir(parents=True)
    (project / "tools" / "__init__.py").write_text("WHO = 'the user'\n")
    script = project / "check.py"
    script.write_text(
        SERVE
        + textwrap.dedent("""
        import tools
        assert tools.WHO == "the user", tools.__file__
        import strom.broker, strom.protocol, strom.storage, strom.tools
        for mod in (strom.broker, strom.protocol, strom.storage, strom.tools):
            assert sys.prefix in mod.__file__, mod.__file__
        for name in ("broker", "protocol", "storage"):
            try:
                __import__(name)
            except ImportError:
                pass
            else:
                raise AssertionError(f"top-level {name!r} is importable")

        from confluent_kafka import Consumer, Producer

        proc, info = serve_strom(Path(tempfile.mkdtemp()))
        try:
            deadline = time.monotonic() + 30
            bootstrap = f"{info['host']}:{info['port']}"
            producer = Producer({"bootstrap.servers": bootstrap})
            for i in range(10):
                producer.produce("wheel", value=f"v{i}".encode())
            assert producer.flush(30) == 0
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe(["wheel"])
            got = []
            while len(got) < 10 and time.monotonic() < deadline + 30:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    got.append(msg.value().decode())
            consumer.close()
            assert got == [f"v{i}" for i in range(10)], got
            print("ROUND TRIP OK")
        finally:
            proc.terminate()
            proc.wait(30)
    """)
    )
    done = _run([str(tools_venv / "bin" / "python"), str(script)], cwd=project, env=_clean_env())
    assert "ROUND TRIP OK" in done.stdout


def test_installed_strom_testing_embeds_a_broker_and_registers_the_pytest_plugin(tools_venv: Path, tmp_path: Path):
    script = tmp_path / "embedded.py"
    script.write_text(
        textwrap.dedent("""
        from importlib.metadata import entry_points
        from confluent_kafka import Producer
        from strom.testing import broker
        plugins = {e.name: e.value for e in entry_points(group="pytest11")}
        assert plugins.get("strom") == "strom.testing.pytest_plugin", plugins
        with broker(num_partitions=2) as b:
            b.faults.cap_versions("2.8")          # the release table ships in the wheel
            b.create_topic("embedded")
            producer = Producer({"bootstrap.servers": b.bootstrap_servers})
            producer.produce("embedded", b"x")
            assert producer.flush(30) == 0
        print("EMBEDDED OK")
    """)
    )
    done = _run([str(tools_venv / "bin" / "python"), str(script)], cwd=tmp_path, env=_clean_env())
    assert "EMBEDDED OK" in done.stdout
