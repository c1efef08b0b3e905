"""MJoin trees as operator queries over derived streams (joinlib/mjoin/derived.py, joinlib/sim/tree_engine.py):
the lowering, its mistakes, the window condition, the tuples, and ``joinlib run --plan mjoin``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from joinlib.cli.main import main
from joinlib.errors import PlanError
from joinlib.mjoin.derived import alive, base_row, components, deploy, derived_tuple, leaf_tuple, lower_tree, windows_of
from joinlib.model import Network, Predicate, Query, Stream, Tup, Window
from joinlib.pmjoin.tree import Leaf, MJoin, from_json, operators
from joinlib.query import load_query

ROOT = Path(__file__).resolve().parents[2]
WAN = str(ROOT / "examples" / "routers_wan.yaml")
STAR = str(ROOT / "examples" / "star4.yaml")


def chain(windows=(30, 10, 20)) -> Query:
    streams = tuple(Stream(f"S{i}", i, f"n{i}", Window("time", w), ("k",) if i != 1 else ("k", "x"))
                    for i, w in enumerate(windows))
    return Query("c", streams, (Predicate("S0", "k", "S1", "k"), Predicate("S1", "x", "S2", "k")))


NESTED = MJoin((MJoin((Leaf("S0", "n0"), Leaf("S1", "n1")), "n1"), Leaf("S2", "n2")), "n2")


def test_a_nested_tree_lowers_into_operator_queries_over_a_derived_stream():
    prog = lower_tree(chain(), NESTED)
    child, root = prog.ops
    assert [op.node for op in prog.ops] == ["n1", "n2"] and prog.root is root
    assert (child.parent, child.slot) == (1, "S0+S1") and root.parent is None
    d = root.query.stream("S0+S1")
    assert d.site == "n1" and d.window == Window("time", 10)      # the smallest component window
    assert d.join_attrs == ("S0.k", "S1.k", "S1.x")
    assert root.query.predicates == (Predicate("S0+S1", "S1.x", "S2", "k"),)
    assert child.query.predicates == (Predicate("S0", "k", "S1", "k"),)
    assert root.parts == (("S0", "S1"), ("S2",)) and root.is_derived("S0+S1") and not root.is_derived("S2")
    assert "n0" in child.query.nodes and "n2" in child.query.nodes   # any node of the query may host an MJoin


@pytest.mark.parametrize("tree, message", [
    (MJoin((Leaf("S0", "n0"), Leaf("S1", "n1")), "n1"), "missing: S2"),
    (MJoin((Leaf("S0", "n0"), Leaf("S1", "n1"), Leaf("S2", "n2"), Leaf("S2", "n2")), "n1"), "twice: S2"),
    (MJoin((Leaf("S0", "n0"), Leaf("S1", "n1"), Leaf("S9", "n2")), "n1"), "not in c: S9"),
    (MJoin((Leaf("S0", "n1"), Leaf("S1", "n1"), Leaf("S2", "n2")), "n1"), "S0 is born at n0"),
    (MJoin((Leaf("S0", "n0"), Leaf("S1", "n1"), Leaf("S2", "n2")), "mars"), "no node 'mars'"),
    (MJoin((MJoin((Leaf("S0", "n0"), Leaf("S2", "n2")), "n0"), Leaf("S1", "n1")), "n1"), "cross product"),
])
def test_trees_that_do_not_fit_the_query_are_plan_errors(tree, message):
    with pytest.raises(PlanError, match=message):
        lower_tree(chain(), tree)


def test_tuple_windows_are_refused():
    q = chain()
    q = Query(q.name, (q.streams[0], Stream("S1", 1, "n1", Window("tuples", 5), ("k", "x")), q.streams[2]),
              q.predicates)
    with pytest.raises(PlanError, match="MJoin trees need time windows; S1"):
        lower_tree(q, NESTED)


@pytest.mark.parametrize("times, ok", [
    ((0, 0, 0), True),
    ((0, 25, 30), True),      # S0 30 ms before the latest: its window is 30
    ((0, 25, 31), False),     # 31 ms: dead
    ((25, 10, 30), False),    # S1 20 ms before the latest: its window is 10
    ((40, 35, 30), True),
])
def test_a_combination_lives_while_every_component_is_in_its_window(times, ok):
    assert alive(windows_of(chain()), [(f"S{i}", Tup(i, i, ts, 0, ())) for i, ts in enumerate(times)]) is ok


def test_a_derived_tuple_carries_its_components_and_flattens_back():
    q = chain()
    child, root = lower_tree(q, NESTED).ops
    s0, s1 = Tup(0, 7, 5, 0, ("a",), b"p"), Tup(1, 9, 8, 2, ("a", "b"), b"")
    comps = components(child, [leaf_tuple(s1, 1), leaf_tuple(s0, 0)])
    assert [(n, t.id, t.ts, t.key, t.rest) for n, t in comps] == [("S0", 7, 5, ("a",), b"p"),
                                                               ("S1", 9, 8, ("a", "b"), b"")]
    d = derived_tuple(comps, 0, 4)
    assert (d.pos, d.id, d.seq, d.ts, d.key) == (0, 4, 4, 8, ("a", "a", "b"))
    got = components(root, [d, leaf_tuple(Tup(2, 3, 9, 0, ("b",)), 1)])
    assert [(n, t.id) for n, t in got] == [("S0", 7), ("S1", 9), ("S2", 3)]
    assert [(t.pos, t.id) for t in base_row(q, got)] == [(0, 7), (1, 9), (2, 3)]


def test_an_operators_pending_results_survive_a_checkpoint():
    """A tree operator's node checkpoints its :class:`OpOutput` (results of head epochs not handed over yet,
    the derived tuples' numbering) as plain data; the resumed one hands over exactly what the old one would."""
    from joinlib.mjoin.output import OpOutput
    from joinlib.runtime import checkpoint
    from joinlib.runtime.sink import CountingSink
    q = chain()
    dep = deploy([lower_tree(q, NESTED)])
    child = dep.ops[0]
    old, new = OpOutput(dep, 0, CountingSink()), OpOutput(dep, 0, CountingSink())
    tau = child.query.execution.interval_ms
    s0, s1 = Tup(0, 7, 5, 0, ("a",), b"p"), Tup(1, 9, 8, 2, ("a", "b"), b"")
    s0b, s1b = Tup(0, 11, 3 * tau + 1, 1, ("c",), b"q"), Tup(1, 12, 3 * tau + 2, 3, ("c", "d"), b"")
    old.emit(1, [((leaf_tuple(s0, 0), None), [leaf_tuple(s1, 1)]), ((leaf_tuple(s0b, 0), None), [leaf_tuple(s1b, 1)])],
             0.0)
    old.handover(0)   # epoch 0 handed over: the numbering moves on, epoch 3 waits
    blob = checkpoint.dumps({"format": checkpoint.FORMAT, "out": old.state()})
    new.load(checkpoint.loads(blob)["out"])
    assert (new.next_epoch, new.seq) == (old.next_epoch, old.seq) == (1, 1)
    got, want = new.handover(3), old.handover(3)
    assert [(e, [(r.name, slot, [(t.id, t.ts, t.key, t.rest) for t in ts]) for r, slot, ts in feeds])
            for e, feeds in got] == \
           [(e, [(r.name, slot, [(t.id, t.ts, t.key, t.rest) for t in ts]) for r, slot, ts in feeds])
            for e, feeds in want]
    assert [len(feeds[0][2]) for _, feeds in got] == [0, 0, 1]


