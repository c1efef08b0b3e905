"""How fast the soak's reference check runs (bench/soak_check.py, issue 29): generated Fig. 7 records at a soak's
rate fed to :class:`~joinlib.ingest.contract_stream.IncrementalExpected` as the check feeds them (runs of one
partition, chunks handed out as they become final), with no broker: records per CPU-second of the reference alone.

    python bench/soak_check_speed.py [--rate 3480] [--seconds 20] [--per-record] [--default-gc] [--profile]

``--per-record`` feeds one record per call (``add``) instead of runs (``add_run``); ``--default-gc`` keeps
Python's default collector thresholds instead of the soak's (``soak.CHECK_GC_THRESHOLDS``).  A 30-minute soak at
R events/s per site reads 5,400 x R records: divide by the figure printed for the check's CPU.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import fig7_query, profile  # noqa: E402
from soak import CHECK_GC_THRESHOLDS, selectivity  # noqa: E402

from joinlib.ingest.contract import Written  # noqa: E402
from joinlib.ingest.contract_stream import IncrementalExpected  # noqa: E402
from joinlib.ingest.events import EventGen  # noqa: E402

BATCH = 5000   # records per stream between chunk hand-outs (the check consumes 5,000 at a time)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=3480.0, help="events/s per site (default 3480, soak-s18's)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of records per site (default 20)")
    ap.add_argument("--per-record", action="store_true", help="add() per record instead of add_run() per run")
    ap.add_argument("--default-gc", action="store_true", help="Python's default collector thresholds")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions by self time")
    args = ap.parse_args()
    if args.rate <= 0 or args.seconds <= 0:
        ap.error("--rate and --seconds must be positive")
    f = selectivity(args.rate)
    q = fig7_query("speed", ["a", "b", "c"], ["ta", "tb", "tc"], f=f, rate=args.rate, start="latest", idle="2s")
    n = int(args.rate * args.seconds)
    recs = {s.name: [r.value for r in EventGen(s, profile(f=f, rate=args.rate), seed=1).take(n)] for s in q.streams}
    inc = IncrementalExpected(q, 0, {s.name: [0] for s in q.streams}, 15_000)
    if not args.default_gc:
        gc.set_threshold(*CHECK_GC_THRESHOLDS)

    def feed() -> int:
        total = 0
        for i in range(0, n, BATCH):
            for s in q.streams:
                vals = recs[s.name][i:i + BATCH]
                if args.per_record:
                    for off, v in enumerate(vals, start=i):
                        inc.add(s.name, Written(0, off, v))
                else:
                    inc.add_run(s.name, 0, list(range(i, i + len(vals))), vals)
            total += sum(sum(res.values()) for _k, res in inc.ready())
        return total + sum(sum(res.values()) for _k, res in inc.finish())

    t0 = time.process_time()
    if args.profile:
        prof = cProfile.Profile()
        results = prof.runcall(feed)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    else:
        results = feed()
    cpu = time.process_time() - t0
    print(f"{3 * n:,} records, {results:,} results, {cpu:.2f} s of CPU: {3 * n / cpu:,.0f} records per CPU-second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
