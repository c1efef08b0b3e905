"""The scheduler's loop in C (joinlib/runtime/_lanesc.c) against its Python form (joinlib/runtime/lanes.py).

Random lanes whose phases wait on shared counters that other phases move (as a probe waits for its replica's
apply), some of them declaring that wait as a gate (``Phase.gates``: read as a dict item or as an attribute, from a
start epoch on), with end epochs, truthy non-bool answers and phases that raise: both forms must call the same phases
in the same order, leave every lane's epoch and cursor the same, report the same operators, answer the same and
raise the same.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import joinlib.runtime.lanes as lanes_mod
from joinlib.runtime.lanes import Lane, Phase, run_lanes
from joinlib.runtime.sensor import Sensor, TotalsSensor
from tests.kernels import kernels


class _Boom(Exception):
    pass


class _BadBool:
    def __bool__(self) -> bool:
        raise _Boom("truth")


class _View:
    """The counters as attributes (``c0``, ``c1``, ...): a gate read through getattr."""

    def __init__(self, counters: dict[int, int]) -> None:
        self._counters = counters

    def __getattr__(self, name: str) -> int:
        return self._counters[int(name[1:])]


class _Log(Sensor):
    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        assert seconds >= 0.0
        self.ops.append((site, operator))


_BUDGET = 300   # calls after which every phase waits: a lane that could always run would never stop


def _world(spec: dict[str, Any]) -> tuple[list[Lane], list[Any], dict[str, int]]:
    """Lanes built from ``spec``: phase (l, k) runs at epoch e when counter ``needs`` is above e (or always), then
    moves counter ``moves``; it answers ``answer`` (a truthy value) or raises on its ``boom``-th call."""
    calls: list[Any] = []
    counters = {c: v for c, v in enumerate(spec["counters"])}
    state = {"n": 0}
    lanes, view = [], _View(counters)
    for li, (phases, lo, hi) in enumerate(spec["lanes"]):
        ps = []
        for k, (needs, moves, answer, boom, gate) in enumerate(phases):
            def fn(e: int, li: int = li, k: int = k, needs: Optional[int] = needs, moves: int = moves,
                   answer: Any = answer, boom: Optional[int] = boom) -> Any:
                state["n"] += 1
                calls.append((li, k, e))
                if boom is not None and state["n"] == boom:
                    raise _Boom(f"phase {li}.{k}")
                if state["n"] > _BUDGET or (needs is not None and counters[needs] <= e):
                    return [] if answer == "list" else False
                counters[moves] = counters[moves] + 1
                return _BadBool() if answer == "bad" else answer
            gates: tuple[Any, ...] = ()
            if gate is not None and needs is not None:   # the phase's own wait, as a gate from gate[1] on
                gates = ((counters, needs, 1, 1, gate[1]) if gate[0] == "d" else (view, f"c{needs}", 1, 1, gate[1]),)
            ps.append(Phase((k,), f"op{li}.{k}", fn, gates=gates))
        lanes.append(Lane(f"lane{li}", ps, lo, hi))
    return lanes, calls, counters  # type: ignore[return-value]


_phase = st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 3),
                   st.sampled_from([True, 1, "yes", [0], "list", "bad"]), st.one_of(st.none(), st.integers(1, 200)),
                   st.one_of(st.none(), st.tuples(st.sampled_from("da"), st.integers(-1, 3))))
_spec = st.fixed_dictionaries({
    "counters": st.lists(st.integers(0, 4), min_size=4, max_size=4),
    "lanes": st.lists(st.tuples(st.lists(_phase, min_size=1, max_size=4), st.integers(-1, 2),
                                st.one_of(st.none(), st.integers(-2, 8))), max_size=6),
    "rounds": st.integers(1, 4),
})


def _drive(spec: dict[str, Any], c: bool) -> Any:
    lanes, calls, counters = _world(spec)
    sensor = _Log()
    answers: list[Any] = []
    with kernels(lanes_mod, c):
        try:
            for _ in range(spec["rounds"]):
                answers.append(run_lanes(lanes, "s1", sensor))
                if lanes:   # the single-lane entry too
                    answers.append(lanes[0].run("s1", sensor))
        except _Boom as exc:
            answers.append(("raised", str(exc)))
    return (answers, calls, sensor.ops, counters, [(ln.epoch, ln.cursor, ln.done) for ln in lanes])


def test_the_kernel_is_built() -> None:
    assert lanes_mod._c is not None, "joinlib.runtime._lanesc is not built (python setup.py build_ext --inplace)"


@settings(max_examples=400, deadline=None)
@given(_spec)
def test_c_and_python_lanes_agree(spec: dict[str, Any]) -> None:
    assert _drive(spec, True) == _drive(spec, False)


def test_a_phase_that_is_not_a_list_of_phases_is_refused() -> None:
    lane = Lane("x", [], 0, None)
    lane.phases = ("not", "a list")  # type: ignore[assignment]
    with kernels(lanes_mod, True), pytest.raises(TypeError, match="phases are a list"):
        lane.run("s1", Sensor())


@pytest.mark.parametrize("c", [True, False], ids=["c-kernels", "fallback"])
def test_lanes_that_run_to_their_end(c: bool) -> None:
    """Two lanes handing work to each other run to their end epochs in one call, in both forms."""
    box = {"a": 0}

    def put(e: int) -> bool:
        box["a"] = e + 1
        return True

    def get(e: int) -> bool:
        return box["a"] > e
    a, b = Lane("a", [Phase((0,), "put", put)], 0, 5), Lane("b", [Phase((0,), "get", get)], 0, 5)
    with kernels(lanes_mod, c):
        assert run_lanes([b, a], "s", Sensor()) is True
        assert (a.epoch, b.epoch, a.done, b.done) == (6, 6, True, True)
        assert run_lanes([b, a], "s", Sensor()) is False


class _WatchedLane(Lane):
    """A lane whose cursor is a property counting its writes: the kernel reads slots in place only where getattr
    would read the same slot, so a property (a subclass's) must still be called."""

    __slots__ = ("_cur", "writes")

    def __init__(self, *a: Any) -> None:
        self.writes = 0
        super().__init__(*a)

    @property
    def cursor(self) -> int:
        return self._cur

    @cursor.setter
    def cursor(self, v: int) -> None:
        self.writes += 1
        self._cur = v


class _DictLane:
    """A lane without slots: the same attributes in an instance dictionary."""

    run = Lane.run

    def __init__(self, lane: Lane) -> None:
        self.name, self.phases, self.epoch, self.cursor, self.hi, self._n = (
            lane.name, lane.phases, lane.epoch, lane.cursor, lane.hi, lane._n)


def _three_kinds(c: bool) -> list[Any]:
    runs: list[int] = []

    def step(e: int) -> bool:
        runs.append(e)
        return len(runs) < 7

    phases = [Phase((0,), "a", step), Phase((1,), "b", step)]
    watched = _WatchedLane("w", phases, 0, None)
    out: list[Any] = []
    with kernels(lanes_mod, c):
        for lane in (watched, Lane("p", phases, 0, None), _DictLane(Lane("d", phases, 0, None))):
            runs.clear()
            out.append((run_lanes([lane], "s", Sensor()), lane.epoch, lane.cursor, list(runs)))  # type: ignore[list-item]
    return out + [watched.writes]


def test_lanes_of_other_classes_run_alike() -> None:
    """A Lane subclass whose cursor is a property, a Lane, and a plain object with a Lane's attributes run alike
    in both forms; the property is called for every write (the kernel reads a slot in place only where getattr
    would read that same slot)."""
    c, py = _three_kinds(True), _three_kinds(False)
    assert c == py
    assert c[0] == (True, 3, 0, [0, 0, 1, 1, 2, 2, 3]) and c[-1] == 1 + 6 + 3   # __init__, 6 phases that ran, 3 wraps


class _Counted(TotalsSensor):
    """A TotalsSensor subclass: the C loop calls its on_phase (only the exact type is added to in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        self.calls += 1
        super().on_phase(site, operator, seconds)


@pytest.mark.parametrize("clock", ["perf_counter", "thread_time", "other"])
@pytest.mark.parametrize("sensor_type", [TotalsSensor, _Counted])
def test_totals_are_the_same_in_both_forms(clock: str, sensor_type: type) -> None:
    """A TotalsSensor's totals (added to in place by the C loop) have the same operators as the Python form's, each
    time a sum of non-negative phase times, under the clocks the C loop reads itself and any other."""
    perf = {"perf_counter": time.perf_counter, "thread_time": time.thread_time,
            "other": lambda: time.perf_counter() * 2.0}[clock]
    out = []
    for c in (True, False):
        box = {"a": 0}

        def put(e: int, box: dict[str, int] = box) -> bool:
            box["a"] = e + 1
            return True

        def get(e: int, box: dict[str, int] = box) -> bool:
            return box["a"] > e
        lanes = [Lane("b", [Phase((0,), "get", get), Phase((1,), "get2", get)], 0, 40),
                 Lane("a", [Phase((0,), "put", put)], 0, 40)]
        sensor = sensor_type()
        saved = lanes_mod._perf
        lanes_mod._perf = perf
        try:
            with kernels(lanes_mod, c):
                assert run_lanes(lanes, "s", sensor) is True
        finally:
            lanes_mod._perf = saved
        assert all(v >= 0.0 for v in sensor.processing.values())
        if sensor_type is _Counted:
            assert sensor.calls == 41 * 3
        out.append(sorted(sensor.processing))
    assert out[0] == out[1] == [("s", "get"), ("s", "get2"), ("s", "put")]


@pytest.mark.parametrize("c", [True, False], ids=["c-kernels", "fallback"])
def test_a_phase_is_not_called_before_the_message_it_waits_for(c: bool) -> None:
    """Phase.wait: below its start the phase is called as any other; from its start on, only once the host's inbox
    (read at every poll: a restore replaces it) holds its message."""
    class _Host:
        inbox: dict[tuple[Any, ...], int] = {}

    host, calls = _Host(), []

    def take(e: int) -> bool:
        calls.append(e)
        return e < 2 or ("q", 7, e) in host.inbox

    lane = Lane("w", [Phase((0,), "take", take, (host, ("q", 7), 2))], 0, 5)
    with kernels(lanes_mod, c):
        assert run_lanes([lane], "s", Sensor()) is True
        assert (calls, lane.epoch) == ([0, 1], 2)       # epoch 2: no message, no call
        assert run_lanes([lane], "s", Sensor()) is False and calls == [0, 1]
        host.inbox = {("q", 7, 2): 1, ("q", 7, 3): 1}
        assert run_lanes([lane], "s", Sensor()) is True
        assert (calls, lane.epoch) == ([0, 1, 2, 3], 4)
        with pytest.raises(TypeError):   # a wait that is no (host, prefix, start)
            bad: Any = ("not", "a", "wait")
            Lane("x", [Phase((0,), "t", take, bad)], 2, 5).run("s", Sensor())
