"""What the chaos benchmark (bench/chaos.py) reads back and checks against the live contract (docs/live.md).

* :class:`Results`: a thread reading ``out.<query>`` of every run of one query from the beginning, as
  ``joinlib results`` does (``read_results``): a result batch written twice (a fenced instance's queued messages)
  is read once, by its name (:func:`records.result_batch_id`); each result's ``ts`` from its own run's origin (a
  replan's runs have their own).  It keeps the multiset of results, and per sampling interval the
  event-to-result latencies of the results emitted in it.
* :func:`expected`: the contract's results and dead letters for every record in the source topics (the
  generator writes no late record: disorder below δ, so **no** logged idle advance may make one late -- the
  strict form the fault drills use, docs/reliability.md).
* :func:`check_results`, :func:`check_dead_letters`: the verdicts, with what is missing or extra.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Optional

from live_common import read_written, tag

Key = tuple[tuple[Optional[int], ...], int]   # (ids by stream position, head ts in ms since the Unix epoch)


class Results(threading.Thread):
    """See the module docstring; :meth:`add_run` names a run and its origin (results of a run not named yet
    wait until it is)."""

    def __init__(self, bootstrap: str, query: Any, runs: dict[str, int]) -> None:
        super().__init__(daemon=True, name=f"results-{query.name}")
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        from joinlib.adapters.kafka import make_consumer, out_topic
        self.query = query
        self.c = make_consumer(bootstrap, f"chaos-{tag()}")
        self.c.assign([TopicPartition(out_topic(query.name), 0, OFFSET_BEGINNING)])
        self.origins = {r.encode(): o for r, o in runs.items()}
        self.lock = threading.Lock()
        self.got: Counter = Counter()
        self.seen: set = set()
        self.copies = 0          # result batches read twice and dropped
        self.pending: list[tuple[bytes, bytes]] = []
        self.latency: list[tuple[float, int]] = []   # (ms, results) since the last take
        self.count = 0
        self.last_offset = -1
        self.stop = threading.Event()

    def add_run(self, run: str, origin_ms: int) -> None:
        with self.lock:
            self.origins[run.encode()] = origin_ms
            pending, self.pending = self.pending, []
        for value, run_b in pending:
            self._take(value, run_b)

    def run(self) -> None:
        from joinlib.adapters.kafka import consume
        try:
            while not self.stop.is_set():
                for m in consume(self.c, 2000, 0.3):
                    self.last_offset = m.offset()
                    run_b = dict(m.headers() or ()).get("run", b"")
                    self._take(m.value(), run_b)
        finally:
            self.c.close()

    def _take(self, value: bytes, run_b: bytes) -> None:
        from joinlib.protocol import records
        with self.lock:
            origin = self.origins.get(run_b)
            if origin is None:
                self.pending.append((value, run_b))
                return
            bid = records.result_batch_id(value)
            if bid in self.seen:
                self.copies += 1
                return
            self.seen.add(bid)
            batch = records.decode_result_batch(value)
            names = self.query.names
            for g in batch.groups:
                ts = g.head_ts + origin
                for i in g.last_ids:
                    ids = {**g.ids, g.last: i}
                    self._add((tuple(ids.get(x) for x in names), ts))
                self.latency.append((batch.emit_ms - ts, len(g.last_ids)))
                self.count += len(g.last_ids)

    def _add(self, key: Key) -> None:
        """One result read (under the lock): kept in the multiset (bench/soak_check.py tallies it instead)."""
        self.got[key] += 1

    def take(self) -> tuple[list[tuple[float, int]], int]:
        """The latencies since the last call, and the results so far."""
        with self.lock:
            lat, self.latency = self.latency, []
            return lat, self.count

    def snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.got)

    def close(self) -> None:
        self.stop.set()
        self.join(10)


def written_records(bootstrap: str, query: Any) -> dict[str, list]:
    """Every record now in the query's source topics (the generator is a process: the topics are the truth)."""
    return read_written(bootstrap, query, timeout_s=300)


