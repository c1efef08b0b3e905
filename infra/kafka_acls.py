"""Kafka ACLs per service principal for the secure local broker (docs/security.md "Kafka ACLs").

The broker of ``make up-secure`` runs KRaft's ``StandardAuthorizer`` with
``allow.everyone.if.no.acl.found=false``: a SCRAM user may do only what an ACL below grants it, and
``admin`` (the broker's own user, a super user) everything.  The grants follow the topic layout of
:mod:`joinlib.adapters.kafka` (``src.<query>.<stream>``, ``node.<query>.<receiver>.from.<sender>``,
``out.<query>``, ``control``, ``status.node.<site>``, ``status.source``, ...).  Per-query topics are created
when a query is planned, so the service grants are PREFIXED patterns (``src.``, ``node.``, ``status.``, ...) or
literals (``control``, ``status.source``); consumer groups and transactional ids are named per run, so every
principal may use any (``*``: a group holds offsets, not data).

What the broker enforces: only the planner (and the CLI, which plays it) writes ``control`` -- the plans and
stops; only sources write ``status.source`` -- their ends -- and only nodes ``status.node.*`` -- their status
and done, each on its site's topic; only nodes write ``node.*`` flows,
results ``out.*``, derived streams ``derived.*``, dead letters and idle marks; only sources (and the CLI)
write ``src.*``; the Spark jobs read only; nobody but ``admin`` deletes a topic or changes an ACL; a user
without grants sees no topic.  With per-site node users (``grant-query --per-site``), also: site s writes
only the flows it sends (``node.<query>.<r>.from.<s>``, and those of the query's MJoin operators with
``--plan mjoin...``) and reads only those it receives (``node.<query>.<s>.from.<r>``), and writes only its own
reports (``status.node.<s>``), so one site's credentials cannot forge another site's flow, status or done, and
writes only its query's results, derived streams, dead letters and idle advances (:func:`own_topics`).
These grants are LITERAL, one per topic of the query: a PREFIXED pattern can only fix the start of a name, the sender
is not at the start of a flow topic's name, and a query's name is a prefix of its MJoin operators'
(``<query>.mj<i>``).  What it cannot enforce: docs/security.md "Limitations".

    python -m infra.kafka_acls apply BOOTSTRAP SECRETS_DIR     # what scripts/cluster.sh up-secure runs
    python -m infra.kafka_acls apply --env     # as the environment's Kafka user (the Helm chart's ACL job)
    python -m infra.kafka_acls grant-query BOOTSTRAP SECRETS_DIR QUERY.yaml [--per-site [--plan SPEC]]
    python -m infra.kafka_acls list BOOTSTRAP SECRETS_DIR
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from joinlib.adapters.kafka import CONTROL_TOPIC as CONTROL
from joinlib.adapters.kafka import ENDS_TOPIC, REPORTS_PREFIX, inbound_topics, node_topic, status_topic

R, W, C, D, A = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.ALTER
QUERY_PREFIXES = ("src.", "node.", "out.", "derived.", "dlq.", "wm.", "parts.")
#: every node's status topic (a prefix: the service-wide node user reports for any site)
NODE_REPORTS = status_topic("")


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


def _reads_control(user: str) -> list[Grant]:
    """Reads ``control`` (plans) and the report topics ``status.*`` (ends, status, done), and may create them
    (a query's are made when it is planned, a node's own when it starts); writes none of them."""
    return [Grant(user, CONTROL, (R, C, D), literal=True), Grant(user, REPORTS_PREFIX, (R, C, D))]


def planner_grants(user: str = "joinlib-planner") -> list[Grant]:
    """Publishes plans and stops on ``control`` (alone); reads the reports on ``status.*``; creates (and grows) a
    query's topics; reads results and dead letters."""
    return [Grant(user, CONTROL, (R, W, C, D), literal=True), Grant(user, REPORTS_PREFIX, (R, C, D)),
            *_topics(user, QUERY_PREFIXES, (C, D, A)), *_topics(user, ("out.", "dlq."), (R,)), *_anywhere(user)]


def source_grants(user: str = "joinlib-source") -> list[Grant]:
    """Writes ``src.*``; creates the query's topics; reads ``control`` for the plan, writes its end message
    on ``status.source`` (and no node's report)."""
    return [Grant(user, "src.", (W, R, C, D, A)), *_topics(user, QUERY_PREFIXES[1:], (C, D)),
            *_reads_control(user), Grant(user, ENDS_TOPIC, (W,), literal=True), *_anywhere(user)]


def node_grants(user: str = "joinlib-node") -> list[Grant]:
    """Reads sources, flows and ``control``; writes flows, results, derived streams, dead letters, marks and
    its status/done on ``status.node.<site>`` (any site's: per-site users are confined to their own); never
    writes ``src.*``, ``control`` nor the sources' ends."""
    own = ("node.", "out.", "derived.", "dlq.", "wm.", "parts.")
    return [*_topics(user, own, (R, W, C, D, A)), Grant(user, "src.", (R, D, A)), *_reads_control(user),
            Grant(user, NODE_REPORTS, (W,)), *_anywhere(user)]


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


