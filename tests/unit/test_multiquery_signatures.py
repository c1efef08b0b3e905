"""Which deployed stream a new query may reuse: a table of (deployed query, new query, streams, reusable?).

Reuse iff equal signatures -- sorted base streams, normalised join predicates and selections inside
them -- and the advertised columns carry every column the new query needs from the stream."""
from __future__ import annotations

import pytest

from joinlib.multiquery.cost import Deployments, OperatorPlan, PlanNode
from joinlib.multiquery.errors import WorkloadError
from joinlib.multiquery.streams import (
    BaseStream,
    Bound,
    Catalogue,
    ContinualQuery,
    JoinPredicate,
    Selection,
    normalise_join,
    normalise_selection,
)
from joinlib.multiquery.topology import PhysicalLink, PhysicalNetwork

TOP = PhysicalNetwork(("a", "b", "c", "d"),
                      (PhysicalLink("a", "b", 1), PhysicalLink("b", "c", 2), PhysicalLink("c", "d", 3)))
CAT = Catalogue({s: BaseStream(s, n, 10.0, ("p", "q")) for s, n in (("F", "a"), ("W", "b"), ("C", "c"))})
FC = "F.num = C.flnum"
FW = "F.dest = W.city"


def q(name, streams="FWC", joins=(FC, FW), sels=(), cols=("F.p", "W.p", "C.p"), sink="d"):
    return ContinualQuery(name, tuple(streams), tuple(JoinPredicate(j, 0.1) for j in joins),
                 tuple(Selection(s, 0.5) for s in sels), tuple(cols), sink)


def old(streams="FC", joins=(FC,), sels=(), cols=("F.p", "C.p", "F.dest")):
    """An earlier query over F and C that also outputs F.dest (what q1 needs to join W)."""
    return q("q2", streams, joins, sels, cols)


def deployed_fc(query):
    """D after deploying ``query``'s F ⋈ C at node b."""
    b = Bound(query, CAT, TOP.index)
    fc = frozenset("FC")
    join = PlanNode("join", fc, b.rate(fc), 1, PlanNode("source", frozenset("F"), 10.0, 0),
                    PlanNode("source", frozenset("C"), 10.0, 2))
    d = Deployments()
    d.deploy(OperatorPlan(query.name, join, TOP.index[query.sink]), b)
    return d


CASES = [
    # (why, deployed query, new query, reusable)
    ("same join, same columns", old(), q("q1"), True),
    ("predicate written the other way round", old(joins=("C.flnum == F.num",)), q("q1"), True),
    ("streams listed in another order", old("CF"), q("q1", "CWF"), True),
    ("same selection, other spelling", old(sels=("F.dep = 'ATL'",)), q("q1", sels=("'ATL' == F.dep",)), True),
    ("numbers in another spelling", old(sels=("5 < F.t",)), q("q1", sels=("F.t > 5.0",)), True),
    ("a selection on W (outside F ⋈ C) does not matter", old(), q("q1", sels=("W.t > 3",)), True),
    ("the new query filters F", old(), q("q1", sels=("F.t > 5",)), False),
    ("the old query filtered F", old(sels=("F.t > 5",)), q("q1"), False),
    ("another selection constant", old(sels=("F.t > 5",)), q("q1", sels=("F.t > 6",)), False),
    ("another join attribute", old(joins=("F.id = C.flnum",)), q("q1"), False),
    ("old stream lacks a projected column", old(cols=("F.p", "F.dest")), q("q1"), False),
    ("old stream carries more columns", old(cols=("F.p", "F.q", "C.p", "C.q", "F.dest")), q("q1"), True),
    ("old stream lacks the join attribute to W (F.dest)", old(cols=("F.p", "C.p")), q("q1"), False),
    ("the old query joined three streams: its F ⋈ C lacks nothing", q("q2", cols=("F.p", "C.p", "W.p")),
     q("q1"), True),
]


@pytest.mark.parametrize("why,before,new,reusable", CASES, ids=[c[0] for c in CASES])
def test_signature_matching(why, before, new, reusable):
    d = deployed_fc(before)
    found = d.matches(Bound(new, CAT, TOP.index), frozenset("FC"))
    assert bool(found) is reusable, why
    if reusable:
        assert found[0].node == 1 and found[0].query == before.name


def test_needed_columns_include_join_attributes_to_the_rest():
    b = Bound(q("q1"), CAT, TOP.index)
    assert b.needed_columns(frozenset("FC")) == {"F.p", "C.p", "F.dest"}
    assert str(b.signature(frozenset("FC"))) == "C⋈F [C.flnum=F.num]"


@pytest.mark.parametrize("text,norm", [
    ("S1.x>5", "S1.x>5"), (" S1.x  >  5.0 ", "S1.x>5"), ("5 < S1.x", "S1.x>5"), ("S1.x <> 3", "S1.x!=3"),
    ("S1.x == 'a b'", "S1.x='a b'"), ("1e1 >= S2.a", "S2.a<=10")])
def test_selection_normal_form(text, norm):
    assert normalise_selection(text) == norm


def test_bad_predicates_are_user_errors():
    with pytest.raises(WorkloadError, match="A.x = B.y"):
        normalise_join("S1.x < S2.y")
    with pytest.raises(WorkloadError, match="ATTR OP VALUE"):
        normalise_selection("just words")
    with pytest.raises(WorkloadError, match="one side must be"):
        normalise_selection("S1.x = S2.y")
    with pytest.raises(WorkloadError, match="unknown stream"):
        Bound(q("q", "FX", ()), CAT, TOP.index)
    with pytest.raises(WorkloadError, match="sink 'z'"):
        Bound(q("q", sink="z"), CAT, TOP.index)
