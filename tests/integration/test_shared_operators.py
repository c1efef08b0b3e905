"""Two continuous queries sharing a two-way join on the real broker (issue 15, docs/multiquery.md "Shared
operators").

Q1 = S1 ⋈ S2 ⋈ S3 and Q2 = S1 ⋈ S2 ⋈ S4 over live JSON topics.  Q1 is submitted as the tree
((S1 ⋈ S2)@y ⋈ S3)@z, which deploys the inner join as an operator of its own; Q2, submitted later with
another origin and ``--plan mjoin``, gets a tree built on the running join (S4 ships to y: fewer new
bytes than STREAMJOINOPT's own tree) and reads its derived stream, moved to its own origin; Q2b, Q2 as
((S1 ⋈ S2)@y ⋈ S4)@w with ``--no-reuse``, deploys its own.  Each output must equal the contract's:
the reference join over the records on time for whoever ingests them (the shared operator for S1 and
S2 from its start; each query for its own stream from its start), results from the query's origin on.
Q2 ships fewer bytes than Q2b (no S1 from x to y); stopping Q1 leaves the operator running for Q2, which
stays exact on new records; stopping Q2 stops the operator.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest
import yaml

from joinlib.adapters.kafka import make_admin
from joinlib.cli.main import main as cli
from joinlib.ingest.contract import Written, exact_join, expected_output
from joinlib.model import Query, Tup
from joinlib.node.live_queries import source_starts
from joinlib.query import parse_query, query_to_dict
from services.planner.service import Conflict
from tests.integration.test_live import Recorder, Services, advances, generator, results_via_cli

WAIT_S = 60


@pytest.fixture(scope="module")
def services(kafka_bootstrap):
    svc = Services(kafka_bootstrap)
    yield svc
    svc.close()


def _query(name: str, sites: dict[str, str], topics: dict[str, str], stats: bool = False) -> Query:
    """A star on ``dest`` around S2 over live JSON topics; with ``stats``, rates and selectivities for
    ``--plan mjoin`` (the generator's: 100 events/s, 40 values)."""
    streams = {s: {"site": sites[s], "window": "1s",
                   "source": {"topic": topics[s], "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id"},
                   **({"rate": 100, "selectivity": 0.025, "tuple_bytes": 60} if stats else {})}
               for s in sites}
    join = [f"S2.dest = {s}.dest" for s in sites if s != "S2"]
    doc = {"name": name, "streams": streams, "join": join,
           "execution": {"interval": "100ms", "max_delay": "80ms", "idle_timeout": "3s"}}
    return parse_query(doc, name)


def _tree(top: str, site: str, shared: str) -> dict:
    inner = {"mjoin": shared, "inputs": [{"stream": "S1", "node": _SITE["S1"]}, {"stream": "S2", "node": shared}]}
    return {"mjoin": site, "inputs": [inner, {"stream": top, "node": site}]}


_SITE: dict[str, str] = {}


def _submit(services: Services, q: Query, tree: Optional[dict], since: str, reuse: bool = True) -> dict:
    """Submit ``q`` as an MJoin tree: ``tree``, or (None) the planner's choice."""
    doc = query_to_dict(q)
    if tree is not None:
        doc["mjoin_tree"] = tree
    return services.planner.submit(yaml.safe_dump(doc), "mjoin", None, since, reuse)


def _after(written: list[Written], starts: Optional[dict[str, int]]) -> list[Written]:
    return [w for w in written if starts is None or w.offset >= starts[str(w.part)]]


class Ingest:
    """Who decides which records of some streams are on time: a deployment (name, run, origin) that read
    them from ``starts`` (per stream, per partition; None: every record written)."""

    def __init__(self, name: str, run: str, origin: int, streams: list[str],
                 starts: Optional[dict[str, dict[str, int]]] = None) -> None:
        self.name, self.run, self.origin, self.streams, self.starts = name, run, origin, streams, starts

    def on_time(self, bs: str, q: Query, rec: Recorder) -> dict[str, list[Tup]]:
        written = {s: _after(rec.written.get(s, []), (self.starts or {}).get(s)) for s in self.streams}
        want = expected_output(q, written, self.origin, advances(bs, self.name, self.run))
        return {s: want.on_time[s] for s in self.streams}


def expected(bs: str, q: Query, origin: int, rec: Recorder, ingests: list[Ingest]) -> Counter:
    """The reference join of each stream's on-time records (as its ingest decided them, moved to ``q``'s
    origin), results whose latest tuple is at or after that origin."""
    streams: dict[str, list[Tup]] = {}
    for ing in ingests:
        d = ing.origin - origin
        for s, tups in ing.on_time(bs, q, rec).items():
            streams[s] = [Tup(t.pos, t.id, t.ts + d, t.seq, t.key, t.rest) for t in tups]
    return Counter({r: n for r, n in exact_join(q, streams).items() if r[1] >= 0})


def wait_exact(services: Services, q: Query, origin: int, rec: Recorder, ingests: list[Ingest], tmp_path: Path,
               min_results: int = 1) -> Counter:
    deadline = time.monotonic() + WAIT_S
    while True:
        want = expected(services.bootstrap, q, origin, rec, ingests)
        got = results_via_cli(services, q, origin, tmp_path)
        if got == want:
            break
        if time.monotonic() > deadline:
            missing, extra = want - got, got - want
            raise AssertionError(f"{q.name}: {sum(missing.values())} results missing, {sum(extra.values())} extra "
                                 f"(of {sum(want.values())}); e.g. missing {list(missing)[:3]} extra {list(extra)[:3]}")
        time.sleep(1.0)
    assert sum(want.values()) >= min_results, f"{q.name}: only {sum(want.values())} results: the data is too thin"
    return want


def _wait_state(services: Services, name: str, state: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        st = services.planner.status(name)
        if st["state"] == state or time.monotonic() > deadline:
            assert st["state"] == state, f"{name}: {st['state']}, not {state}"
            return st
        time.sleep(0.5)


def _starts(bs: str, q: Query, streams: list[str]) -> dict[str, dict[str, int]]:
    return {s: v for s, v in source_starts(bs, make_admin(bs), q).items() if s in streams}


def _links(services: Services, name: str) -> set[tuple[str, str]]:
    """The (src, dst) links a stopped query's nodes sent bytes on (their ``done`` messages)."""
    stats = services.planner.queries[name].stats
    assert stats is not None   # a submitted query's stats
    dones = [done.to_json() for done in stats.done.values()]   # typed DoneMessages (joinlib.control.messages)
    return {(ln["src"], ln["dst"]) for d in dones for ln in d.get("links", []) if ln.get("bytes")}


def test_two_continuous_queries_share_a_two_way_join(services, make_topic, tmp_path, capsys):
    import uuid
    tag = uuid.uuid4().hex[:6]
    sites = {"S1": f"x{tag}", "S2": f"y{tag}", "S3": f"z{tag}", "S4": f"w{tag}"}
    _SITE.update(sites)
    services.start_nodes(list(sites.values()))
    topics = {s: make_topic(f"events-{s}", partitions=2) for s in sites}
    everything = _query(f"all{tag}", sites, topics)
    q1 = _query(f"sq1{tag}", {s: sites[s] for s in ("S1", "S2", "S3")}, topics)
    q2 = _query(f"sq2{tag}", {s: sites[s] for s in ("S1", "S2", "S4")}, topics, stats=True)
    q2b = _query(f"sq2b{tag}", {s: sites[s] for s in ("S1", "S2", "S4")}, topics)
    bs, y = services.bootstrap, sites["S2"]
    rec = Recorder()

    r1 = _submit(services, q1, _tree("S3", sites["S3"], y), "0")
    assert len(r1["deployed"]) == 1 and r1["reused"] == []
    op = r1["deployed"][0]
    op_st = services.planner.status(op)
    shared = Ingest(op, op_st["run"], op_st["origin_ms"], ["S1", "S2"])
    generator(bs, everything, rec, time_base_ms=0).burst(150)
    ing1 = [shared, Ingest(q1.name, r1["run"], 0, ["S3"])]
    wait_exact(services, q1, 0, rec, ing1, tmp_path, min_results=20)

    # Q2 and Q2b start later, with another origin (60 s): Q2 reuses the running join, Q2b deploys its own
    starts = _starts(bs, everything, ["S1", "S2", "S4"])
    r2 = _submit(services, q2, None, "60000")   # the planner's tree: built on the running join, at y
    (tmp_path / "q2b.yaml").write_text(yaml.safe_dump(query_to_dict(q2b)))
    (tmp_path / "tree.json").write_text(json.dumps(_tree("S4", sites["S4"], y)))
    assert cli(["submit", str(tmp_path / "q2b.yaml"), "--plan", f"mjoin:{tmp_path / 'tree.json'}", "--no-reuse",
                "--since", "60000", "--url", services.url]) == 0
    r2b = services.planner.status(q2b.name)
    assert r2["reused"] == [op] and r2["deployed"] == [] and "operator" not in capsys.readouterr().out
    assert r2["plan"]["mjoin_tree"]["mjoin"] == y   # S4 ships to the running join, not S1 and S2 to S4's site
    assert services.planner.status(op)["used_by"] == sorted([q1.name, q2.name])
    generator(bs, everything, rec, time_base_ms=60_000, id_base=10_000, seed=2).burst(150)
    ing2 = [shared, Ingest(q2.name, r2["run"], 60_000, ["S4"], starts)]
    ing2b = [Ingest(q2b.name, r2b["run"], 60_000, ["S1", "S2", "S4"], starts)]
    wait_exact(services, q1, 0, rec, ing1, tmp_path, min_results=40)
    wait_exact(services, q2, 60_000, rec, ing2, tmp_path, min_results=20)
    # (not the same results: records just below 60 s are late for Q2b's own ingest, on time for the shared one)
    wait_exact(services, q2b, 60_000, rec, ing2b, tmp_path, min_results=20)

    # stopping Q1 leaves the shared join running for Q2
    assert cli(["stop", q1.name, "--url", services.url]) == 0
    assert services.planner.status(q1.name)["state"] == "stopped"
    assert services.planner.status(op)["state"] == "running"
    assert services.planner.status(op)["used_by"] == [q2.name]
    with pytest.raises(Conflict, match=f"still use.*{q2.name}|{q2.name}.*still use"):
        services.planner.stop(op)
    assert cli(["queries", "--url", services.url]) == 0
    shown = capsys.readouterr().out
    assert f"S1+S2 at {y}; used by {q2.name} (1 reference(s))" in shown and f"reads      {op}" in shown
    before = results_via_cli(services, q1, 0, tmp_path)
    generator(bs, everything, rec, time_base_ms=120_000, id_base=20_000, seed=3).burst(150)
    wait_exact(services, q2, 60_000, rec, ing2, tmp_path, min_results=40)
    wait_exact(services, q2b, 60_000, rec, ing2b, tmp_path, min_results=40)
    assert results_via_cli(services, q1, 0, tmp_path) == before, "a stopped query still produced results"

    # stopping Q2 (the last user) stops the operator; the measured bytes show what sharing saved
    services.planner.stop(q2.name)
    services.planner.stop(q2b.name)
    st2, st2b = _wait_state(services, q2.name, "stopped"), _wait_state(services, q2b.name, "stopped")
    assert _wait_state(services, op, "stopped")["used_by"] == []
    b2, b2b = st2["stats"]["bytes"], st2b["stats"]["bytes"]
    assert 0 < b2 < b2b, (b2, b2b)
    assert (sites["S1"], y) in _links(services, q2b.name) and (sites["S1"], y) not in _links(services, q2.name)



def test_killing_the_shared_operators_node_keeps_both_queries_exact(services, make_topic, kafka_bootstrap,
                                                                     redis_url, tmp_path):
    """Node services as processes with Redis checkpoints; SIGKILL the node of the shared join (also S2's
    site, and the reader of its derived stream for both roots) mid-stream and start it again: it resumes
    from its checkpoint, re-publishes the epochs after it, the readers drop those they had, and both
    queries' results are still exactly the contract's."""
    import threading
    import uuid

    from tests.integration.test_live import _node_process, kill_and_restart, stop_processes
    tag = uuid.uuid4().hex[:6]
    sites = {"S1": f"x{tag}", "S2": f"y{tag}", "S3": f"z{tag}", "S4": f"w{tag}"}
    _SITE.update(sites)
    logs = {s: tmp_path / f"node-{s}.log" for s in sites.values()}
    procs = {s: _node_process(s, kafka_bootstrap, redis_url, logs[s]) for s in sites.values()}
    try:
        topics = {s: make_topic(f"events-{s}", partitions=2) for s in sites}
        everything = _query(f"all{tag}", sites, topics)
        q1 = _query(f"kq1{tag}", {s: sites[s] for s in ("S1", "S2", "S3")}, topics)
        q2 = _query(f"kq2{tag}", {s: sites[s] for s in ("S1", "S2", "S4")}, topics)
        y = sites["S2"]
        r1 = _submit(services, q1, _tree("S3", sites["S3"], y), "0")
        r2 = _submit(services, q2, _tree("S4", sites["S4"], y), "0")
        op = r1["deployed"][0]
        assert r2["reused"] == [op]
        op_st = services.planner.status(op)
        shared = Ingest(op, op_st["run"], op_st["origin_ms"], ["S1", "S2"])
        rec = Recorder()
        gen = generator(kafka_bootstrap, everything, rec, rate=80.0, time_base_ms=0)
        t = threading.Thread(target=gen.run, args=(6.0,))
        t.start()
        kill_and_restart(procs, y, logs[y], f"running query {op}.mj0", 2.5, kafka_bootstrap, redis_url)
        t.join()
        wait_exact(services, q1, 0, rec, [shared, Ingest(q1.name, r1["run"], 0, ["S3"])], tmp_path, min_results=50)
        wait_exact(services, q2, 0, rec, [shared, Ingest(q2.name, r2["run"], 0, ["S4"])], tmp_path, min_results=50)
        assert "resumed from the checkpoint" in logs[y].read_text(), logs[y].read_text()[-2000:]
        services.planner.stop(q1.name)
        services.planner.stop(q2.name)
        assert _wait_state(services, op, "stopped")["used_by"] == []
    finally:
        stop_processes(procs.values())