def site_user(site: str) -> str:
    """The Kafka user of one site's node service (``grant-query --per-site``)."""
    return f"joinlib-node-{site}"


def site_grants(query, operators: Sequence[tuple[str, Sequence[str]]] = ()) -> list[Grant]:
    """Per-site node users for ``query``: site s reads only the flows it receives
    (``node.<query>.<s>.from.<r>``), writes only those it sends (``node.<query>.<r>.from.<s>``) and only its own
    reports (``status.node.<s>``), LITERAL grants (see the module docstring); likewise the flows of each of
    ``operators``, (name, nodes) of the query's MJoin operators (:func:`mjoin_operators`); everything else as
    :func:`node_grants`, without its prefix grants: the query's own results, derived streams, dead letters, idle
    advances and partitions' topics are LITERAL grants too (:func:`own_topics`), so a site's credentials cannot
    write another query's results or dead letters; ``node.*`` is kept for create, describe and alter only."""
    links = [(query.name, tuple(query.nodes)), *operators]
    grants: list[Grant] = []
    for site in query.nodes:
        user = site_user(site)
        mine = [(name, nodes) for name, nodes in links if site in nodes]
        grants += [*(Grant(user, t, (R, W, C, D, A), literal=True) for t in own_topics(links, site)),
                   Grant(user, "node.", (C, D, A)),
                   Grant(user, "src.", (R, D, A)), *_reads_control(user), *_anywhere(user),
                   Grant(user, status_topic(site), (W,), literal=True),
                   *(Grant(user, t, (R,), literal=True)
                     for name, nodes in mine for t in inbound_topics(name, site, nodes)),
                   *(Grant(user, node_topic(name, dst, site), (W,), literal=True)
                     for name, nodes in mine for dst in dict.fromkeys(nodes) if dst != site)]
    return grants


def own_topics(links: Sequence[tuple[str, Sequence[str]]], site: str) -> list[str]:
    """The topics of a query's runs that ``site``'s node reads and writes besides flows, LITERAL: per run (the query,
    and each of its MJoin operators) its results ``out.<run>``, derived stream ``derived.<run>``, dead letters
    ``dlq.<run>``, idle advances ``wm.<run>`` and, scaled out, its own partitions' topic ``parts.<run>.<site>`` --
    not another query's (the service-wide ``joinlib-node`` has them by prefix)."""
    return [t for name, _ in links for t in (f"out.{name}", f"derived.{name}", f"dlq.{name}", f"wm.{name}",
                                             f"parts.{name}.{site}")]


def mjoin_operators(query, spec: Optional[str]) -> list[tuple[str, list[str]]]:
    """(name, nodes) of each MJoin operator that plan ``spec`` (``mjoin``, ``mjoin:TREE.json``) runs for
    ``query``, named as the runtime names them when it plans the tree (:func:`~joinlib.node.tree_service.tree_flows`
    of the tree :func:`~joinlib.planner.registry.resolve_run_plan` makes, as ``joinlib run --cluster`` and the
    planner service do); none for ``spec`` None or a plan without operators.  A PlanError (a JoinlibError) for a
    spec that cannot be planned from the query file (``pmjoin...:mjoin`` chooses its trees on the data)."""
    if spec is None:
        return []
    from joinlib.control.run_plan import TreesRun
    from joinlib.node.tree_service import tree_flows, tree_run
    from joinlib.planner.registry import resolve_run_plan
    rp = resolve_run_plan(query, spec)
    return tree_flows(tree_run(query, rp.plan)) if isinstance(rp, TreesRun) else []


def query_grants(query) -> list[Grant]:
    """LITERAL grants for the users' topics a query names (a :class:`~joinlib.model.Query`): nodes read its
    live sources' topics and write its sink topic; the source user may write the live topics."""
    grants: list[Grant] = []
    for s in query.streams:
        if s.source is not None and s.source.live:
            grants += [*(Grant(u, s.source.topic, (R, D), literal=True) for u in _node_users(query)),
                       Grant("joinlib-source", s.source.topic, (W, C, D), literal=True),
                       Grant("joinlib-cli", s.source.topic, (R, W, C, D), literal=True)]
    topic = query.output.sink_topic
    if topic is not None:
        grants += [Grant(u, topic, (W, C, D), literal=True) for u in ("joinlib-cli", *_node_users(query))]
    return grants


def _node_users(query) -> list[str]:
    return ["joinlib-node", *(site_user(site) for site in query.nodes)]