@pytest.fixture(scope="module")
def wan(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wan")
    assert main(["gen", WAN, "--out", str(d), "--duration", "3s", "--seed", "2", "--no-progress"]) == 0
    return d


def test_run_with_a_tree_file_is_exact_and_ships_the_derived_stream(wan, tmp_path, capsys):
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps({"mjoin": "r2", "inputs": [
        {"mjoin": "r1", "inputs": [{"stream": "S1", "node": "r1"}, {"stream": "S2", "node": "r2"}]},
        {"stream": "S3", "node": "r3"}]}))
    out, rep = tmp_path / "out.jsonl", tmp_path / "rep.json"
    assert main(["run", WAN, "--data", str(wan), "--plan", f"mjoin:{tree}", "--out", str(out),
                 "--report", str(rep), "--no-progress", "--check"]) == 0
    text = capsys.readouterr().out
    assert "MJoin@r2(MJoin@r1(S1, S2@r2 -> r1) -> r2, S3@r3 -> r2)" in text
    assert "missing 0, extra or duplicated 0" in text
    report = json.loads(rep.read_text())
    links = {(ln["src"], ln["dst"]) for ln in report["links"]}
    assert links == {("r2", "r1"), ("r1", "r2"), ("r3", "r2")}   # S2 to r1, S1+S2 and S3 to r2
    assert from_json(report["plan"]["mjoin_tree"]) == from_json(json.loads(tree.read_text()))
    assert report["results"] > 0


