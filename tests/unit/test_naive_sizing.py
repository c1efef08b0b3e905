"""The naive baseline (what shipping every source tuple to every other site would cost) sizes each closed epoch of a
live stream once, whatever the number of sites it would go to, and counts that size for each of them: the figures
are those of sizing it per site."""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from joinlib.model import Tup
from joinlib.node.run_inputs import RunInputs
from joinlib.node.sources import LiveInputs
from joinlib.protocol import wire
from joinlib.query import parse_query
from tests.live_inputs import Record

SRC = {"topic": "t1", "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id", "start": "earliest"}
QUERY = parse_query({"streams": {"S1": {"site": "a", "window": "1s", "source": SRC},
                                 "S2": {"site": "b", "window": "1s", "source": {**SRC, "topic": "t2"}},
                                 "S3": {"site": "c", "window": "1s", "source": {**SRC, "topic": "t3"}}},
                     "join": ["S1.J = S2.J", "S2.J = S3.J"],
                     "execution": {"interval": "100ms", "max_delay": "50ms", "idle_timeout": "1h"}}, "q")
TS = [0, 30, 10, 120, 90, 200, 170, 260, 300, 280, 400, 390, 520, 500, 610, 990]




class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def test_each_closed_epoch_is_one_call_for_all_other_sites() -> None:
    calls: list[tuple[list[str], int, list[int]]] = []
    inputs = LiveInputs(QUERY, "a", 0, {"S1": {0: 0}}, bootstrap="unused:9092", out=_Null(),  # type: ignore[arg-type]
                        run_id=None, sensor=_Null(), log=lambda s: None,
                        on_naive=lambda dsts, e, tups: calls.append((list(dsts), e, [t.ts for t in tups])), now=0.0)
    for off, ts in enumerate(TS):
        inputs.handle(Record(off, ts), 0.0)
        inputs.drain(_Null())
    assert calls, "no epoch closed"
    assert all(dsts == ["b", "c"] for dsts, _, _ in calls)
    assert [e for _, e, _ in calls] == sorted({e for _, e, _ in calls})   # each epoch once, in order
    assert all(ts // 100 == e for _, e, tss in calls for ts in tss)


def test_the_size_is_counted_for_each_site() -> None:
    counters = SimpleNamespace(naive=defaultdict(int))
    seen: list[tuple[str, str, int]] = []
    sensor = SimpleNamespace(on_naive=lambda src, dst, n: seen.append((src, dst, n)))
    run = SimpleNamespace(site="a", counters=counters, svc=SimpleNamespace(sensor=sensor))
    tups = [Tup(0, i, 300 + i, i, (i % 3,), b"payload") for i in range(5)]
    RunInputs.naive(SimpleNamespace(run=run), ["b", "c"], 3, tups)  # type: ignore[arg-type]
    n = wire.naive_batch_size(3, tups)
    assert dict(counters.naive) == {("a", "b"): n, ("a", "c"): n}
    assert seen == [("a", "b", n), ("a", "c", n)]
    assert all(t.wire is None for t in tups), "sized, not encoded"
