"""Strom as the test broker: an embedded broker, a pytest plugin and fault injection.

    from strom.testing import broker
    with broker() as b:
        ... b.bootstrap_servers ...

Names load on first use, so importing this package (the pytest plugin does, in every run) costs
nothing until a broker is asked for.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["broker", "StromBroker", "cluster", "StromCluster", "Faults", "ControlClient", "ControlError",
           "DEV_CONFIGS", "zookeeper_available"]

_WHERE = {
    "broker": "embedded", "StromBroker": "embedded",
    "cluster": "zkcluster", "StromCluster": "zkcluster", "zookeeper_available": "zkcluster",
    "Faults": "control", "ControlClient": "control", "ControlError": "control",
}

if TYPE_CHECKING:
    from .zkcluster import StromCluster, cluster, zookeeper_available
    from .control import ControlClient, ControlError, Faults
    from .embedded import StromBroker, broker


def __getattr__(name: str) -> Any:
    if name == "DEV_CONFIGS":
        from strom.broker.config import DEV_CONFIGS
        return DEV_CONFIGS
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'strom.testing' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{module}", __name__), name)
