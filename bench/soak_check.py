"""How the soak (bench/soak.py) checks every result of a long live run against the live contract (docs/live.md),
in bounded memory.

A 30-minute soak writes millions of 1,250-byte records to source topics that keep only a few minutes (disk), and
its reference has millions of results: neither can be kept to the end, as the chaos benchmark does
(bench/chaos_check.py).  So both sides are reduced, as they are read, to a :class:`Tally`: per *chunk* of head
time (15 s), the number of results and the sum of their 64-bit digests (BLAKE2b of the result's ids and head time)
modulo 2**64 -- a multiset hash: independent of order, and a missing, extra or duplicated result changes the count
or the sum.  Equal tallies chunk by chunk = the same multiset of results, up to a 2**-64 chance per chunk.

* :class:`SourceCheck`: a thread reading every source partition from its first offset while the generator writes,
  feeding :class:`~joinlib.ingest.contract_stream.IncrementalExpected` (the contract chunk by chunk: each partition
  classified in offset order, each chunk joined once every watermark has passed it) and tallying each chunk's
  reference results.  It notes an offset gap (records deleted by retention before it read them: the check would be
  incomplete) and keeps the bytes of the records the contract makes dead letters.
* :class:`TalliedResults`: chaos_check's :class:`~chaos_check.Results` (``out.<query>`` from the beginning, a
  result batch written twice read once, latencies per interval) tallying the results instead of keeping them.
* :func:`compare`: the verdict, with the chunks that differ.  Dead letters are checked as chaos_check does.
"""
from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, Optional

from chaos_check import Key, Results
from live_common import tag

CHUNK_MS = 15_000
MASK = 2**64 - 1


def digest(key: Key) -> int:
    """A result's 64-bit digest: of its ids by stream position and its head time (ms since the Unix epoch)."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "little")


class Tally:
    """Per chunk of head time (``origin_ms`` + k * ``chunk_ms``), [results, sum of digests mod 2**64]."""

    def __init__(self, origin_ms: int, chunk_ms: int = CHUNK_MS) -> None:
        self.origin, self.chunk_ms = origin_ms, chunk_ms
        self.chunks: dict[int, list[int]] = {}
        self.lock = threading.Lock()

    def add(self, key: Key, n: int = 1) -> None:
        k = (key[1] - self.origin) // self.chunk_ms
        d = digest(key)
        with self.lock:
            c = self.chunks.setdefault(k, [0, 0])
            c[0] += n
            c[1] = (c[1] + n * d) & MASK

    def total(self) -> int:
        with self.lock:
            return sum(c[0] for c in self.chunks.values())

    def snapshot(self) -> dict[int, tuple[int, int]]:
        with self.lock:
            return {k: (c[0], c[1]) for k, c in self.chunks.items() if c[0]}


def compare(want: Tally, got: Tally) -> dict:
    """Chunk by chunk: equal counts and digest sums, else the chunks that differ (count difference, first 10)."""
    w, g = want.snapshot(), got.snapshot()
    differ = sorted(k for k in set(w) | set(g) if w.get(k) != g.get(k))
    ref, n = sum(c for c, _ in w.values()), sum(c for c, _ in g.values())
    return {"reference": ref, "got": n, "chunks": len(set(w) | set(g)), "chunk_ms": want.chunk_ms,
            "chunks_differing": len(differ),
            "differing_examples": [{"chunk": k, "head_from_ms": want.origin + k * want.chunk_ms,
                                    "reference": w.get(k, (0, 0))[0], "got": g.get(k, (0, 0))[0]}
                                   for k in differ[:10]],
            "exact": not differ}


class TalliedResults(Results):
    """chaos_check's reader of ``out.<query>``, tallying each result into ``tally`` instead of keeping it."""

    def __init__(self, bootstrap: str, query: Any, run: str, origin_ms: int, chunk_ms: int = CHUNK_MS) -> None:
        super().__init__(bootstrap, query, {run: origin_ms})
        self.tally = Tally(origin_ms, chunk_ms)

    def _add(self, key: Key) -> None:
        self.tally.add(key)


