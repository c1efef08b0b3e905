"""The soak's sustainable rate, searched with the soak itself: short probes of the full set-up at trial rates.

Why: a backlog's drain measures a burst -- the nodes reading as fast as they can with nothing else running -- while
a soak also runs the generator writing the events, the reader of the results and the sampling (and, with
``--check live``, the check thread reading every source record: a quarter of a core at ~10k records/s,
docs/reliability.md), on the same two cores.  80 % of the drain rate (18.3k events/s in a
3.3 s drain) put a 30-minute soak at 4,890 events/s per site, where the central node fell behind within a minute
(lag 100k records, p99 66 s).  So the rate is searched the way it will be run: each probe is a short soak (same
services, generator, check and sampling), and it *keeps up* when its lag stays bounded after the probe's warm-up
(the soak's own lag verdict), its p99 latency stays under a bound (a probe at 2,200 events/s per site kept its
lag under the verdict's bound with a p99 of 7 s: seconds behind) and its results are exact.

The search starts at ``start`` (half the drain's per-site rate), raises the rate by ``step`` after a probe that
kept up and lowers it by the same factor after one that did not; once both a kept-up and a failed rate are known
it bisects between them (geometrically).  The sustainable rate is the highest rate that kept up; none kept up: the
lowest tried, divided by ``step`` once more (reported as such: ``kept_up`` says which).
"""
from __future__ import annotations

import math
from typing import Any, Callable

Probe = Callable[[float], dict[str, Any]]   # rate per site -> {"kept_up": bool, ...figures}


def find_sustainable(probe: Probe, start: float, probes: int, step: float = 1.4,
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``probes`` probes from ``start`` events/s per site (see the module docstring); the rates tried with their
    figures, and the sustainable rate."""
    tried: list[dict[str, Any]] = []
    rate = start
    for i in range(max(1, probes)):
        got = probe(rate)
        tried.append({"rate_per_site": rate, **got})
        say(f"probe {i + 1} of {probes}: {rate:,.0f} events/s per site: "
            f"{'kept up' if got['kept_up'] else 'fell behind'} ({got.get('why', '')})")
        ok = [t["rate_per_site"] for t in tried if t["kept_up"]]
        bad = [t["rate_per_site"] for t in tried if not t["kept_up"]]
        lo, hi = (max(ok) if ok else None), (min(bad) if bad else None)
        if lo is not None and hi is not None:
            rate = math.sqrt(lo * hi) if hi > lo else lo / step   # a failure above a success: bisect
        else:
            rate = rate * step if got["kept_up"] else rate / step
        rate = float(round(rate, -1))
    ok = [t["rate_per_site"] for t in tried if t["kept_up"]]
    best = max(ok) if ok else round(min(t["rate_per_site"] for t in tried) / step, -1)
    return {"how": "short soaks at trial rates (same services, generator, check and sampling as the soak); a rate "
                   "keeps up when the probe's lag stays bounded after its warm-up, its p99 latency under the bound "
                   "and its results are exact",
            "probes": tried, "sustainable_per_site": best, "kept_up": bool(ok)}
