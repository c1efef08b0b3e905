"""``auto`` over every run kind (issue 30): every partitioned plan, MJoin tree and tree per partition it
weighs, and the one it chooses, gives exactly the reference join's output, embedded and through the codec."""
from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from joinlib.costs import inputs_for
from joinlib.mjoin.derived import TreeProgram, deploy
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.planner.auto import auto_any
from joinlib.planner.kinds import Candidate, gen_kinds, parts_of
from joinlib.reference import reference_join
from joinlib.sim.tree_engine import run_deployment, run_tree
from joinlib.testing import assert_exact, assert_same
from joinlib.testing.strategies import queries, stream_data
from tests.property.test_mjoin_trees import Collect
from tests.property.test_partitioned_exactness import time_windows

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_candidate_exact(query, streams, cand: Candidate, roundtrip: bool = False) -> None:
    if isinstance(cand, (Plan, Partitioned)):
        assert_exact(query, streams, cand, roundtrip=roundtrip)
        return
    sink = Collect()
    if isinstance(cand, TreeProgram):
        run_tree(cand, streams, sink, roundtrip=roundtrip)
    else:
        parts = parts_of(query, cand, streams)
        run_deployment(deploy(cand.programs, share=False),
                       {p.base.name: s for p, s in zip(cand.programs, parts, strict=True)},
                       {p.base.name: sink for p in cand.programs}, roundtrip=roundtrip)
    assert_same(sink.got, reference_join(query, streams), f"candidate {cand.to_json()}")


@SETTINGS
@given(st.data())
def test_every_candidate_of_the_new_kinds_is_exact(data):
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    cands = gen_kinds(query, streams, inputs_for(query, streams))
    event(f"{len(cands)} candidates of the new kinds")
    for name, _, estimate in cands:
        assert estimate >= 0, name
    if cands:   # one drawn candidate run through the codec, every one embedded
        _, pick, _ = data.draw(st.sampled_from(cands))
        assert_candidate_exact(query, streams, pick, roundtrip=True)
    for _, cand, _ in cands:
        assert_candidate_exact(query, streams, cand)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_autos_choice_among_every_kind_is_exact(data):
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    assert_candidate_exact(query, streams, auto_any(query, streams).plan)
