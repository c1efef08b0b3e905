"""Run independent experiment tasks in worker processes, results in task order, with a progress
callback per finished task (the experiments' ``--jobs``)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_all(fn: Callable[[T], R], tasks: Sequence[T], jobs: int, bar: Callable[[int], Any]) -> list[R]:
    """``[fn(t) for t in tasks]``, in ``jobs`` processes when more than one (``fn`` must pickle)."""
    out: list[R] = []
    if jobs <= 1:
        for t in tasks:
            out.append(fn(t))
            bar(1)
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for r in pool.map(fn, tasks):
            out.append(r)
            bar(1)
    return out
