"""The Python API, for notebooks and tests (docs/api.md)::

    import joinlib
    res = joinlib.run_embedded("examples/routers_selective.sql", "data/routers")   # plan="auto"
    res.rows[:3], res.bytes, res.report["links"]
    print(joinlib.explain("examples/routers_selective.sql"))

    planner = joinlib.connect("http://localhost:8080")
    h = planner.submit("examples/routers_live.sql", plan="auto")
    for row in h.results(follow=True, idle_exit=10):
        print(row)
    h.stop()

Why a module of its own: the command line prints and exits; these return values (rows as dicts, the report as
the JSON ``--report`` writes) and raise :class:`~joinlib.errors.JoinlibError` for the mistakes the commands print
as ``error:`` lines.  Every call takes SQL text, a query file's path (``.sql`` or YAML) or a loaded
:class:`~joinlib.model.Query`.  It is an entry point like :mod:`joinlib.cli`: the embedded engine and the planner
service's HTTP API (which reads the topics: no Kafka client here).
"""
from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union
from urllib.parse import quote, urlencode

import orjson
import yaml

from joinlib.costs import DEFAULT_MODEL
from joinlib.costs.explanation import Explanation
from joinlib.errors import JoinlibError
from joinlib.model import Query
from joinlib.query import query_to_dict
from joinlib.sql import load_query_file, parse_sql

QueryLike = Union[str, Path, Query]
_SUFFIXES = (".sql", ".yaml", ".yml")


def load(query: QueryLike, *, explain: bool = False) -> Query:
    """A query from SQL text, a query file's path (a :class:`~pathlib.Path`, or a one-line string naming a
    ``.sql`` / ``.yaml`` file or an existing file) or a :class:`Query` as it is; ``explain``: SQL's ``EXPLAIN``
    is accepted (else it is an error, as for ``joinlib run``)."""
    if isinstance(query, Query):
        return query
    if isinstance(query, Path):
        return load_query_file(query, explain=explain)
    text = query.strip()
    if "\n" not in text and (text.lower().endswith(_SUFFIXES) or Path(text).is_file()):
        return load_query_file(text, explain=explain)
    return parse_sql(query, "<sql>", base_dir=Path.cwd(), explain=explain)


# --------------------------------------------------------------------------- embedded

@dataclass(frozen=True)
class Result:
    """An embedded run: ``rows`` as ``joinlib run --out`` writes them (a row of the SELECT list's columns with
    ``ids`` and ``ts``, or ``{"ids", "ts"}`` for a query without one), in emission order; ``bytes`` shipped
    between sites; ``report``: the cost report, as ``joinlib run --report`` writes it."""

    query: str
    rows: list[dict[str, Any]]
    bytes: int
    report: dict[str, Any]

    @property
    def ids(self) -> list[dict[str, Any]]:
        """Each result's member ids by stream."""
        return [r["ids"] for r in self.rows]


def run_embedded(query: QueryLike, data_dir: Union[str, Path], plan: str = "auto", *,
                 model: str = DEFAULT_MODEL) -> Result:
    """Run ``query`` over ``data_dir/<stream>.jsonl`` on the simulated network with ``plan`` (anything
    ``joinlib run --plan`` takes but adaptive plans and MJoin trees) and return its results and bytes."""
    from joinlib.cli.main import JsonlSink  # the very sinks of 'joinlib run --out'
    from joinlib.control.run_plan import Generations, PartitionedRun
    from joinlib.data.files import load_streams
    from joinlib.planner.registry import PlanKind, plan_kind, resolve_run_plan
    from joinlib.rows import RowsSink
    from joinlib.sim.engine import run_embedded as run_sim

    q = load(query)
    if plan_kind(plan) not in (PlanKind.PLANS, PlanKind.PARTITIONED):
        raise JoinlibError(f"plan {plan!r}: run_embedded runs plans and partitioned plans; 'joinlib run --plan "
                           f"{plan}' runs adaptive plans and MJoin trees")
    rest: dict[str, dict[int, tuple[str, ...]]] = {}
    streams = load_streams(q, Path(data_dir), rest) if q.output.rows else load_streams(q, Path(data_dir))
    deployable = resolve_run_plan(q, plan, model, streams)
    assert isinstance(deployable, (Generations, PartitionedRun))
    buf = io.BytesIO()
    sink = RowsSink(q, buf, rest, streams) if q.output.rows else JsonlSink(q, buf)
    report = run_sim(q, streams, deployable.plans, sink)
    rows = [orjson.loads(line) for line in buf.getvalue().splitlines() if line]
    return Result(q.name, rows, int(report.bytes), report.to_dict())


def explain(query: QueryLike, plan: str = "auto", data_dir: Optional[Union[str, Path]] = None, *,
            model: str = DEFAULT_MODEL) -> Explanation:
    """The plan ``plan`` chooses, explained as ``joinlib explain`` does (``str()`` of the answer is its text,
    ``.to_json()`` its ``--json``); with ``data_dir`` the statistics are measured and the floor is the data's."""
    from joinlib.data.files import load_streams
    from joinlib.planner.explained import explain_query

    q = load(query, explain=True)
    streams = load_streams(q, Path(data_dir)) if data_dir is not None else None
    return explain_query(q, plan, model, streams)


