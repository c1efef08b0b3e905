"""Window stores: where a node keeps window tuples (memory here, Redis in adapters)."""
from .base import KeyList, WindowStore
from .memory import MemoryWindowStore

__all__ = ["KeyList", "WindowStore", "MemoryWindowStore"]
