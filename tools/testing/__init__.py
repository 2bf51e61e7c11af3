"""Strom as the test broker: an embedded broker, a pytest plugin and fault injection.

    from strom.testing import broker
    with broker() as b:
        ... b.bootstrap_servers ...

Everything that exists only for tests lives here, not in the server package, and is installed
into a broker only when asked for (``control.listener``, the embedded broker, the pytest plugin):
``faults`` (RequestFaults, a request interceptor of the broker's dispatcher), ``control_endpoint``
(the HTTP control operations), ``clock`` (PausableClock), ``storage_faults`` (FileFaults, through
the storage layer's file-operations seam), ``waits`` (waits on a broker's state, woken by the
broker); ``control`` is their client side, ``async_broker`` (``abroker``) the same from asyncio
and trio, ``cluster_control`` the HTTP endpoint of a test cluster's actions.

Names load on first use, so importing this package (the pytest plugin does, in every run) costs
nothing until a broker is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "broker",
    "StromBroker",
    "abroker",
    "AsyncBroker",
    "WaitTimeout",
    "cluster",
    "StromCluster",
    "Faults",
    "ControlClient",
    "ControlError",
    "DEV_CONFIGS",
    "zookeeper_available",
    "request_faults",
    "RequestFaults",
    "file_faults",
    "FileFaults",
    "PausableClock",
    "MemoryZooKeeper",
]

_WHERE = {
    "broker": "embedded",
    "StromBroker": "embedded",
    "abroker": "async_broker",
    "AsyncBroker": "async_broker",
    "WaitTimeout": "control",
    "cluster": "zkcluster",
    "StromCluster": "zkcluster",
    "zookeeper_available": "zkcluster",
    "Faults": "control",
    "ControlClient": "control",
    "ControlError": "control",
    "request_faults": "faults",
    "RequestFaults": "faults",
    "file_faults": "storage_faults",
    "FileFaults": "storage_faults",
    "PausableClock": "clock",
    "MemoryZooKeeper": "memzk",
}

if TYPE_CHECKING:
    from .async_broker import AsyncBroker, abroker
    from .clock import PausableClock
    from .control import ControlClient, ControlError, Faults, WaitTimeout
    from .embedded import StromBroker, broker
    from .faults import RequestFaults, request_faults
    from .memzk import MemoryZooKeeper
    from .storage_faults import FileFaults, file_faults
    from .zkcluster import StromCluster, cluster, zookeeper_available


def __getattr__(name: str) -> Any:
    if name == "DEV_CONFIGS":
        from strom.broker.config import DEV_CONFIGS

        return DEV_CONFIGS
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'strom.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
