"""One conformance suite for every RunStore: sorted runs per (relation, partition).

Runs against ``memory`` (:class:`~joinlib.progressive.runs.MemoryRunStore`), ``file``
(:class:`~joinlib.progressive.runs.FileRunStore`) and ``redis`` (a
:class:`~joinlib.progressive.runs.PagedRunStore` over
:class:`~joinlib.adapters.progressive_redis.RedisPages` on the real Redis of the ``redis_url``
fixture - no Redis is a failure, never a skip).  Table-driven cases, then a
hypothesis state machine comparing each store with a dict of runs after every step,
re-opening persistent stores on the same location along the way.
"""
from __future__ import annotations

import shutil
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from joinlib.progressive.model import DiskTuple
from joinlib.progressive.runs import FileRunStore, MemoryRunStore, PagedRunStore, RunOrderError

KINDS = ["memory", "file", "redis"]
PAGE = 4  # small pages: runs span several of them


class Maker:
    """Fresh stores of one kind; ``reopen`` is a new handle on the same stored runs."""

    persistent = True

    def __init__(self, kind: str, redis_url: str | None = None) -> None:
        self.kind = kind
        self.dirs: list[str] = []
        self.prefixes: list[str] = []
        if kind == "redis":
            import redis
            assert redis_url is not None, "a redis Maker needs the server's URL"
            self.client = redis.Redis.from_url(redis_url)
        self.persistent = kind != "memory"

    def new(self):
        if self.kind == "memory":
            return MemoryRunStore()
        if self.kind == "file":
            self.dirs.append(tempfile.mkdtemp(prefix="jl-runs-"))
            return FileRunStore(self.dirs[-1], page_tuples=PAGE)
        from joinlib.adapters.progressive_redis import RedisPages
        self.prefixes.append(f"conf-runs-{uuid.uuid4().hex[:10]}")
        return PagedRunStore(RedisPages(self.client, self.prefixes[-1]), page_tuples=PAGE)

    def reopen(self, store):
        if self.kind == "file":
            return FileRunStore(store.root, page_tuples=PAGE)
        if self.kind == "redis":
            from joinlib.adapters.progressive_redis import RedisPages
            return PagedRunStore(RedisPages(self.client, store.backend.prefix), page_tuples=PAGE)
        return store

    def leftovers(self, store) -> list:
        if self.kind == "file":
            return [p for p in store.root.rglob("*") if p.is_file()]
        if self.kind == "redis":
            return list(self.client.scan_iter(match=f"{store.backend.prefix}:*"))
        return [r for rel in (0, 1) for part in range(4) for r in store.run_ids(rel, part)]

    def close(self) -> None:
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        if self.kind == "redis":
            for p in self.prefixes:
                for k in self.client.scan_iter(match=f"{p}:*"):
                    self.client.delete(k)
            self.client.close()


@pytest.fixture(params=KINDS)
def maker(request):
    m = Maker(request.param, request.getfixturevalue("redis_url") if request.param == "redis" else None)
    yield m
    m.close()


def run_of(keys, base: int = 0, str_ids: bool = False) -> list[DiskTuple]:
    """Sorted tuples with the given keys; ats distinct, ids int or str."""
    return [DiskTuple(k, base + i, f"id{base + i}" if str_ids else base + i, base + 1000 + i)
            for i, k in enumerate(sorted(keys))]


# --------------------------------------------------------------------------- table-driven

def test_empty_store(maker):
    s = maker.new()
    assert s.run_ids(0, 0) == [] and s.run_ids(1, 3) == []
    with pytest.raises(KeyError):
        s.load_run(0, 0, 1)
    with pytest.raises(KeyError):
        s.delete_run(0, 0, 1)


@pytest.mark.parametrize("keys,str_ids", [
    ([5], False),
    ([1, 1, 2, 3, 3, 3, 9, 10, 11, 12], False),  # several pages, equal keys
    (list(range(17)), True),                       # partial last page, string ids
    (["a", "b", "b", "zz"], False),                # string keys
    ([-(1 << 62), 0, 1 << 62], True),              # 64-bit keys
])
def test_roundtrip(maker, keys, str_ids):
    s = maker.new()
    tuples = run_of(keys, str_ids=str_ids)
    run = s.write_run(1, 2, tuples)
    assert list(s.read_run(1, 2, run)) == tuples
    assert list(s.load_run(1, 2, run)) == tuples
    loaded = s.load_run(1, 2, run)
    assert all(type(a.key) is type(b.key) and type(a.id) is type(b.id) for a, b in zip(loaded, tuples, strict=True))
    assert s.run_size(1, 2, run) == len(tuples) and s.run_ids(1, 2) == [run]


