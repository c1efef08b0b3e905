"""MJoin trees submitted to the planner service, with their inner operators shared between queries.

``joinlib submit Q.yaml --plan mjoin[:TREE.json]``: the tree (the one sent as the file's ``mjoin_tree``,
or STREAMJOINOPT's from the query file's statistics -- unless a tree built on a running operator ships
fewer new bytes per second, :func:`joinlib.mjoin.deployed.choose_tree`) is split by
:func:`joinlib.mjoin.deployed.split`: every inner operator whose key matches a running operator
deployment is reused (the query reads its derived stream, moved to its own origin), every other one is
published as a deployment of its own (``op-<key>-<run>``, a query in the control log with an
``operator`` object), and the query's own plan runs the root.  The table of deployed operators is the
control log itself: the running deployments with an ``operator`` object, and per query the ``uses``
its plan message lists, so a restarted planner knows it.  Stopping a query stops each operator it
used that no other running query uses (:func:`released`).  ``--no-reuse`` (``reuse=0``) deploys the
whole tree as the query's, shared with nobody, and so does a replayed query (it reads its own
``src.<query>.<stream>`` topics: a finite replay has nothing to share with a later query).
"""
from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Optional

from joinlib.control.messages import LiveStart, PlanMessage
from joinlib.control.run_plan import TreesRun
from joinlib.errors import JoinlibError
from joinlib.mjoin.deployed import RunningOp, choose_tree, split, users
from joinlib.mjoin.derived import TreeProgram, lower_tree
from joinlib.mjoin.tree_plans import plan_tree
from joinlib.model import Query
from joinlib.pmjoin.stats import selectivity_model
from joinlib.pmjoin.tree import from_json
from joinlib.query import query_to_dict


def tree_of(query: Query, planner: str, tree: Any) -> TreeProgram:
    """The submitted tree (``mjoin_tree`` in the file), or ``mjoin``: STREAMJOINOPT on the query file's rates."""
    if tree is not None:
        if isinstance(tree, dict) and set(tree) == {"mjoin_tree"}:
            tree = tree["mjoin_tree"]
        return lower_tree(query, from_json(tree))
    if planner != "mjoin":
        raise JoinlibError(f"plan {planner!r}: the planner service plans single MJoin trees ('mjoin', or a tree "
                           "sent with 'joinlib submit --plan mjoin:TREE.json'); partitioned trees run with "
                           "'joinlib run --cluster'")
    return plan_tree(query, "mjoin")


def running_ops(service: Any) -> dict[str, RunningOp]:
    """key -> the running operator deployment (not stopping) with that key."""
    out: dict[str, RunningOp] = {}
    for st in list(dict(service.queries).values()):
        if st.operator is not None and st.state() == "running" and "key" in st.operator:
            out[str(st.operator["key"])] = RunningOp.from_json(st.name, st.run, st.origin_ms, st.operator)
    return out


def used_by(service: Any, op: str, leaving: Optional[str] = None) -> list[str]:
    """The running queries (not operators, not stopping) that use operator deployment ``op``."""
    live = [(st.name, st.uses) for st in list(dict(service.queries).values())
            if st.operator is None and st.state() == "running"]
    return users(op, live, leaving)


def released(service: Any, st: Any) -> list[str]:
    """The operator deployments ``st`` used that no other running query uses, readers first."""
    return [op for op in reversed(st.uses) if op in service.queries and service.queries[op].state() == "running"
            and not used_by(service, op, st.name)]


def status_json(service: Any, st: Any) -> dict:
    """A query's status; an operator's also says which queries use it (its reference count)."""
    out = st.to_json()
    if st.operator is not None:
        out["used_by"] = used_by(service, st.name)
    return out


def submit_tree(service: Any, query: Query, planner: str, tree: Any, since: Optional[str], reuse: bool) -> dict:
    """Publish a tree submission (see the module docstring); returns the submission's answer."""
    prog = tree_of(query, planner, tree)
    live = service.live_of(query, since)
    origin = live.origin_ms if live is not None else 0
    run = uuid.uuid4().hex[:12]
    if not reuse or live is None:  # a replayed query reads its own src topics: nothing to share
        plan = prog.to_json()
        service.publish(query, _message(query, plan, run, list(TreesRun(prog).nodes()), live), "mjoin")
        return _answer(query, run, plan, live, [], [])
    running = running_ops(service)
    if tree is None:   # STREAMJOINOPT's tree, or one built on a running operator if that ships less
        best, _ = choose_tree(query, prog.tree, running.values(), selectivity_model(query))
        prog = lower_tree(query, best)
    root = len(prog.ops) - 1
    sp = split(prog, running, lambda: uuid.uuid4().hex[:12], origin)
    for new in sp.new:
        op_query = replace(query, name=new.op.name)
        service.publish(op_query, replace(_message(op_query, new.plan, new.op.run, prog.ops[new.index].sites, live),
                                          operator=new.op.to_json()), "mjoin")
    service.publish(query, replace(_message(query, sp.plan, run, prog.ops[root].sites, live), uses=tuple(sp.uses)),
                    "mjoin")
    return _answer(query, run, sp.plan, live, [n.op.name for n in sp.new], list(sp.reused))


def _message(query: Query, plan: dict, run: str, nodes: Any, live: Optional[LiveStart]) -> PlanMessage:
    """The plan message of a tree (or of one operator of it) run by ``nodes`` (its offsets: when published)."""
    return PlanMessage(query_to_dict(query), plan, run, nodes=tuple(nodes), live=live)


def _answer(query: Query, run: str, plan: dict, live: Optional[LiveStart], deployed: list[str],
            reused: list[str]) -> dict:
    out: dict[str, object] = {"query": query.name, "run": run, "plan": plan, "deployed": deployed, "reused": reused}
    if live is not None:
        out["origin_ms"] = live.origin_ms
    return out