def expected(query: Any, written: dict[str, list], origin_ms: int) -> Any:
    """The contract's :class:`~joinlib.ingest.contract.Expected` for the records ``written`` (no idle advance:
    none may make a record late), with result ts in ms since the Unix epoch."""
    from joinlib.ingest.contract import expected_output
    want = expected_output(query, written, origin_ms)
    want.results = Counter({(ids, ts + origin_ms): n for (ids, ts), n in want.results.items()})
    return want


def check_results(want: Counter, got: Counter) -> dict:
    missing, extra = want - got, got - want
    dup = sum(n - 1 for k, n in got.items() if n > 1)
    return {"reference": sum(want.values()), "got": sum(got.values()), "missing": sum(missing.values()),
            "extra_or_duplicated": sum(extra.values()), "duplicated": dup,
            "missing_examples": [list(k) for k in list(missing)[:5]],
            "extra_examples": [list(k) for k in list(extra)[:5]], "exact": not missing and not extra}


def wait_exact(results: dict[str, Results], wants: dict[str, Counter], timeout_s: float,
               report: Any = print) -> dict[str, dict]:
    """Poll until every query's results equal its reference (the last results come once the idle timeout
    advances the watermarks past the end of the input), at most ``timeout_s``; the comparison of each."""
    deadline, last = time.monotonic() + timeout_s, {}
    while True:
        last = {q: check_results(wants[q], r.snapshot()) for q, r in results.items()}
        if all(v["exact"] for v in last.values()) or time.monotonic() > deadline:
            return last
        report("  waiting for the last results: " + ", ".join(f"{q} {v['got']:,}/{v['reference']:,}"
                                                             for q, v in last.items()))
        time.sleep(2.0)


def dead_letters(bootstrap: str, query: Any, runs: list[str]) -> list[tuple[tuple[str, int, int], str, bytes, str]]:
    """Every message of ``dlq.<query>`` of the given runs: (place, reason, bytes, run)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from joinlib.adapters.kafka import consume, end_offsets, make_consumer
    topic, wanted = f"dlq.{query.name}", {r.encode() for r in runs}
    c = make_consumer(bootstrap, f"chaos-dlq-{tag()}")
    out: list[tuple[tuple[str, int, int], str, bytes, str]] = []
    try:
        end = end_offsets(c, [topic])[topic]
        if not end:
            return out
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen, deadline = 0, time.monotonic() + 120
        while seen < end and time.monotonic() < deadline:
            for m in consume(c, 5000, 0.3):
                seen = m.offset() + 1
                h = dict(m.headers() or ())
                if h.get("run") in wanted:
                    out.append(((h["dlq.topic"].decode(), int(h["dlq.partition"]), int(h["dlq.offset"])),
                                h["dlq.reason"].decode(), m.value(), h["run"].decode()))
        return out
    finally:
        c.close()


def check_dead_letters(dead: list, want_dead: dict[tuple[str, int, int], str],
                       values: dict[tuple[str, int, int], bytes]) -> dict:
    """Every record the contract makes a dead letter is in the topic with its reason and its bytes, no other
    record is; copies at one place must be byte-identical (docs/live.md "Dead letters": a paused instance's
    queued messages, a replan's overlap) and are counted, not failed."""
    first: dict[tuple[str, int, int], tuple[str, bytes]] = {}
    differing = []
    for place, reason, value, _run in dead:
        if first.setdefault(place, (reason, value)) != (reason, value):
            differing.append(list(place))
    got = {p: r for p, (r, _) in first.items()}
    missing = sorted(set(want_dead) - set(got))
    extra = sorted(set(got) - set(want_dead))
    wrong_reason = sorted(p for p in set(got) & set(want_dead) if got[p] != want_dead[p])
    wrong_bytes = sorted(p for p, (_, v) in first.items() if p in values and values[p] != v)
    ok = not (missing or extra or wrong_reason or wrong_bytes or differing)
    return {"expected": len(want_dead), "messages": len(dead), "places": len(first),
            "identical_copies": len(dead) - len(first) - len(differing), "missing": len(missing),
            "extra": len(extra), "wrong_reason": len(wrong_reason), "wrong_bytes": len(wrong_bytes),
            "differing_copies": len(differing),
            "examples": {"missing": [list(p) for p in missing[:5]], "extra": [list(p) for p in extra[:5]],
                         "differing": differing[:5]}, "ok": ok}