def test_run_with_streamjoinopt_measures_statistics_from_the_data(wan, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["run", WAN, "--data", str(wan), "--plan", "mjoin", "--out", str(out), "--no-progress", "--check"]) == 0
    assert "missing 0, extra or duplicated 0" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", WAN, "--data", ".", "--plan", "mjoin:/no/such.json"], "cannot read /no/such.json"),
    (["run", WAN, "--data", ".", "--plan", "mjoin", "--switch", "1s:SP-S"], "without --switch"),
    (["run", WAN, "--data", ".", "--plan", "mjoin", "--kill", "r1@1"], "without --kill"),
    (["run", WAN, "--data", ".", "--plan", "mjoin", "--cluster", "127.0.0.1:1", "--kill", "r1:1"],
     "--kill 'r1:1': expected SITE@SECONDS"),
    (["run", WAN, "--data", ".", "--plan", "mjoin", "--cluster", "127.0.0.1:1", "--scale-out"], "without --scale-out"),
    (["run", STAR, "--data", ".", "--plan", "mjoin"], "MJoin trees need time windows"),
])
def test_tree_mistakes_give_one_line_and_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_a_malformed_tree_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text('{"mjoin": "r1"}')
    assert main(["run", WAN, "--data", ".", "--plan", f"mjoin:{bad}"]) == 2
    assert "not an MJoin tree" in capsys.readouterr().err
    bad.write_text("{")
    assert main(["run", WAN, "--data", ".", "--plan", f"mjoin:{bad}"]) == 2
    assert "is not JSON" in capsys.readouterr().err


def test_the_demo_query_loads():
    assert load_query(Path(WAN)).stream("S1").window.is_time


# ---------------------------------------------------------------------------------------------- PMJoin's trees run