# --------------------------------------------------------------------------- the planner service

class Planner:
    """A planner service (``python -m services.planner``); ``url`` as ``joinlib submit --url``."""

    def __init__(self, url: Optional[str] = None) -> None:
        from joinlib.cli.live import planner_url
        self.url = (url or planner_url()).rstrip("/")

    def _http(self, path: str, data: Optional[bytes] = None, timeout: float = 60) -> Any:
        from joinlib.cli.live import http_json  # the commands' client: bearer token, one-line errors
        return http_json(self.url + path, data, timeout=timeout)

    def submit(self, query: QueryLike, plan: Optional[str] = None, *, model: Optional[str] = None,
               since: Optional[str] = None, scale_out: bool = False) -> "QueryHandle":
        """Submit ``query`` (SQL text, a path or a Query) as ``joinlib submit`` does; the planner plans it and
        publishes the plan.  ``plan``: any plan name of the registry (default: the service's, ``auto``);
        ``scale_out``: as ``joinlib submit --scale-out`` (a ``pmjoin`` plan shared by each site's instances)."""
        q = load(query)
        params = {k: v for k, v in (("plan", plan), ("model", model), ("since", since),
                                    ("scale_out", "1" if scale_out else None)) if v}
        out = self._http(f"/queries?{urlencode(params)}", yaml.safe_dump(query_to_dict(q), sort_keys=False).encode())
        return QueryHandle(self, q, str(out["query"]), str(out["run"]), dict(out["plan"]))

    def explain(self, query: QueryLike, plan: Optional[str] = None, *, model: Optional[str] = None) -> dict[str, Any]:
        """The service's ``POST /explain``: the plan a submission would get, explained (JSON, with ``text``)."""
        params = {k: v for k, v in (("plan", plan), ("model", model)) if v}
        doc = yaml.safe_dump(query_to_dict(load(query, explain=True)), sort_keys=False).encode()
        out: dict[str, Any] = self._http(f"/explain?{urlencode(params)}", doc)
        return out

    def queries(self) -> list[dict[str, Any]]:
        """Every query the service knows, as ``joinlib queries --json`` prints them."""
        out: list[dict[str, Any]] = self._http("/queries")
        return out


def connect(url: Optional[str] = None) -> Planner:
    """The planner service at ``url`` (default ``$JOINLIB_PLANNER_URL`` or http://localhost:8080)."""
    return Planner(url)


@dataclass(frozen=True)
class QueryHandle:
    """A submitted query's current run: its name, run id and plan; its results, status, and stop."""

    planner: Planner
    query: Query
    name: str
    run: str
    plan: dict[str, Any]

    def status(self) -> dict[str, Any]:
        """The service's status of the query (``joinlib queries NAME --json``): ``state``, ``stats``, ``sites``."""
        out: dict[str, Any] = self.planner._http(f"/queries/{quote(self.name)}")
        return out

    def stop(self, wait_s: float = 30.0) -> str:
        """Stop the run (``joinlib stop``) and wait up to ``wait_s`` for every node to stop it; its state."""
        state = str(self.planner._http(f"/queries/{quote(self.name)}/stop", b"")["state"])
        deadline = time.monotonic() + wait_s
        while state != "stopped" and time.monotonic() < deadline:
            time.sleep(0.5)
            state = str(self.status()["state"])
        return state

    def results(self, follow: bool = False, idle_exit: Optional[float] = None,
                from_beginning: bool = True) -> Iterator[dict[str, Any]]:
        """The run's results as dicts, read lazily.  Without ``follow``: every result so far, then the iterator
        ends; with it: new ones as they come, until none came for ``idle_exit`` seconds (forever without it).

        Read through the planner service, as ``joinlib results`` prints them (``from_beginning`` False: only results
        after this call): a query whose rows go to a sink topic (a SELECT list and SQL ``WITH (topic = ...)``, YAML
        ``output.topic``) yields its rows from that topic (the selected columns, ``ids`` and ``ts``; Avro rows
        decoded with their registered schema; docs/sql.md "Rows on the sink topic"), any other query
        ``out.<query>``'s ``{"ids", "ts"}``.  No Kafka client in the caller."""
        base = f"/queries/{quote(self.name)}/results"
        start = "beginning" if from_beginning else "end"
        stop_at: Optional[int] = None
        last = time.monotonic()
        while True:
            args = {"from": start, "max": 20000, "wait": 1.0 if follow else 0}
            page = self.planner._http(f"{base}?{urlencode(args)}")
            if stop_at is None:
                stop_at = int(page["end"])
            if page["results"]:
                last = time.monotonic()
                yield from page["results"]
            start = str(page["next"])
            if not follow and int(page["next"]) >= min(stop_at, int(page["end"])):
                return
            if follow and idle_exit is not None and time.monotonic() - last >= idle_exit:
                return
