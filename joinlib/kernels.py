"""The C kernels setup.py builds (``KERNELS`` there), loaded where they are used.

Each kernel is optional: without a C compiler at install (or on a machine a kernel refuses, such as a big-endian
one for the Bloom kernels) :func:`kernel` answers None and the module that uses it keeps its Python or numpy form,
which gives the same answers more slowly; tests run both forms (tests/kernels.py).  Why each kernel exists is said
at the top of its .c file.
"""
from __future__ import annotations

import importlib
from typing import Any


def kernel(name: str) -> Any:
    """The compiled module ``name`` (e.g. ``joinlib.protocol._bloomc``), or None when it is not built."""
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - depends on the install
        return None
