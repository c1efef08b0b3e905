"""Window stores: where a node keeps window tuples (memory here, Redis in adapters)."""
from joinlib.state.base import KeyList, WindowStore
from joinlib.state.memory import MemoryWindowStore

__all__ = ["KeyList", "WindowStore", "MemoryWindowStore"]
