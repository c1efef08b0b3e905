"""Kafka ACLs per service principal for the secure local broker (docs/security.md "Kafka ACLs").

The broker of ``make up-secure`` runs KRaft's ``StandardAuthorizer`` with
``allow.everyone.if.no.acl.found=false``: a SCRAM user may do only what an ACL below grants it, and
``admin`` (the broker's own user, a super user) everything.  The grants follow the topic layout of
:mod:`joinlib.adapters.kafka` (``src.<query>.<stream>``, ``node.<query>.<site>``, ``out.<query>``,
``control``, ...).  Per-query topics are created when a query is planned, so every grant is a PREFIXED
pattern (``src.``, ``node.``, ...) or the literal ``control``; consumer groups and transactional ids are
named per run, so every principal may use any (``*``: a group holds offsets, not data).

What the broker enforces: only nodes write ``node.*`` flows, results ``out.*``, derived streams
``derived.*``, dead letters and idle marks; only sources (and the CLI) write ``src.*``; the Spark jobs
read only; nobody but ``admin`` deletes a topic or changes an ACL; a user without grants sees no topic.
What it cannot enforce with this layout (see docs/security.md "Limitations"): ``control`` also carries
the nodes' status/done and the sources' end messages, so nodes and sources may write it; a node's
inbound topic is named after the receiving site, so any node may write any site's ``node.*`` topic.

    python -m infra.kafka_acls apply BOOTSTRAP SECRETS_DIR     # what scripts/cluster.sh up-secure runs
    python -m infra.kafka_acls grant-query BOOTSTRAP SECRETS_DIR QUERY.yaml   # users' live/sink topics
    python -m infra.kafka_acls list BOOTSTRAP SECRETS_DIR
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

R, W, C, D, A = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.ALTER
QUERY_PREFIXES = ("src.", "node.", "out.", "derived.", "dlq.", "wm.", "parts.")
CONTROL = "control"


@dataclass(frozen=True)
class Grant:
    """Operations ``ops`` of ``principal`` on topics named ``name`` (PREFIXED unless ``literal``)."""

    principal: str
    name: str
    ops: tuple[AclOperation, ...]
    literal: bool = False
    resource: ResourceType = ResourceType.TOPIC

    def bindings(self) -> list[AclBinding]:
        pattern = ResourcePatternType.LITERAL if self.literal else ResourcePatternType.PREFIXED
        return [AclBinding(self.resource, self.name, pattern, f"User:{self.principal}", "*", op,
                           AclPermissionType.ALLOW) for op in self.ops]


def _topics(user: str, prefixes: Iterable[str], ops: tuple[AclOperation, ...]) -> list[Grant]:
    return [Grant(user, p, ops) for p in prefixes]


def _anywhere(user: str) -> list[Grant]:
    """Any consumer group (runs name their own) and transactional id (fenced producers)."""
    return [Grant(user, "*", (R, D), literal=True, resource=ResourceType.GROUP),
            Grant(user, "*", (W, D), literal=True, resource=ResourceType.TRANSACTIONAL_ID)]


def planner_grants(user: str = "joinlib-planner") -> list[Grant]:
    """Publishes plans on ``control``; creates (and grows) a query's topics; reads results and dead letters."""
    return [Grant(user, CONTROL, (R, W, C, D), literal=True), *_topics(user, QUERY_PREFIXES, (C, D, A)),
            *_topics(user, ("out.", "dlq."), (R,)), *_anywhere(user)]


def source_grants(user: str = "joinlib-source") -> list[Grant]:
    """Writes ``src.*``; creates the query's topics; reads ``control`` for the plan, writes its end message."""
    return [Grant(user, "src.", (W, R, C, D, A)), *_topics(user, QUERY_PREFIXES[1:], (C, D)),
            Grant(user, CONTROL, (R, W, C, D), literal=True), *_anywhere(user)]


