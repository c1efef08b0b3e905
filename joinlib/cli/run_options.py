"""The ``run`` command's fault and switch options, parsed and checked against the query: ``--kill`` and ``--join``
(``SITE@SECONDS``), ``--scale-out`` (``SITE=N,...``) and ``--switch`` (``AT:PLAN``).  A malformed value is a
:class:`~joinlib.errors.JoinlibError` naming the option and an example, never a traceback."""
from __future__ import annotations

import argparse
from typing import Any, Optional

from joinlib.errors import JoinlibError
from joinlib.model import Query
from joinlib.units import parse_duration


def parse_kills(specs: list[str], query: Query, flag: str = "--kill") -> list[tuple[str, float]]:
    """``SITE@SECONDS`` -> (site, seconds), checked against the query's sites."""
    out = []
    for spec in specs:
        site, _, secs = spec.rpartition("@")
        try:
            t = float(secs)
        except ValueError:
            t = -1.0
        if not site or t < 0:
            raise JoinlibError(f"{flag} {spec!r}: expected SITE@SECONDS, e.g. {flag} {query.sites[0]}@2.5")
        if site not in query.nodes:
            raise JoinlibError(f"{flag} {spec!r}: no site {site!r} in {query.name} (sites: {', '.join(query.nodes)})")
        out.append((site, t))
    return out


def parse_instances(spec: Optional[str], query: Query) -> Optional[dict[str, int]]:
    """``--scale-out [SITE=N,...]`` -> instances per site (None: not scaled out)."""
    if spec is None:
        return None
    out: dict[str, int] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        site, sep, n = item.partition("=")
        if not sep or not n.isdigit() or int(n) < 1:
            raise JoinlibError(f"--scale-out {spec!r}: expected SITE=N,... with N >= 1, e.g. --scale-out "
                               f"{query.sites[0]}=2")
        if site not in query.nodes:
            raise JoinlibError(f"--scale-out {spec!r}: no site {site!r} in {query.name} "
                               f"(sites: {', '.join(query.nodes)})")
        out[site] = int(n)
    return out


def faults_of(args: argparse.Namespace, query: Query) -> list[tuple[Any, ...]]:
    """``--kill`` and ``--join`` as :func:`joinlib.node.cluster.run_cluster`'s faults."""
    if args.join and args.scale_out is None:
        raise JoinlibError("--join needs --scale-out (it starts one more instance of a site)")
    return ([(site, t, "kill") for site, t in parse_kills(args.kill, query)]
            + [(site, t, "join") for site, t in parse_kills(args.join, query, "--join")])


def parse_switches(specs: list[str], query: Query) -> list[tuple[int, str]]:
    """``AT:PLAN`` -> (first epoch of the new plan, plan spec), sorted; AT is a stream time
    rounded up to the next epoch boundary (batch interval τ)."""
    tau = query.execution.interval_ms
    out: dict[int, str] = {}
    for spec in specs:
        at, sep, plan = spec.partition(":")
        if not sep or not plan:
            raise JoinlibError(f"--switch {spec!r}: expected AT:PLAN, e.g. --switch 4s:SM-S1")
        try:
            ms = parse_duration(at)
        except JoinlibError as e:
            raise JoinlibError(f"--switch {spec!r}: {e}") from None
        epoch = -(-ms // tau)
        if epoch in out:
            raise JoinlibError(f"--switch {spec!r}: another switch is at the same epoch {epoch} "
                               f"(stream time {epoch * tau} ms; the batch interval is {tau} ms)")
        out[epoch] = plan
    return sorted(out.items())