@pytest.fixture(scope="module")
def example1(tmp_path_factory) -> Path:
    """Seed 002's Example 1 x 10 (examples/pmjoin_plan.py), 5 s."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pmjoin_plan", ROOT / "examples" / "pmjoin_plan.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    d = tmp_path_factory.mktemp("example1")
    mod.write_demo(d, seconds=5)
    return d


PMJ = str(ROOT / "examples" / "pmjoin_routers.yaml")


def _bytes(rep: Path) -> int:
    return sum(ln["bytes"] for ln in json.loads(rep.read_text())["links"])


def test_pmjoin_trees_are_the_papers_and_run_exactly(example1, tmp_path, capsys):
    """``pmjoin:rate:3:mjoin``: per value group the tree of plan_pmjoin (the digest's Example 1
    placements), exact; ``mjoin`` is the unpartitioned STREAMJOINOPT tree; central > mjoin > pmjoin."""
    got = {}
    for plan in ("central:n1", "mjoin", "pmjoin:rate:3:mjoin"):
        out, rep = tmp_path / "o.jsonl", tmp_path / "r.json"
        assert main(["run", PMJ, "--data", str(example1), "--plan", plan, "--out", str(out), "--report", str(rep),
                     "--no-progress", "--check"]) == 0
        text = capsys.readouterr().out
        assert "missing 0, extra or duplicated 0" in text
        got[plan] = (_bytes(rep), text)
    assert "MJoin tree: MJoin@n1(MJoin@n2(S3@n3 -> n2, S2) -> n1, S1)" in got["mjoin"][1]
    trees = got["pmjoin:rate:3:mjoin"][1]
    for tree in ("MJoin@n3(MJoin@n1(S2@n2 -> n1, S1) -> n3, S3)", "MJoin@n2(MJoin@n1(S3@n3 -> n1, S1) -> n2, S2)",
                 "MJoin@n1(MJoin@n2(S3@n3 -> n2, S2) -> n1, S1)"):
        assert tree in trees
    assert got["central:n1"][0] > got["mjoin"][0] > 10 * got["pmjoin:rate:3:mjoin"][0]


def test_implied_equalities_join_inputs_no_predicate_names_together():
    """S1.dest = S2.dest = S3.dest: an MJoin of S1 and S3 joins them on dest, not as a cross product."""
    q = load_query(Path(PMJ))
    prog = lower_tree(q, MJoin((MJoin((Leaf("S3", "n3"), Leaf("S1", "n1")), "n1"), Leaf("S2", "n2")), "n2"))
    assert prog.ops[0].query.predicates == (Predicate("S3", "dest", "S1", "dest"),)
    # every member of the class the inputs carry is equated to a member of another input
    assert set(prog.ops[1].query.predicates) == {Predicate("S1+S3", "S3.dest", "S2", "dest"),
                                                 Predicate("S1+S3", "S1.dest", "S2", "dest")}


# ---------------------------------------------------------------------------------------------- shared operators

def _four() -> Query:
    streams = tuple(Stream(f"S{i}", i, f"n{i}", Window("time", 20), ("k",)) for i in range(4))
    preds = (Predicate("S0", "k", "S1", "k"), Predicate("S1", "k", "S2", "k"), Predicate("S1", "k", "S3", "k"))
    return Query("q", streams, preds)


def _sub(q: Query, names: tuple[str, ...], name: str) -> Query:
    keep = [s for s in q.streams if s.name in names]
    streams = tuple(Stream(s.name, i, s.site, s.window, s.join_attrs) for i, s in enumerate(keep))
    preds = tuple(p for p in q.predicates if p.left in names and p.right in names)
    nodes = tuple(n for n in q.nodes if n not in {s.site for s in keep})
    return Query(name, streams, preds, Network(nodes=nodes), q.execution)


S01 = MJoin((Leaf("S0", "n0"), Leaf("S1", "n1")), "n1")


@pytest.mark.parametrize("second, shared", [
    (MJoin((S01, Leaf("S3", "n3")), "n3"), True),                                   # the same S0 x S1 at n1
    (MJoin((MJoin((Leaf("S0", "n0"), Leaf("S1", "n1")), "n0"), Leaf("S3", "n3")), "n3"), False),   # at n0
    (MJoin((Leaf("S0", "n0"), Leaf("S1", "n1"), Leaf("S3", "n3")), "n3"), False),   # no S0 x S1 of its own
])
def test_an_operator_is_shared_when_it_computes_the_same_stream_at_the_same_node(second, shared):
    q = _four()
    q1, q2 = _sub(q, ("S0", "S1", "S2"), "Q1"), _sub(q, ("S0", "S1", "S3"), "Q2")
    dep = deploy([lower_tree(q1, MJoin((S01, Leaf("S2", "n2")), "n2")), lower_tree(q2, second)])
    both = [i for i in range(len(dep.ops)) if dep.owners(i) == ("Q1", "Q2")]
    assert len(dep.ops) == (3 if shared else 2 + len(list(operators(second))))
    assert bool(both) is shared
    if shared:
        (i,) = both
        assert dep.consumers[i] == ((1, "S0+S1"), (2, "S0+S1")) and dep.ops[i].node == "n1"


def test_what_the_queries_imply_decides_whether_an_operator_is_the_same():
    """Q2 equates S0.k with a second attribute; its S0 x S1 is another stream than Q1's."""
    q1 = _sub(_four(), ("S0", "S1", "S2"), "Q1")
    s0 = Stream("S0", 0, "n0", Window("time", 20), ("k", "x"))
    q2 = Query("Q2", (s0, q1.streams[1], Stream("S3", 2, "n3", Window("time", 20), ("k",))),
               (Predicate("S0", "k", "S1", "k"), Predicate("S1", "k", "S3", "k"), Predicate("S0", "x", "S3", "k")),
               Network(nodes=("n2",)))
    dep = deploy([lower_tree(q1, MJoin((S01, Leaf("S2", "n2")), "n2")),
                  lower_tree(q2, MJoin((S01, Leaf("S3", "n3")), "n3"))])
    assert len(dep.ops) == 4