def node_grants(user: str = "joinlib-node") -> list[Grant]:
    """Reads sources, flows and ``control``; writes flows, results, derived streams, dead letters, marks and
    its status/done on ``control``; never writes ``src.*``."""
    own = ("node.", "out.", "derived.", "dlq.", "wm.", "parts.")
    return [*_topics(user, own, (R, W, C, D, A)), Grant(user, "src.", (R, D, A)),
            Grant(user, CONTROL, (R, W, C, D), literal=True), *_anywhere(user)]


def spark_grants(user: str = "joinlib-spark") -> list[Grant]:
    """Reads every topic, writes none."""
    return [Grant(user, "*", (R, D), literal=True), Grant(user, "*", (R, D), literal=True,
                                                           resource=ResourceType.GROUP)]


def cli_grants(user: str = "joinlib-cli") -> list[Grant]:
    """``joinlib run --cluster`` plays planner, sources and nodes in one identity: their union."""
    return [*planner_grants(user), *source_grants(user), *node_grants(user)]


def service_grants() -> list[Grant]:
    """The whole matrix of the secure local cluster (``admin`` is a super user and needs none)."""
    return [*planner_grants(), *source_grants(), *node_grants(), *spark_grants(), *cli_grants()]


def query_grants(query) -> list[Grant]:
    """LITERAL grants for the users' topics a query names (a :class:`~joinlib.model.Query`): nodes read its
    live sources' topics and write its sink topic; the source user may write the live topics."""
    grants: list[Grant] = []
    for s in query.streams:
        if s.source is not None and s.source.live:
            grants += [Grant("joinlib-node", s.source.topic, (R, D), literal=True),
                       Grant("joinlib-source", s.source.topic, (W, C, D), literal=True),
                       Grant("joinlib-cli", s.source.topic, (R, W, C, D), literal=True)]
    topic = query.output.sink_topic
    if topic is not None:
        grants += [Grant(u, topic, (W, C, D), literal=True) for u in ("joinlib-node", "joinlib-cli")]
    return grants


def apply(admin: AdminClient, grants: Iterable[Grant], timeout_s: float = 30.0) -> int:
    """Create the ACLs of ``grants`` (existing ones are kept: creating an ACL twice is a no-op); returns
    how many bindings were sent.  Raises RuntimeError naming the first binding the broker refused."""
    bindings = list(dict.fromkeys(b for g in grants for b in g.bindings()))
    for binding, fut in admin.create_acls(bindings, request_timeout=timeout_s).items():
        try:
            fut.result()
        except Exception as e:
            raise RuntimeError(f"creating the ACL {binding} failed: {e}") from None
    return len(bindings)


def describe(admin: AdminClient, timeout_s: float = 30.0) -> list[AclBinding]:
    """Every ACL of the cluster."""
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    return list(admin.describe_acls(flt, request_timeout=timeout_s).result())


def admin_client(bootstrap: str, secrets_dir: Path) -> AdminClient:
    """An admin client of the secure cluster as its super user ``admin``."""
    from infra.secure_cluster import Secrets
    conf = Secrets(Path(secrets_dir)).kafka_client_conf()
    return AdminClient({"bootstrap.servers": bootstrap, **conf, "log_level": 3})


def main(argv: list[str]) -> int:
    usage = ("usage: python -m infra.kafka_acls {apply|list} BOOTSTRAP SECRETS_DIR\n"
             "       python -m infra.kafka_acls grant-query BOOTSTRAP SECRETS_DIR QUERY.yaml")
    if len(argv) < 3 or (argv[0], len(argv)) not in (("apply", 3), ("list", 3), ("grant-query", 4)):
        print(usage, file=sys.stderr)
        return 2
    admin = admin_client(argv[1], Path(argv[2]))
    try:
        if argv[0] == "list":
            for b in sorted(describe(admin), key=str):
                print(b)
            return 0
        if argv[0] == "grant-query":
            from joinlib.errors import JoinlibError
            from joinlib.query import load_query
            try:
                grants = query_grants(load_query(Path(argv[3])))
            except JoinlibError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
        else:
            grants = service_grants()
        print(f"[acl] {apply(admin, grants)} ACL bindings in place", file=sys.stderr)
        return 0
    except RuntimeError as e:
        print(f"[acl] ERROR: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
