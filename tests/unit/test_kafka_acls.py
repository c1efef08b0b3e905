"""The grant matrix of infra/kafka_acls.py, checked offline (the broker's refusals: tests/integration/
test_security.py): a report topic per writer, and per-site node users confined to their own flows -- those of
the query and of its MJoin operators, named as the runtime names them -- and to their own status topic."""
from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import ResourceType  # type: ignore[attr-defined]  # re-exported, not in __all__

from infra.kafka_acls import (
    Grant,
    R,
    W,
    main,
    mjoin_operators,
    service_grants,
    site_grants,
    site_user,
)
from joinlib.adapters.kafka import ENDS_TOPIC, flow_topics, status_topic
from joinlib.control.run_plan import TreesRun
from joinlib.node.tree_service import tree_run, tree_topics
from joinlib.planner.registry import resolve_run_plan
from joinlib.query import load_query

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def allowed(grants: list[Grant], user: str, topic: str, op) -> bool:
    """Whether ``grants`` let ``user`` do ``op`` on ``topic``, matched as the broker matches ACL patterns."""
    return any(g.principal == user and g.resource == ResourceType.TOPIC and op in g.ops
               and (topic == g.name or g.name == "*" if g.literal else topic.startswith(g.name)) for g in grants)


def test_each_writer_writes_only_its_own_report_topic():
    g = service_grants()
    assert allowed(g, "joinlib-source", ENDS_TOPIC, W) and not allowed(g, "joinlib-source", status_topic("r1"), W)
    assert allowed(g, "joinlib-node", status_topic("r1"), W) and not allowed(g, "joinlib-node", ENDS_TOPIC, W)
    assert not any(allowed(g, "joinlib-planner", t, W) for t in (ENDS_TOPIC, status_topic("r1")))
    assert not allowed(g, "joinlib-spark", status_topic("r1"), W) and allowed(g, "joinlib-spark", ENDS_TOPIC, R)
    for user in ("joinlib-planner", "joinlib-node", "joinlib-source"):   # every reader reads every report topic
        assert allowed(g, user, status_topic("r2"), R) and allowed(g, user, ENDS_TOPIC, R), user
    assert not allowed(g, "joinlib-node", "status", W)   # the old shared topic: nobody's


def test_per_site_users_write_only_their_own_status_topic():
    q = load_query(EXAMPLES / "routers.yaml")
    g = site_grants(q)
    for site in q.nodes:
        for other in q.nodes:
            assert allowed(g, site_user(site), status_topic(other), W) == (other == site), (site, other)
        assert not allowed(g, site_user(site), ENDS_TOPIC, W)


def test_per_site_users_of_an_mjoin_plan_own_their_operators_flows():
    """``toggle4`` planned as ``mjoin`` has two operators (``toggle4.mj0``, ``.mj1``): every flow topic of the tree
    run (what the nodes make and use) is written by exactly its sender's user and read by exactly its receiver's."""
    q = load_query(EXAMPLES / "toggle4.yaml")
    ops = mjoin_operators(q, "mjoin")
    assert [name for name, _ in ops] == ["toggle4.mj0", "toggle4.mj1"]
    rp = resolve_run_plan(q, "mjoin")
    assert isinstance(rp, TreesRun)
    flows = [t for t in tree_topics(tree_run(q, rp.plan)) if t.startswith("node.")]
    assert flows and set(flows) == {t for name, nodes in ops for t in flow_topics(name, nodes)}
    g = site_grants(q, ops)
    users = {site: site_user(site) for site in q.nodes}
    for topic in flows:
        receiver, sender = topic.split(".")[-3], topic.split(".")[-1]
        assert [s for s, u in users.items() if allowed(g, u, topic, W)] == [sender], topic
        assert [s for s, u in users.items() if allowed(g, u, topic, R)] == [receiver], topic
    without = site_grants(q)   # no plan given: the operators' flows are nobody's
    assert not any(allowed(without, u, t, W) for u in users.values() for t in flows)
    assert mjoin_operators(q, None) == [] and mjoin_operators(q, "SP-S") == []


def test_grant_query_refuses_a_plan_it_cannot_name_operators_of(capsys, tmp_path):
    """A plan that does not plan is a sentence and exit status 2 before the broker is asked (nothing listens at
    the bootstrap address); ``--plan`` without ``--per-site`` is a usage error."""
    args = ["grant-query", "127.0.0.1:1", str(tmp_path), str(EXAMPLES / "star4.yaml")]
    assert main([*args, "--per-site", "--plan", "mjoin"]) == 2
    assert "error: MJoin trees need time windows" in capsys.readouterr().err
    assert main([*args, "--plan", "mjoin"]) == 2
    assert "usage:" in capsys.readouterr().err
