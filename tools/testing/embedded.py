"""A Strom broker for tests: in this process on its own thread and trio loop, or as a subprocess.

    from strom.testing import broker

    with broker(num_partitions=3) as b:          # configs as keywords: dots become underscores
        Producer({"bootstrap.servers": b.bootstrap_servers}) ...
        b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)

The thread mode works from plain, asyncio and trio code alike: the broker's loop is its own, on
its own thread; calls into it (faults, topics, maintenance) go through its trio token. The
listening socket is bound before ``start()`` returns, on 127.0.0.1 and a port the OS chose, so
the bootstrap address is usable at once. Stopping is bounded: cancel, wait ``stop_timeout``,
then give up on the thread with a warning instead of hanging the test run.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .control import ControlClient, ControlError, Faults, Waits

log = logging.getLogger("strom.testing")

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
MODES = ("thread", "process")


def config_key(name: str) -> str:
    """``num_partitions`` -> ``num.partitions`` (Kafka keys have dots, Python keywords underscores)."""
    return name.replace("_", ".")


def config_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def broker_props(configs: Mapping[str, Any] | None, kwargs: Mapping[str, Any], *, dev: bool) -> dict[str, str]:
    """Dev defaults, then the ``configs`` dict, then keyword configs; unknown keys are refused."""
    from strom.broker.config import BROKER_CONFIGS, DEV_CONFIGS

    props = dict(DEV_CONFIGS) if dev else {}
    given = {**{str(k): v for k, v in (configs or {}).items()}, **{config_key(k): v for k, v in kwargs.items()}}
    for key, value in given.items():
        if key not in BROKER_CONFIGS:
            close = [k for k in BROKER_CONFIGS if k.split(".")[-1] == key.split(".")[-1]]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(f"unknown broker config {key!r}{hint}")
        props[key] = config_value(value)
    return props


class StromBroker(Waits):
    """One broker for a test. ``mode="thread"`` (default) runs it in this process, ``"process"``
    as ``strom serve`` in a child process (same API; faults go through its control endpoint).

    ``data_dir``: where the logs live; by default a temporary directory removed by ``close()``
    (a given directory is kept, or pass ``keep_data=True``). ``dev``: start from the test-friendly
    defaults (``strom.broker.config.DEV_CONFIGS``); any config given overrides them.
    """

    def __init__(
        self,
        configs: Mapping[str, Any] | None = None,
        *,
        mode: str = "thread",
        data_dir: str | os.PathLike | None = None,
        keep_data: bool | None = None,
        dev: bool = True,
        start_timeout: float = START_TIMEOUT_S,
        stop_timeout: float = STOP_TIMEOUT_S,
        **config_kwargs: Any,
    ):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}: use 'thread' or 'process'")
        self.mode = mode
        self.props = broker_props(configs, config_kwargs, dev=dev)
        self._own_dir = data_dir is None and "log.dirs" not in self.props and "log.dir" not in self.props
        self.keep_data = (not self._own_dir) if keep_data is None else keep_data
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port = 0
        self._control_port = 0
        self._thread: threading.Thread | None = None
        self._token = None
        self._cancel = None
        self._broker = None
        self._controls = None
        self._error: BaseException | None = None
        self._process = None
        self._paused_process = False
        self._stuck: threading.Thread | None = None
        self.server_options: dict[str, Any] = {}  # keyword arguments of BrokerServer (thread mode)
        self.faults = Faults(self._control)
        self.startup_s: float | None = None

    # ---- addresses -----------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        if not self.running:
            raise RuntimeError("the broker is not running")
        return f"{HOST}:{self.port}"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="strom-test-"))
        return self._data_dir

    @property
    def running(self) -> bool:
        if self.mode == "thread":
            return self._thread is not None and self._thread.is_alive() and self._error is None
        return self._process is not None and self._process.running

    @property
    def control_address(self) -> str | None:
        """``host:port`` of the control endpoint, for ``strom control --to`` (always in process mode;
        in thread mode when ``control.listener`` is configured)."""
        if self.mode == "thread":
            broker = self._broker
            port = self._control_port if broker is not None else None
            return f"{broker.config.control.host}:{port}" if port else None
        return f"{HOST}:{self._control_port}" if self._control_port else None

    # ---- lifecycle -----------------------------------------------------------------
    def _start_props(self) -> dict[str, str]:
        props = dict(self.props)
        props.setdefault("listeners", f"PLAINTEXT://{HOST}:{self.port}")
        if "log.dirs" not in props and "log.dir" not in props:
            props["log.dirs"] = str(self.data_dir / "data")
        return props

    def start(self) -> StromBroker:
        if self.running:
            return self
        started = time.perf_counter()
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_process()
        self.startup_s = time.perf_counter() - started
        return self

    def _start_thread(self) -> None:
        from strom.broker.config import BrokerConfig
        from strom.broker.server.listen import bind_listeners

        config = BrokerConfig(self._start_props())
        prebound = bind_listeners(config.listeners)
        self.port = prebound[0].port
        ready = threading.Event()
        self._error = None
        self._thread = threading.Thread(
            target=self._run, args=(config, prebound, ready), name=f"strom-broker-{self.port}", daemon=True
        )
        self._thread.start()
        if not ready.wait(self.start_timeout):
            self.stop()
            raise RuntimeError(f"embedded broker not ready within {self.start_timeout:.0f}s")
        if self._error is not None:
            error, self._error = self._error, None
            self._thread.join(self.stop_timeout)
            self._thread = None
            raise RuntimeError(f"embedded broker failed to start: {error}") from error

    def _run(self, config, prebound, ready: threading.Event) -> None:
        import trio

        async def main() -> None:
            from strom.broker.server.root import BrokerServer

            self._token = trio.lowlevel.current_trio_token()
            broker = BrokerServer(config, **self.server_options)
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                await nursery.start(broker.run, prebound)
                if config.control is not None:  # control.listener: the HTTP control endpoint too
                    from .control_endpoint import serve_control

                    self._control_port = await nursery.start(serve_control, broker, config.control)
                self._broker = broker
                ready.set()

        from .clock import PausableClock  # pause() stops the broker's timers too

        try:
            trio.run(main, clock=PausableClock())
        except BaseException as exc:  # reported by start() or logged
            if not ready.is_set():
                self._error = exc
            else:
                log.exception("embedded broker on port %d stopped with an error", self.port)
        finally:
            self._broker = self._controls = None
            if self.mode == "thread":
                self._control_port = 0
            ready.set()

    def _start_process(self) -> None:
        from strom.tools.broker_process import BrokerProcess

        props = self._start_props()
        props.pop("listeners", None)
        props.setdefault("control.listener", f"{HOST}:{self._control_port}")
        workdir = self.data_dir
        if self._process is None:
            self._process = BrokerProcess(workdir, props, port=self.port)
        else:
            self._process.overrides = props
        self._process.start(self.start_timeout)
        self.port = self._process.port
        control = self._process.info.control
        if control is None:
            raise RuntimeError("the broker process wrote no control address in its ready file")
        self._control_port = int(control.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Stop serving (data kept: ``start()`` again serves it on the same port). Bounded."""
        if self.mode == "thread":
            thread, token, cancel = self._thread, self._token, self._cancel
            if thread is None:
                return
            if token is not None and cancel is not None and thread.is_alive():

                def stop_now() -> None:  # a paused broker's clock runs again for its shutdown
                    import trio

                    clock = trio.lowlevel.current_clock()
                    if hasattr(clock, "resume"):
                        clock.resume()
                    cancel.cancel()

                try:
                    token.run_sync_soon(stop_now)
                except Exception:  # the loop already ended
                    pass
            thread.join(self.stop_timeout)
            if thread.is_alive():
                log.warning(
                    "embedded broker on port %d did not stop within %.1fs; leaving its thread behind",
                    self.port,
                    self.stop_timeout,
                )
                self._stuck = thread
            self._thread = self._token = self._cancel = None
        elif self._process is not None:
            if self._paused_process:
                self.resume()
            self._process.stop(self.stop_timeout)

    def restart(self) -> StromBroker:
        """Stop and start again: same port, same data."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop, and remove the data directory unless it is kept."""
        self.stop()
        if self._stuck is not None and self._stuck.is_alive():
            log.warning("data dir %s left in place: its broker is still shutting down", self._data_dir)
            return
        if not self.keep_data and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)

    def pause(self) -> None:
        """Stop answering: requests are held until ``resume()`` (a process is sent SIGSTOP, as a
        frozen JVM; in thread mode the broker holds every request and its trio clock stands still, so
        no timer fires meanwhile: no session expiry, flush, retention or cleaner run)."""
        if self.mode == "process":
            os.kill(self._process.pid, signal.SIGSTOP)
            self._paused_process = True
        else:
            self._control("pause", {})

    def resume(self) -> None:
        if self.mode == "process":
            if self._paused_process:
                os.kill(self._process.pid, signal.SIGCONT)
                self._paused_process = False
        else:
            self._control("resume", {})

    def __enter__(self) -> StromBroker:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"{HOST}:{self.port}" if self.running else "stopped"
        return f"StromBroker({where}, mode={self.mode}, data_dir={str(self._data_dir)!r})"

    # ---- control -----------------------------------------------------------------
    def _control(self, operation: str, args: dict, timeout: float | None = None) -> Any:
        """Run a control operation on the broker (``timeout``: how long its answer may take, for
        waits; else the usual bound)."""
        if not self.running:
            raise ControlError("the broker is not running")
        if self.mode == "process":
            return ControlClient(self.control_address)(operation, args, timeout)
        return self._in_loop(operation, args, timeout)

    def _in_loop(self, operation: str, args: dict, timeout: float | None = None) -> Any:
        import trio

        from .control_endpoint import ControlError as BrokerControlError

        if self._controls is None or self._controls.broker is not self._broker:
            from .control_endpoint import Controls  # loaded on the first control call

            self._controls = Controls(self._broker)
        controls, token = self._controls, self._token

        def call():
            return trio.from_thread.run(controls.call, operation, args, trio_token=token)

        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            in_trio = False
        else:
            in_trio = True
        try:
            if not in_trio:
                return call()
            # from trio code: trio.from_thread refuses to block a trio thread, so a helper thread waits
            box: dict[str, Any] = {}

            def target() -> None:
                try:
                    box["value"] = call()
                except BaseException as exc:
                    box["error"] = exc

            helper = threading.Thread(target=target, daemon=True)
            helper.start()
            helper.join((timeout or 0) + self.stop_timeout + 30)
            if "error" in box:
                raise box["error"]
            if "value" not in box:
                raise ControlError(f"{operation}: the broker did not answer")
            return box["value"]
        except BrokerControlError as exc:
            raise ControlError(str(exc)) from None

    def create_topic(
        self, name: str, partitions: int | None = None, replication_factor: int | None = None, **configs: Any
    ) -> str:
        """Create ``name`` (the broker's num.partitions by default); topic configs as keywords."""
        self._control(
            "create_topic",
            {
                "name": name,
                "partitions": -1 if partitions is None else partitions,
                "replication_factor": -1 if replication_factor is None else replication_factor,
                "configs": {config_key(k): config_value(v) for k, v in configs.items()},
            },
        )
        return name

    def delete_topic(self, name: str) -> None:
        self._control("delete_topic", {"name": name})

    def run_retention(self, topic: str | None = None, roll: bool = True) -> dict:
        """Apply retention now (rolling active segments first, see ``strom.testing.control_endpoint``)."""
        return self._control("retention", {"topic": topic, "roll": roll})

    def compact(self, topic: str | None = None, roll: bool = True) -> dict:
        """Run the log cleaner now over compacted topics."""
        return self._control("compact", {"topic": topic, "roll": roll})

    def expire_offsets(self, advance_ms: int = 0) -> dict:
        """Expire committed offsets now, as if the clock were ``advance_ms`` later."""
        return self._control("expire_offsets", {"advance_ms": advance_ms})


@contextmanager
def broker(configs: Mapping[str, Any] | None = None, **kwargs: Any) -> Iterator[StromBroker]:
    """A started broker for the ``with`` block, closed afterwards (also on error).

    Keywords are ``StromBroker``'s options (``mode``, ``data_dir``, ``keep_data``, ``dev``, ...)
    or broker configs with dots as underscores (``num_partitions=3``); ``configs`` takes them as
    a dict with Kafka's names."""
    b = StromBroker(configs, **kwargs)
    with b:
        yield b