def add_site_users(admin: AdminClient, query, secrets_dir: Path, timeout_s: float = 30.0) -> list[str]:
    """Create the SCRAM user of each of ``query``'s node sites (password ``kafka-<user>.password`` in
    ``secrets_dir``, written if missing, mode 600); returns the users."""
    import secrets as pwgen

    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    users = [site_user(site) for site in query.nodes]
    ups = []
    for user in users:
        f = Path(secrets_dir) / f"kafka-{user}.password"
        if not f.exists():
            f.write_text(pwgen.token_hex(16) + "\n")
        f.chmod(0o600)
        ups.append(UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                                f.read_text().strip().encode()))
    for user, fut in admin.alter_user_scram_credentials(ups, request_timeout=timeout_s).items():
        try:
            fut.result()
        except Exception as e:
            raise RuntimeError(f"creating the SCRAM user {user} failed: {e}") from None
    return users


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


def grant_query(admin: AdminClient, query, secrets_dir: Path, per_site: bool = False,
                operators: Sequence[tuple[str, Sequence[str]]] = ()) -> int:
    """:func:`query_grants` of ``query``; with ``per_site`` also its site users (:func:`add_site_users`,
    :func:`site_grants`, with the flows of its MJoin ``operators``: :func:`mjoin_operators`).  Returns how many
    ACL bindings were sent."""
    grants = query_grants(query)
    if per_site:
        add_site_users(admin, query, secrets_dir)
        grants += site_grants(query, operators)
    return apply(admin, grants)


USAGE = """usage: python -m infra.kafka_acls apply BOOTSTRAP SECRETS_DIR
       python -m infra.kafka_acls apply --env
       python -m infra.kafka_acls list BOOTSTRAP SECRETS_DIR
       python -m infra.kafka_acls grant-query BOOTSTRAP SECRETS_DIR QUERY.yaml [--per-site [--plan SPEC]]

apply        the ACLs of every service user (what 'make up-secure' runs), as the user 'admin' of
             SECRETS_DIR (the local secure cluster's); with --env as the super user the environment names
             (KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_*: docs/security.md;
             the Helm chart's ACL job)
list         every ACL the broker holds
grant-query  the query's own topics (live sources' topics, output.topic); --per-site also creates the
             SCRAM user joinlib-node-<site> of each of its sites (password kafka-<user>.password in
             SECRETS_DIR), who writes only the flows it sends, node.<query>.<peer>.from.<site>, and
             its reports, status.node.<site>, and reads only the flows it receives,
             node.<query>.<site>.from.<peer>, and only its query's out., derived., dlq., wm. and
             parts. topics (docs/security.md); --plan mjoin or mjoin:TREE.json
             (what the query is submitted with) also the flows of the tree's MJoin operators,
             node.<query>.mj<i>.<peer>.from.<site>, as the planner names them"""


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if argv == ["apply", "--env"]:
        return _apply_from_env()
    parsed = _arguments(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    args, per_site, plan = parsed
    if args[0] == "grant-query":   # the query and its plan first: a mistake there asks nothing of the broker
        from joinlib.errors import JoinlibError
        from joinlib.query import load_query
        try:
            query = load_query(Path(args[3]))
            operators = mjoin_operators(query, plan)
        except JoinlibError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    admin = admin_client(args[1], Path(args[2]))
    try:
        if args[0] == "list":
            for b in sorted(describe(admin), key=str):
                print(b)
            return 0
        if args[0] == "apply":
            n = apply(admin, service_grants())
        else:
            n = grant_query(admin, query, Path(args[2]), per_site, operators)
        print(f"[acl] {n} ACL bindings in place", file=sys.stderr)
        return 0
    except RuntimeError as e:
        print(f"[acl] ERROR: {e}", file=sys.stderr)
        return 1


def _arguments(argv: list[str]) -> Optional[tuple[list[str], bool, Optional[str]]]:
    """(command and its operands, ``--per-site``, ``--plan``'s value) of ``argv``; None when it does not fit
    :data:`USAGE`."""
    per_site = "--per-site" in argv
    args = [a for a in argv if a != "--per-site"]
    plan = None
    if "--plan" in args[:-1]:
        i = args.index("--plan")
        plan, args = args[i + 1], args[:i] + args[i + 2:]
    if len(args) < 3 or (args[0], len(args)) not in (("apply", 3), ("list", 3), ("grant-query", 4)) \
            or (per_site and args[0] != "grant-query") or (plan is not None and not per_site):
        return None
    return args, per_site, plan


def _apply_from_env() -> int:
    """``apply --env``: the service matrix, as the Kafka user of the environment's client settings."""
    from joinlib.adapters.kafka import check_reachable, make_admin
    from joinlib.errors import JoinlibError
    from joinlib.settings import ServiceEnv
    bootstrap = ServiceEnv.from_env().kafka_bootstrap or ""
    try:
        check_reachable(bootstrap, timeout_s=30)
        n = apply(make_admin(bootstrap), service_grants())
    except (JoinlibError, RuntimeError) as e:
        print(f"[acl] ERROR: {e}", file=sys.stderr)
        return 1
    print(f"[acl] {n} ACL bindings in place on {bootstrap}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
