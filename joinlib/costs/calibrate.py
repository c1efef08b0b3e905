"""Measure the cost constants of :class:`joinlib.costs.term_models.CalibratedModel` on this machine.

``joinlib calibrate --out FILE.json`` times micro-runs of the code the engine runs
(the in-memory window store :class:`joinlib.state.memory.MemoryWindowStore`, the
window bisection :func:`joinlib.runtime.windowing.valid_range`, the key grouping of a
join step, the Avro codec of :mod:`joinlib.protocol.wire`) on synthetic tuples shaped like
the generator's, and writes the JSON that ``get_model("calibrated", path=FILE)``
reads.  Every constant is seconds per operation:

* ``c_i``   — insert one tuple into a hash-indexed window store (batches of 32);
* ``c_u``   — update a full sliding window by one tuple: insert it and expire the
  oldest (``insert`` + ``purge_below``), per tuple;
* ``c_h``   — hash one probing row: compute its key (``KeySpec.probe_key``) and group
  it by key (a dict), as a join step does before probing;
* ``c_p``   — one hash probe: look the key up (``lookup_many``) and bisect the
  window range (``valid_range``); ``probe = "hash"``;
* ``c_match`` — per produced match: the slice of matching tuples and the output row
  built for each (``row[:pos] + (t,) + row[pos+1:]``);
  ``c_p`` and ``c_match`` are the intercept and slope of a least-squares line of the
  time per probe against the matches per probe, over windows with 1 to 64 tuples
  per key;
* ``c_byte``  — encoding (:func:`~joinlib.protocol.wire.encode_envelope`, per-tuple caches
  empty) plus decoding (:func:`~joinlib.protocol.wire.decode_envelope`) of a full-tuple
  message, per byte.  The embedded engine only encodes (the simulator charges the
  encoded size); a Kafka deployment also decodes.  Both parts are in ``meta``.

Each timing is the median of ``repeat`` runs; ``meta`` records the machine, date,
command and the raw fit.  The constants are for *this* implementation (hash
probes), not the paper's nested-loop engine.
"""
from __future__ import annotations

import gc
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from tqdm import tqdm

from joinlib.costs.term_models import CalibratedModel
from joinlib.errors import JoinlibError
from joinlib.model import Stream, Tup, Window
from joinlib.plan.ir import KeySpec
from joinlib.protocol.messages import Envelope, TupleBatch
from joinlib.protocol.values import encode_values
from joinlib.protocol.wire import decode_envelope, encode_envelope
from joinlib.runtime.windowing import valid_range
from joinlib.state.memory import MemoryWindowStore

BATCH = 32