def test_the_partitions_of_one_query_share_nothing():
    q1 = _sub(_four(), ("S0", "S1", "S2"), "Q1")
    tree = MJoin((S01, Leaf("S2", "n2")), "n2")
    progs = [lower_tree(Query(f"Q1~p{p}", q1.streams, q1.predicates, q1.network), tree) for p in range(2)]
    assert len(deploy(progs).ops) == 2 and len(deploy(progs, share=False).ops) == 4
    with pytest.raises(PlanError, match="two queries named 'Q1'"):
        deploy([lower_tree(q1, tree), lower_tree(q1, tree)])


def test_queries_deployed_together_must_share_one_network():
    q1 = _sub(_four(), ("S0", "S1", "S2"), "Q1")
    q2 = _sub(_four(), ("S0", "S1", "S3"), "Q2")
    q2 = Query(q2.name, q2.streams, q2.predicates, Network(latency_ms=5.0, nodes=q2.network.nodes))
    from joinlib.sim.tree_engine import run_deployment
    dep = deploy([lower_tree(q1, MJoin((S01, Leaf("S2", "n2")), "n2")),
                  lower_tree(q2, MJoin((S01, Leaf("S3", "n3")), "n3"))])
    with pytest.raises(PlanError, match="network .* must agree"):
        run_deployment(dep, {"Q1": {}, "Q2": {}}, {})


