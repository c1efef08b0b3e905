"""Tests run the C kernels (setup.py) and the forms a machine without a compiler falls back to, alike: a module
that uses kernels keeps them in its ``_c`` (None: the fallback)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import pytest

#: parametrize a test over both forms; the test takes ``c`` and runs ``with kernels(module, c):``
BOTH = pytest.mark.parametrize("c", [True, False], ids=["c-kernels", "fallback"])


@contextmanager
def kernels(module: Any, c: bool) -> Iterator[None]:
    """``module`` (a module with ``_c``): its kernels on (as installed) or off, for the block."""
    saved = module._c
    module._c = saved if c else None
    try:
        yield
    finally:
        module._c = saved