def _tuples(n: int, keys: int, attrs: int, seed: int = 1, start_seq: int = 0, pos: int = 1) -> list[Tup]:
    """n tuples 1 ms apart, ``keys`` distinct join values, ``attrs`` 4-character payload values."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        payload = ["".join(rng.choice("abcdefghij") for _ in range(4)) for _ in range(attrs)]
        out.append(Tup(pos, start_seq + i, start_seq + i, start_seq + i, (f"v{rng.randrange(keys):04d}",),
                       encode_values(payload)))
    return out


def _median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        finally:
            gc.enable()
    return statistics.median(times)


def time_insert(n: int, repeat: int) -> float:
    tups = _tuples(n, 100, 0)
    batches = [tups[i:i + BATCH] for i in range(0, n, BATCH)]

    def run() -> None:
        store = MemoryWindowStore()
        store.add_index((0,))
        for b in batches:
            store.insert(b)
    return _median_time(run, repeat) / n


def time_update(n: int, window: int, repeat: int) -> float:
    """Insert + expire per tuple on a full window of ``window`` tuples."""
    tups = _tuples(window + n, 100, 0)
    head, tail = tups[:window], tups[window:]
    batches = [tail[i:i + BATCH] for i in range(0, n, BATCH)]

    def run() -> float:
        store = MemoryWindowStore()
        store.add_index((0,))
        store.insert(head)
        t0 = time.perf_counter()
        for b in batches:
            store.insert(b)
            store.purge_below(ts=b[-1].ts + 1 - window)
        return time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        gc.collect()
        times.append(run())
    return statistics.median(times) / n


def time_hash(n: int, repeat: int) -> float:
    spec = KeySpec(index=(0,), sources=((0, 0),))
    rows = [(t, None) for t in _tuples(n, 100, 0, pos=0)]
    pk = spec.probe_key

    def run() -> None:
        out: dict[tuple[Any, ...], list[tuple[Tup, None]]] = {}
        for row in rows:
            k = pk(row)
            if k is not None:
                out.setdefault(k, []).append(row)
    return _median_time(run, repeat) / n


def time_probe(per_key: int, probes: int, repeat: int) -> tuple[float, float]:
    """(seconds per probe, matches per probe) on a window with ``per_key`` tuples per key."""
    keys = 200
    stream = Stream("S2", 1, "b", Window("time", 10 ** 9), ("J",))
    store = MemoryWindowStore()
    store.add_index((0,))
    window = _tuples(keys * per_key, keys, 0, seed=2)
    store.insert(window)
    end = len(window) + 10
    heads = [Tup(0, i, end + i, i, (f"v{random.Random(i).randrange(keys):04d}",)) for i in range(probes)]
    rows: list[tuple[Tup, Optional[Tup]]] = [(h, None) for h in heads]
    bykey: dict[tuple[Any, ...], list[tuple[Tup, Optional[Tup]]]] = {}
    for r in rows:
        bykey.setdefault(r[0].key, []).append(r)
    index, pos = (0,), 1

    def run() -> list[tuple[Optional[Tup], ...]]:
        out: list[tuple[Optional[Tup], ...]] = []
        for k, kl in store.lookup_many(index, list(bykey)).items():
            tups = kl.tups
            for row in bykey[k]:
                lo, hi = valid_range(kl, stream, row[0], None, 100)
                if lo < hi:
                    a, b = row[:pos], row[pos + 1:]
                    out.extend(a + (t,) + b for t in tups[lo:hi])
        return out
    matches = len(run()) / probes
    return _median_time(run, repeat) / probes, matches


def time_codec(n: int, attrs: int, repeat: int) -> tuple[float, float, int]:
    """(encode s/byte, decode s/byte, bytes) of a full-tuple message of n tuples."""
    tups = _tuples(n, 100, attrs)
    env = Envelope("a", "b", 0, 0, TupleBatch(rows=[(t,) for t in tups]))

    def enc() -> bytes:
        for t in tups:
            t.wire = None
        return encode_envelope(env)
    data = enc()
    t_enc = _median_time(enc, repeat)
    t_dec = _median_time(lambda: decode_envelope(data), repeat)
    return t_enc / len(data), t_dec / len(data), len(data)


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y against x."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def calibrate(quick: bool = False, repeat: int = 5, progress: bool = False) -> dict[str, Any]:
    """Run the micro-benchmarks; return the calibration document."""
    if repeat < 1:
        raise JoinlibError("--repeat must be at least 1")
    n = 4000 if quick else 40000
    steps = ["insert", "update", "hash", "probe 1", "probe 4", "probe 16", "probe 64", "codec"]
    bar = tqdm(total=len(steps), desc="calibrate", unit="step", disable=not progress, file=sys.stderr, leave=False)
    c_i = time_insert(n, repeat)
    bar.update(1)
    c_u = time_update(n, 2000 if not quick else 500, repeat)
    bar.update(1)
    c_h = time_hash(n, repeat)
    bar.update(1)
    probe_points = []
    for per_key in (1, 4, 16, 64):
        t, m = time_probe(per_key, n // 4, repeat)
        probe_points.append((m, t))
        bar.update(1)
    intercept, slope = _fit(probe_points)
    c_p = max(intercept, min(t for _, t in probe_points) * 0.5)  # a noisy fit must stay positive
    c_match = max(slope, 1e-12)
    enc, dec, nbytes = time_codec(200 if quick else 1000, 100, repeat)
    bar.update(1)
    bar.close()
    doc = {
        "c_p": c_p, "c_u": c_u, "c_h": c_h, "c_i": c_i, "c_byte": enc + dec, "probe": "hash",
        "c_match": c_match,
        "meta": {
            "host": platform.node(), "machine": platform.machine(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": "joinlib calibrate" + (" --quick" if quick else ""),
            "repeat": repeat, "tuples": n, "c_byte_encode": enc, "c_byte_decode": dec, "codec_message_bytes": nbytes,
            "probe_fit": [{"matches_per_probe": round(m, 3), "seconds_per_probe": t} for m, t in probe_points],
            "note": "seconds per operation on this machine; probe = hash (c_p per probe + c_match per match)",
        },
    }
    return doc


def main(out: Path, quick: bool = False, repeat: int = 5, progress: bool = False) -> dict[str, Any]:
    out = Path(out)
    if out.is_dir():
        raise JoinlibError(f"--out {out} is a directory; give a file name such as calibration.json")
    if out.parent and not out.parent.exists():
        raise JoinlibError(f"cannot write {out}: directory {out.parent} does not exist")
    doc = calibrate(quick, repeat, progress)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    model = CalibratedModel.from_json(out)  # what the planner will read: must load
    print(f"{'constant':<9}{'seconds':>12}  meaning")
    for key, meaning in (("c_p", "per hash probe (lookup + window bisection)"),
                         ("c_match", "per produced match"),
                         ("c_h", "per hashed probing row"),
                         ("c_i", "per tuple inserted into a window"),
                         ("c_u", "per tuple of a window update (insert + expire)"),
                         ("c_byte", "per shipped byte (encode + decode)")):
        print(f"{key:<9}{getattr(model, key):>12.3e}  {meaning}")
    print(f"\nwrote {out}; use it with --model calibrated --calibration {out} "
          f"or get_model('calibrated', path='{out}')")
    return doc
