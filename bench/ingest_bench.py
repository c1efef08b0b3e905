"""What a live source's record costs a node before the join: decoding (joinlib.ingest.records.Decoder) and the
ingest that orders records by event time and releases them below the watermark (joinlib.ingest.stream).

Why a bench of its own: at tens of microseconds of node CPU per event, a few microseconds of decoding are a
tenth of it, and a whole live run is too noisy on a shared machine to see that.  This one runs in one thread,
without Kafka, over the live benchmarks' records (bench/live_common.py: JSON events with an id, an event time,
a join value and a 1,250-byte payload, generated as the live generator writes them), and reports the thread's
CPU per record, best of ``--repeat`` runs.

    python bench/ingest_bench.py [--records 60000] [--repeat 5] [--out results/ingest]

Writes OUT/ingest.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from live_common import fig7_query, machine, profile  # noqa: E402

from joinlib.ingest.events import EventGen  # noqa: E402
from joinlib.ingest.records import Decoder  # noqa: E402
from joinlib.ingest.stream import StreamIngest  # noqa: E402

ORIGIN = 1_000_000


def run(records: int, repeat: int) -> dict[str, float]:
    q = fig7_query("q", ["a", "b", "c"], ["t1", "t2", "t3"])
    s = q.streams[0]
    assert s.source is not None
    values = [r.value for r in EventGen(s, profile(), seed=1, time_base_ms=ORIGIN).take(records)]
    dec = Decoder(s, s.source, origin_ms=ORIGIN)

    def decode_only() -> float:
        t0 = time.thread_time()
        for off, v in enumerate(values):
            dec.decode(v, 0, off)
        return time.thread_time() - t0

    def with_ingest() -> float:
        ing = StreamIngest(s, {0: 0}, tau=100, delta=80, idle_timeout=1000)
        t0 = time.thread_time()
        for off, v in enumerate(values):
            ing.offer(0, off, dec.decode(v, 0, off), 0.0)   # type: ignore[arg-type]
            if off % 50 == 49:
                ing.release()
        ing.release()
        return time.thread_time() - t0

    per = 1e6 / records
    return {"decode_us_per_record": round(min(decode_only() for _ in range(repeat)) * per, 3),
            "decode_and_ingest_us_per_record": round(min(with_ingest() for _ in range(repeat)) * per, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=60_000, help="records to decode per run (default 60,000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs; the best is reported (default 5)")
    ap.add_argument("--out", default=str(ROOT / "results" / "ingest"))
    args = ap.parse_args(argv)
    if args.records <= 0 or args.repeat <= 0:
        ap.error("--records and --repeat must be positive")
    got = {**run(args.records, args.repeat), "records": args.records, "machine": machine()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest.json").write_text(json.dumps(got, indent=1))
    print(f"decode: {got['decode_us_per_record']} us/record; decode + ingest: "
          f"{got['decode_and_ingest_us_per_record']} us/record -> {out / 'ingest.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
