"""Seed 003's node operator sets: Examples 2 and 3 as tables (with the digest's typo fixes), read
off the runtime's IR, and the paper's own construction (the digest's exec_node / build_nos) as an
oracle for random plans."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.adaptive.jep import JEP, SEP, Op, from_plan, node_nos, nos_changes, paper_nos
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.errors import PlanError
from joinlib.model import Network
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower


def query(m: int = 3):
    stats = [SyntheticStats(rate=100, tuple_bytes=150, selectivity=0.01, window_ms=500) for _ in range(m)]
    return build_query(f"q{m}", stats, topology_edges(m, "complete"), network=Network(5, 1024))


def ops(text: str) -> frozenset[Op]:
    """``join(S^1_2,S3), update(S3), ship(S1,N2)`` -> Ops; S^i_k is rendered S<i>^S<k>."""
    out = set()
    for kind, args in re.findall(r"(join|update|ship)\(([^)]*)\)", text):
        names = [re.sub(r"S\^(\d+)_(\d+)", r"S\1^S\2", a.strip()) for a in args.split(",")]
        out.add(Op(kind, names[0], names[1] if len(names) > 1 else ""))
    return frozenset(out)


EXAMPLE1 = JEP((SEP("S1", ("S2", "S3"), (1, 1)), SEP("S2", ("S1", "S3"), (0, 1)), SEP("S3", ("S1", "S2"), (0, 0))))

# Example 2 with the digest's corrections (the paper's NOS_2 line starts "NOS^2_1 U NOS^2_2"; its
# ship(S^2_1, N3) of SEP_2 and ship(S^3_2, N0) of SEP_3 are as the construction gives them)
EXAMPLE2 = {
    "N1": "ship(S1,N2), ship(S1,N3)",
    "N2": "join(S1,S2), update(S2), ship(S^1_2,N3), update(S1), join(S2,S1), ship(S^2_1,N3), ship(S2,N3)",
    "N3": "join(S^1_2,S3), update(S3), ship(S^1_3,N0), join(S^2_1,S3), ship(S^2_3,N0), join(S3,S1), "
          "join(S^3_1,S2), update(S1), update(S2), ship(S^3_2,N0)",
}

# Example 3: SEP_1 before and after the modification to ([S3, S2], [0, 1]), per node
EXAMPLE3 = [
    ("N1", "ship(S1,N2)", "join(S1,S3), update(S3), ship(S^1_3,N2)"),
    ("N2", "join(S1,S2), update(S2), ship(S^1_2,N3)", "join(S^1_3,S2), update(S2), ship(S^1_2,N0)"),
    ("N3", "join(S^1_2,S3), update(S3), ship(S^1_3,N0)", "ship(S3,N1)"),
]


@pytest.mark.parametrize("node,expected", sorted(EXAMPLE2.items()))
def test_example_2(node, expected):
    q = query()
    ir = lower(q, EXAMPLE1.to_plan(q))
    assert node_nos(paper_nos(ir)[node]) == ops(expected)


@pytest.mark.parametrize("node,before,after", EXAMPLE3)
def test_example_3(node, before, after):
    q = query()
    new = EXAMPLE1.replace(SEP("S1", ("S3", "S2"), (0, 1)))
    old_ir, new_ir = lower(q, EXAMPLE1.to_plan(q)), lower(q, new.to_plan(q))
    # the paper renames the last stream of the new SEP_1 S^1_2 (the join to S_2 comes last): the
    # IR names it by content, S1(S2,S3), so the rendering labels it by the stream joined last too
    assert paper_nos(old_ir)[node].get("S1", frozenset()) == ops(before)
    assert paper_nos(new_ir)[node].get("S1", frozenset()) == ops(after)


def test_example_3_changes_every_node_and_moves_windows():
    """The IR diff says every node is affected; S3's window is newly needed at N1 (copied there,
    the paper's "move W_3 to N1"), and S1's window at N2 and N3 stays (made accessible)."""
    q = query()
    new = EXAMPLE1.replace(SEP("S1", ("S3", "S2"), (0, 1)))
    ch = nos_changes(lower(q, EXAMPLE1.to_plan(q)), lower(q, new.to_plan(q)))
    assert all(c.affected for c in ch.values())
    assert ch["N1"].windows == ("S3",)
    assert ch["N2"].windows == () and "S1" in ch["N2"].accessible
    assert ch["N3"].windows == () and set(ch["N3"].accessible) == {"S1", "S2"}


def test_jep_round_trips_through_a_plan():
    q = query()
    assert from_plan(EXAMPLE1.to_plan(q)) == EXAMPLE1
    assert EXAMPLE1.to_plan(q).sequence("S2").steps[0].algorithm == "SP-S"
    assert JEP.from_json(EXAMPLE1.to_json()) == EXAMPLE1


@pytest.mark.parametrize("plan,message", [
    (lambda q: plans.uniform(q, "SM-S1"), "uses SM-S1"),
    (lambda q: plans.central(q, "N2"), "starts at N2"),
    (lambda q: plans.reduction(q, "N1"), "reduction"),
])
def test_only_source_and_destination_plans_are_jeps(plan, message):
    q = query()
    with pytest.raises(PlanError, match=message):
        from_plan(plan(q))


# ----------------------------------------------------------------------------- the paper's construction

def exec_node(sep: SEP, k: int, site: dict[str, str]) -> str:
    """The digest's exec_node(i, k): where the k-th join of SEP_i runs (k = 0: the head's node)."""
    if k == 0:
        return site[sep.head]
    if sep.placement[k - 1] == 1:
        return site[sep.order[k - 1]]
    return exec_node(sep, k - 1, site)


def build_nos(jep: JEP, site: dict[str, str]) -> dict[str, frozenset[Op]]:
    """The digest's build_nos: the paper's construction, written independently of the IR."""
    out: dict[str, set[Op]] = {n: set() for n in site.values()}
    for sep in jep.seps:
        m1 = len(sep.order)
        for k in range(1, m1 + 1):
            x = exec_node(sep, k, site)
            inp = sep.head if k == 1 else f"{sep.head}^{sep.order[k - 2]}"
            s = sep.order[k - 1]
            out[x] |= {Op("join", inp, s), Op("update", s)}
            if sep.placement[k - 1] == 0:
                out[site[s]].add(Op("ship", s, x))
            else:
                out[exec_node(sep, k - 1, site)].add(Op("ship", inp, site[s]))
        out[exec_node(sep, m1, site)].add(Op("ship", f"{sep.head}^{sep.order[-1]}", "N0"))
    return {n: frozenset(o) for n, o in out.items()}


@st.composite
def jeps(draw, m):
    names = [f"S{i + 1}" for i in range(m)]
    seps = []
    for h in names:
        order = draw(st.permutations([n for n in names if n != h]))
        seps.append(SEP(h, tuple(order), tuple(draw(st.lists(st.integers(0, 1), min_size=m - 1, max_size=m - 1)))))
    return JEP(tuple(seps))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_nos_read_off_the_ir_is_the_papers_construction(data):
    """For any JEP of a fully connected join (one stream per node): the IR's operators, rendered,
    are exactly the paper's NOS_k; and the IR diff's affected nodes are those whose paper NOS
    changes."""
    m = data.draw(st.integers(2, 5))
    q = query(m)
    site = {s.name: s.site for s in q.streams}
    a, b = data.draw(jeps(m)), data.draw(jeps(m))
    ir_a, ir_b = lower(q, a.to_plan(q)), lower(q, b.to_plan(q))
    want_a, want_b = build_nos(a, site), build_nos(b, site)
    got_a = paper_nos(ir_a)
    for n in want_a:
        assert node_nos(got_a.get(n, {})) == want_a[n]
    changed = {n for n in want_a if want_a[n] != want_b[n]}
    assert {n for n, c in nos_changes(ir_a, ir_b).items() if c.affected} == changed