def test_ids_increase_and_partitions_are_separate(maker):
    s = maker.new()
    a = s.write_run(0, 0, run_of([1, 2]))
    b = s.write_run(1, 0, run_of([3], 10))
    c = s.write_run(0, 0, run_of([0], 20))
    d = s.write_run(0, 1, run_of([7], 30))
    assert a < b < c < d
    assert s.run_ids(0, 0) == [a, c] and s.run_ids(1, 0) == [b] and s.run_ids(0, 1) == [d]
    with pytest.raises(KeyError):
        s.load_run(1, 0, a)  # a run belongs to its relation and partition


def test_streamed_writer_and_abort(maker):
    s = maker.new()
    w = s.writer(0, 1)
    tuples = run_of(range(11))
    w.add(tuples[:3])
    w.add(iter(tuples[3:]))
    run = w.commit()
    assert list(s.read_run(0, 1, run)) == tuples
    w = s.writer(0, 1)
    w.add(run_of([1, 2], 50))
    w.abort()  # nothing of it is visible
    assert s.run_ids(0, 1) == [run]


@pytest.mark.parametrize("bad", [
    [DiskTuple(2, 0, 0, 9), DiskTuple(1, 1, 1, 9)],   # keys decrease
    [DiskTuple(1, 5, 0, 9), DiskTuple(1, 5, 1, 9)],   # same (key, ats)
    [DiskTuple(1, 0, 0, 9), DiskTuple("a", 1, 1, 9)],  # int and str keys
])
def test_unsorted_runs_are_rejected_whole(maker, bad):
    s = maker.new()
    with pytest.raises(RunOrderError):
        s.write_run(0, 0, bad)
    w = s.writer(0, 0)
    w.add(bad[:1])
    with pytest.raises(RunOrderError):
        w.add(bad[1:])  # across two chunks too
    w.abort()
    assert s.run_ids(0, 0) == []


def test_delete_and_clear(maker):
    s = maker.new()
    runs = [s.write_run(r, p, run_of(range(6), 10 * i)) for i, (r, p) in enumerate([(0, 0), (0, 0), (1, 3)])]
    s.delete_run(0, 0, runs[0])
    assert s.run_ids(0, 0) == [runs[1]]
    with pytest.raises(KeyError):
        s.read_run(0, 0, runs[0])
    s.clear()
    assert s.run_ids(0, 0) == [] and s.run_ids(1, 3) == []
    assert maker.leftovers(s) == []


@pytest.fixture(params=["file", "redis"])
def persistent_maker(request):
    m = Maker(request.param, request.getfixturevalue("redis_url") if request.param == "redis" else None)
    yield m
    m.close()


def test_reopen_sees_the_runs(persistent_maker):
    """Stores that persist (memory runs live as long as the store object)."""
    maker = persistent_maker
    s = maker.new()
    tuples = run_of([3, 1, 2])
    run = s.write_run(1, 1, tuples)
    again = maker.reopen(s)
    assert again.run_ids(1, 1) == [run] and list(again.read_run(1, 1, run)) == tuples
    assert again.write_run(1, 1, run_of([9], 40)) > run  # new ids after the existing ones


# --------------------------------------------------------------------------- state machine

class RunStoreMachine(RuleBasedStateMachine):
    """Random writes, deletes and reads against a dict {(rel, part): {run: tuples}}."""

    maker: Maker

    def __init__(self) -> None:
        super().__init__()
        self.store = self.maker.new()
        self.model: dict[tuple[int, int], dict[int, list[DiskTuple]]] = {}
        self.ats = 0

    @rule(rel=st.integers(0, 1), part=st.integers(0, 2),
          keys=st.lists(st.integers(-3, 3), max_size=13), chunks=st.integers(1, 3))
    def write(self, rel, part, keys, chunks):
        tuples = run_of(keys, self.ats)
        self.ats += len(tuples) + 1
        w = self.store.writer(rel, part)
        step = max(1, len(tuples) // chunks)
        for i in range(0, len(tuples), step):
            w.add(tuples[i:i + step])
        run = w.commit()
        assert all(run > r for runs in self.model.values() for r in runs)
        self.model.setdefault((rel, part), {})[run] = tuples

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def delete(self, data):
        (rel, part), run = data.draw(st.sampled_from(sorted((k, r) for k, runs in self.model.items() for r in runs)))
        self.store.delete_run(rel, part, run)
        del self.model[(rel, part)][run]

    @precondition(lambda self: self.maker.persistent)
    @rule()
    def reopen(self):
        self.store = self.maker.reopen(self.store)

    @invariant()
    def same_runs(self):
        for rel in (0, 1):
            for part in range(3):
                runs = self.model.get((rel, part), {})
                assert self.store.run_ids(rel, part) == sorted(runs)
                for run, tuples in runs.items():
                    assert list(self.store.read_run(rel, part, run)) == tuples
                    assert self.store.run_size(rel, part, run) == len(tuples)


def test_state_machine(maker):
    machine = type("Machine", (RunStoreMachine,), {"maker": maker})
    run_state_machine_as_test(machine, settings=settings(max_examples=25, stateful_step_count=15, deadline=None,
                                                         suppress_health_check=[HealthCheck.too_slow]))
