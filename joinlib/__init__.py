"""joinlib: distributed sliding-window joins with semijoins (Tran & Lee 2010) and beyond.

The Python API (:mod:`joinlib.api`, docs/api.md) is here too -- ``joinlib.run_embedded``, ``joinlib.explain``,
``joinlib.connect`` -- loaded on first use, so that ``import joinlib`` (which every module and service does first)
stays light and imports no Kafka client.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from joinlib.api import Planner, QueryHandle, Result, connect, explain, load, run_embedded

_API = ("Planner", "QueryHandle", "Result", "connect", "explain", "load", "run_embedded")
__all__ = ["__version__", "Planner", "QueryHandle", "Result", "connect", "explain", "load", "run_embedded"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from joinlib import api
        return getattr(api, name)
    raise AttributeError(f"module 'joinlib' has no attribute {name!r}")