@pytest.mark.parametrize("plan, message", [
    ("pmjoin:sometimes:mjoin", "unknown argument 'sometimes'"),
    ("pmjoin:0:mjoin", "unknown argument '0'"),
])
def test_partitioned_tree_mistakes_give_one_line(example1, plan, message, capsys):
    assert main(["run", PMJ, "--data", str(example1), "--plan", plan]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_plan_prints_the_tree_that_run_takes(wan, tmp_path, capsys):
    tree = tmp_path / "tree.json"
    assert main(["plan", WAN, "--planner", "mjoin", "--data", str(wan), "--out", str(tree), "--explain"]) == 0
    assert "MJoin tree: MJoin@" in capsys.readouterr().out
    assert set(json.loads(tree.read_text())) == {"mjoin_tree"}
    out = tmp_path / "out.jsonl"
    assert main(["run", WAN, "--data", str(wan), "--plan", f"mjoin:{tree}", "--out", str(out), "--no-progress",
                 "--check", "--quiet"]) == 0
    assert "missing 0, extra or duplicated 0" in capsys.readouterr().out


def test_an_unwritable_out_file_is_one_line(wan, capsys):
    assert main(["run", WAN, "--data", str(wan), "--plan", "mjoin", "--out", "/no/such/dir/out.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


# ---------------------------------------------------------------------------------------------- plan messages

def _message(q: Query, plan: dict, **extra) -> dict:
    from joinlib.query import query_to_dict
    return {"query": query_to_dict(q), "plan": plan, "run": "r", "offsets": {}, **extra}


def test_tree_plan_messages_check_and_round_trip(example1):
    """The three tree shapes of a plan message (docs/contracts.md) compile on a node as they were sent."""
    from joinlib.control.check import check_control, tree_payload
    from joinlib.data.files import load_streams
    from joinlib.mjoin.tree_plans import PartitionedTrees, SharedTrees, plan_partitioned_trees, union_query
    q = load_query(Path(PMJ))
    one = lower_tree(q, NESTED_PMJ)
    assert check_control(q.name, "plan", _message(q, one.to_json())) is None
    assert tree_payload(q, _message(q, one.to_json())) == one
    split, _ = plan_partitioned_trees(q, load_streams(q, example1), "pmjoin:hash:2:mjoin")
    sent = json.loads(json.dumps(split.to_json()))
    assert check_control(q.name, "plan", _message(q, sent)) is None
    assert PartitionedTrees.from_json(q, sent) == split and [p.base.name for p in split.programs] == [
        "pmjoin_routers.p0", "pmjoin_routers.p1"]
    four = _four()
    q1, q2 = _sub(four, ("S0", "S1", "S2"), "Q1"), _sub(four, ("S0", "S1", "S3"), "Q2")
    base = union_query("both", [q1, q2])
    assert base.names == ("S0", "S1", "S2", "S3") and set(base.predicates) == set(four.predicates)
    shared = SharedTrees(base, (lower_tree(q1, MJoin((S01, Leaf("S2", "n2")), "n2")),
                                lower_tree(q2, MJoin((S01, Leaf("S3", "n3")), "n3"))))
    assert SharedTrees.from_json(base, json.loads(json.dumps(shared.to_json()))) == shared


NESTED_PMJ = MJoin((MJoin((Leaf("S1", "n1"), Leaf("S2", "n2")), "n2"), Leaf("S3", "n3")), "n3")


@pytest.mark.parametrize("change, message", [
    ({"switches": [{"from_epoch": 3, "plan": {}}]}, "no 'switches'"),
    ({"plan": {"mjoin_trees": [], "by": [], "function": {}}}, "partitioned MJoin trees are"),
    ({"plan": {"mjoin_trees_of": [{"query": {}, "mjoin_tree": {}}]}}, "plan does not compile"),
    ({"plan": {"mjoin_tree": {"mjoin": "n9", "inputs": []}}}, "plan does not compile"),
])
def test_malformed_tree_plan_messages_are_refused_with_a_reason(change, message):
    from joinlib.control.check import check_control
    q = load_query(Path(PMJ))
    msg = _message(q, lower_tree(q, NESTED_PMJ).to_json())
    msg.update(change)
    why = check_control(q.name, "plan", msg)
    assert why is not None and message in why


def test_queries_deployed_together_must_mean_one_stream_by_one_name():
    from joinlib.mjoin.tree_plans import SharedTrees, union_query
    four = _four()
    q1 = _sub(four, ("S0", "S1", "S2"), "Q1")
    moved = Query("Q2", tuple(Stream(s.name, s.pos, "elsewhere" if s.name == "S1" else s.site, s.window, s.join_attrs)
                              for s in q1.streams), q1.predicates)
    with pytest.raises(PlanError, match="stream S1 differs"):
        union_query("both", [q1, moved])
    tree = MJoin((S01, Leaf("S2", "n2")), "n2")
    obj = SharedTrees(union_query("both", [q1]), (lower_tree(q1, tree),)).to_json()
    with pytest.raises(PlanError, match="must be the union"):
        SharedTrees.from_json(union_query("both", [four]), obj)