class SourceCheck(threading.Thread):
    """See the module docstring.  ``partitions``: of each source topic; call :meth:`finish` once the input ended."""

    def __init__(self, bootstrap: str, query: Any, origin_ms: int, partitions: int, chunk_ms: int = CHUNK_MS,
                 yield_cpu: bool = True) -> None:
        super().__init__(daemon=True, name=f"source-check-{query.name}")
        from confluent_kafka import TopicPartition

        from joinlib.adapters.kafka import make_consumer
        from joinlib.ingest.contract_stream import IncrementalExpected
        self.query, self.bootstrap = query, bootstrap
        self.inc = IncrementalExpected(query, origin_ms, {s.name: list(range(partitions)) for s in query.streams},
                                       chunk_ms)
        self.want = Tally(origin_ms, chunk_ms)
        self.stream_of = {s.source.topic: s.name for s in query.streams}
        self.next_off = {(t, p): 0 for t in self.stream_of for p in range(partitions)}
        self.c = make_consumer(bootstrap, f"soak-src-{tag()}", **{"auto.offset.reset": "earliest"})
        self.c.assign([TopicPartition(t, p, 0) for t, p in self.next_off])
        self.values: dict[tuple[str, int, int], bytes] = {}   # the bytes of each expected dead letter
        self.gaps: list[dict] = []
        self.records = 0
        self.ends: Optional[dict[tuple[str, int], int]] = None
        self.done = threading.Event()
        self.stop = threading.Event()
        self.error: Optional[str] = None
        self.cpu_s = 0.0
        self.yield_cpu = yield_cpu   # nice 19 while the nodes run beside it (not after the input)

    def run(self) -> None:
        try:
            if self.yield_cpu:
                _yield_to_the_nodes()
            self._loop()
        except Exception as e:   # reported in the check, not lost in a thread
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.cpu_s = time.thread_time()
            self.c.close()
            self.done.set()

    def _loop(self) -> None:
        from joinlib.adapters.kafka import consume
        origin = self.want.origin
        while not self.stop.is_set():
            msgs = consume(self.c, 5000, 0.3)
            i = 0
            while i < len(msgs):   # a run: consecutive records of one partition, decoded in one call
                place = (msgs[i].topic(), msgs[i].partition())
                j = i + 1
                while j < len(msgs) and msgs[j].partition() == place[1] and msgs[j].topic() == place[0]:
                    j += 1
                self._add_run(place, msgs[i:j])
                i = j
            self._tally(self.inc.ready(), origin)
            ends = self.ends
            if ends is not None and all(self.next_off[p] >= e for p, e in ends.items()):
                self._tally(self.inc.finish(), origin)
                return

    def _add_run(self, place: tuple[str, int], msgs: list[Any]) -> None:
        offsets = [m.offset() for m in msgs]
        values = [m.value() for m in msgs]
        first = self.next_off[place]
        if offsets[0] != first or offsets[-1] - offsets[0] != len(offsets) - 1:   # a gap somewhere: find it
            for want, got in zip([first, *[o + 1 for o in offsets[:-1]]], offsets, strict=True):
                if got != want:
                    self.gaps.append({"topic": place[0], "partition": place[1], "expected": want, "read": got})
        self.next_off[place] = offsets[-1] + 1
        self.records += len(msgs)
        dead = self.inc.add_run(self.stream_of[place[0]], place[1], offsets, values)
        if dead:
            at = dict(zip(offsets, values, strict=True))
            for off, _reason in dead:
                self.values[(place[0], place[1], off)] = at[off]

    def _tally(self, chunks: Any, origin: int) -> None:
        for _k, results in chunks:
            for (ids, ts), n in results.items():
                self.want.add((ids, ts + origin), n)

    def finish(self, timeout_s: float) -> None:
        """The input has ended: read up to the topics' ends, then hand out every chunk left; waits as long as the
        thread reads on (reading a whole run after it, ``--check after``, takes minutes), and gives up when it
        has read nothing for ``timeout_s``."""
        from confluent_kafka import TopicPartition

        from joinlib.adapters.kafka import make_consumer
        c = make_consumer(self.bootstrap, f"soak-ends-{tag()}")
        try:
            self.ends = {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                         for t, p in self.next_off}
        finally:
            c.close()
        read = -1
        while not self.done.wait(timeout_s):
            if self.records == read:
                self.error = self.error or (f"the source check read nothing for {timeout_s:.0f} s before the "
                                            f"topics' ends")
                return
            read = self.records

    def summary(self) -> dict:
        return {"records": self.records, "on_time": self.inc.on_time, "dead_letters_expected": len(self.inc.dead),
                "offset_gaps": self.gaps[:10], "offset_gap_count": len(self.gaps), "error": self.error,
                "check_thread_cpu_s": round(self.cpu_s, 1)}


def _yield_to_the_nodes() -> None:
    """This thread at the lowest CPU priority (nice 19, Linux: per thread): on a small machine the check takes about
    a third of a core (docs/reliability.md), which the node services then get first; it reads what it missed in the
    idle moments, as long as the topics' retention keeps it (an offset gap says so otherwise)."""
    import os
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def final_check(bootstrap: str, query: Any, run: str, source: SourceCheck, results: TalliedResults,
                timeout_s: float, report: Any = print) -> dict:
    """After the input ended: the reference's last chunks; the live results compared chunk by chunk, waiting at
    most ``timeout_s`` for them to match (the last ones come once the idle timeout moves the watermarks past
    the end of the input); the dead letters as chaos_check checks them."""
    from chaos_check import check_dead_letters, dead_letters
    source.finish(timeout_s)
    deadline, cmp = time.monotonic() + timeout_s, compare(source.want, results.tally)
    while not cmp["exact"] and source.error is None and time.monotonic() < deadline:
        report(f"  waiting for the last results: {cmp['got']:,}/{cmp['reference']:,}")
        time.sleep(2.0)
        cmp = compare(source.want, results.tally)
    dead = check_dead_letters(dead_letters(bootstrap, query, [run]), source.inc.dead, source.values)
    src = source.summary()
    complete = src["error"] is None and not src["offset_gap_count"]
    return {"results": cmp, "batch_copies_dropped": results.copies, "dead_letters": dead, "source": src,
            "complete": complete, "exact": complete and cmp["exact"] and dead["ok"]}
