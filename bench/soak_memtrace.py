"""Run a service module with Python's heap traced: what a soak's memory growth is made of (bench/soak.py
``--trace-memory``).

    python bench/soak_memtrace.py OUT_DIR EVERY_S FRAMES -m services.node --site s1 --serve

Runs the module as ``python -m`` would.  ``FRAMES`` 0: a daemon thread appends the process's RSS and glibc
malloc's figures (mallinfo2: heap, mmapped, in use, free) to ``OUT_DIR/malloc.txt`` every ``EVERY_S`` seconds,
at no cost to the service (with ``SOAK_MEMTRACE_TRIM=1`` in its environment it then calls ``malloc_trim(0)``
and appends the RSS after it: the part of RSS that was free malloc heap).  Otherwise a daemon thread starts
:mod:`tracemalloc` (``FRAMES`` frames a trace) ``EVERY_S`` seconds later (not while the service imports:
compiling joinlib under tracemalloc took minutes on a loaded machine) and then writes, every ``EVERY_S``
seconds, ``OUT_DIR/heap-<n>.txt``: the process's RSS, the traced total, the top allocation sites by size and
their growth since the first snapshot (after warm-up, a site that keeps growing is a leak; one that settles is
a bounded cache), and the live objects counted by type (``gc``).  Costs CPU and memory (tracemalloc roughly
doubles allocation cost): for finding what grows, not for the soak's verdicts.
"""
from __future__ import annotations

import gc
import os
import runpy
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return int(next(x for x in fh if x.startswith("VmRSS:")).split()[1]) / 1024


def _mallinfo() -> str:
    """glibc's own view (mallinfo2): what malloc got from the OS (heap ``arena`` by brk, ``hblkhd`` by mmap) and
    how much of the heap is in use or free -- free heap that RSS keeps is fragmentation or untrimmed top, not
    live data."""
    import ctypes

    class _MI2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                  "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return "mallinfo2=n/a"
    f.restype = _MI2
    m = f()
    mb = 2**20
    return (f"malloc_heap={m.arena / mb:.1f}MB malloc_mmap={m.hblkhd / mb:.1f}MB ({m.hblks} blocks) "
            f"malloc_in_use={m.uordblks / mb:.1f}MB malloc_free={m.fordblks / mb:.1f}MB "
            f"releasable_top={m.keepcost / mb:.1f}MB")


def _types() -> Counter:
    return Counter(type(o).__name__ for o in gc.get_objects())


def _dump(out: Path, n: int, t0: float, first: list, first_types: list) -> None:
    if not tracemalloc.is_tracing():   # FRAMES 0: RSS and malloc's figures only, at no cost to the service
        line = f"t={time.monotonic() - t0:.0f}s rss={_rss_mb():.1f}MB {_mallinfo()}"
        if os.environ.get("SOAK_MEMTRACE_TRIM") == "1":   # how much of RSS was free malloc heap: trim, measure
            import ctypes
            c0 = time.thread_time()
            ctypes.CDLL(None).malloc_trim(0)
            line += f" rss_after_malloc_trim={_rss_mb():.1f}MB trim_cpu_ms={1000 * (time.thread_time() - c0):.1f}"
        with open(out / "malloc.txt", "a") as fh:
            fh.write(line + "\n")
        return
    snap = tracemalloc.take_snapshot().filter_traces([
        tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
    types = _types()
    cur, peak = tracemalloc.get_traced_memory()
    lines = [f"t={time.monotonic() - t0:.0f}s rss={_rss_mb():.1f}MB traced={cur / 2**20:.1f}MB "
             f"peak={peak / 2**20:.1f}MB gc_objects={sum(types.values())} {_mallinfo()}"]
    lines.append("== top by size (traceback) ==")
    for st in snap.statistics("traceback")[:25]:
        lines.append(f"{st.size / 2**20:8.2f} MB {st.count:9d} blocks")
        lines.extend("      " + x for x in st.traceback.format()[-6:])
    if first:
        lines.append("== growth since the first snapshot (traceback) ==")
        for st in snap.compare_to(first[0], "traceback")[:20]:
            lines.append(f"{st.size_diff / 2**20:+8.2f} MB {st.count_diff:+9d} blocks, now {st.size / 2**20:.2f} MB")
            lines.extend("      " + x for x in st.traceback.format()[-8:])
        lines.append("== live objects by type: growth since the first snapshot ==")
        grow = Counter(types)
        grow.subtract(first_types[0])
        for name, d in grow.most_common(25):
            lines.append(f"{d:+9d} {name} (now {types[name]})")
    else:
        first.append(snap)
        first_types.append(types)
    lines.append("== live objects by type ==")
    lines.extend(f"{c:9d} {name}" for name, c in types.most_common(25))
    (out / f"heap-{n:03d}.txt").write_text("\n".join(lines) + "\n")


def _loop(out: Path, every: float, frames: int) -> None:
    t0, first, first_types, n = time.monotonic(), [], [], 0
    if frames:
        time.sleep(every)
        tracemalloc.start(frames)
    while True:
        time.sleep(every)
        try:
            _dump(out, n, t0, first, first_types)
        except Exception as e:   # a diagnostic: never take the service down
            (out / f"heap-{n:03d}.err").write_text(f"{type(e).__name__}: {e}\n")
        n += 1


def main() -> None:
    out, every, frames = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    if sys.argv[4] != "-m":
        raise SystemExit(__doc__)
    module, rest = sys.argv[5], sys.argv[6:]
    out.mkdir(parents=True, exist_ok=True)
    (out / "pid").write_text(f"{os.getpid()}\n")
    threading.Thread(target=_loop, args=(out, every, frames), daemon=True, name="memtrace").start()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
