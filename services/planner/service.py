"""Plan submitted queries with the same planners as embedded mode and publish them.

HTTP API (JSON answers):

* ``GET /healthz``: ``ok``;
* ``POST /queries?planner=greedy&model=paper``, body: the query file (YAML): plans it (any plan
  name of :mod:`joinlib.planner.registry`), creates its topics, publishes the plan on ``control``
  (every node service compiles it and takes its share, its node operator set); 201
  ``{"query", "run", "plan"}``; 400 with ``{"error"}`` for a bad query or plan;
* ``GET /queries``: every known query with its status;
* ``GET /queries/<name>``: plan, run, and per site: last epoch reported, done or not.

Status comes from the ``control`` topic (``status`` / ``done`` messages of the nodes), read
by a background thread, so a restarted planner knows every earlier submission.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, urlparse

import yaml

from joinlib import wire
from joinlib.adapters.kafka import (
    CONTROL_TOPIC,
    consume,
    end_offsets,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
    produce_control_sync,
    query_topics,
)
from joinlib.errors import JoinlibError
from joinlib.ir import lower
from joinlib.plan import from_json
from joinlib.planner.registry import resolve_plan
from joinlib.query import parse_query, query_to_dict


@dataclass
class QueryStatus:
    name: str
    run: str
    plan: dict
    planner: str
    sites: dict = field(default_factory=dict)  # site -> {"epoch", "last_epoch", "done", "results"}
    submitted_ms: float = 0.0

    def to_json(self) -> dict:
        done = bool(self.sites) and all(s.get("done") for s in self.sites.values())
        return {"query": self.name, "run": self.run, "planner": self.planner, "plan": self.plan,
                "state": "done" if done else "running", "sites": self.sites}


class PlannerService:
    def __init__(self, bootstrap: str, *, sensor=None) -> None:
        self.bootstrap = bootstrap
        self.sensor = sensor
        self.admin = make_admin(bootstrap)
        ensure_topics(self.admin, [CONTROL_TOPIC])
        self.producer = make_producer(bootstrap)
        self.queries: dict[str, QueryStatus] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="control-watcher", daemon=True)
        self._watcher.start()

    # ------------------------------------------------------------------ submission
    def submit(self, text: str, planner: str = "greedy", model: str = "paper") -> dict:
        """Plan a query file's text and publish the plan; JoinlibError for user mistakes."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise JoinlibError(f"the submitted query is not valid YAML: {e}") from None
        query = parse_query(data, "<submitted query>")
        plan = resolve_plan(query, planner, model)
        topics = query_topics(query)
        ensure_topics(self.admin, topics)
        consumer = make_consumer(self.bootstrap, f"joinlib-planner-{uuid.uuid4().hex[:8]}")
        try:
            offsets = end_offsets(consumer, [t for t in topics if t != CONTROL_TOPIC])
        finally:
            consumer.close()
        run = uuid.uuid4().hex[:12]
        payload = {"query": query_to_dict(query), "plan": plan.to_json(), "run": run, "offsets": offsets,
                   "nodes": list(lower(query, plan).nodes)}
        produce_control_sync(self.producer, query.name, "plan", payload)
        status = QueryStatus(query.name, run, plan.to_json(), planner, submitted_ms=time.time() * 1000)
        with self.lock:
            self.queries[query.name] = status
        if self.sensor is not None:
            self.sensor.set_plan(query.name, plan)
        return {"query": query.name, "run": run, "plan": plan.to_json()}

    def status(self, name: Optional[str] = None):
        with self.lock:
            if name is None:
                return [q.to_json() for q in self.queries.values()]
            q = self.queries.get(name)
            return None if q is None else q.to_json()

    # ------------------------------------------------------------------ control log
    def _watch(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        consumer = make_consumer(self.bootstrap, f"joinlib-planner-watch-{uuid.uuid4().hex[:8]}")
        consumer.assign([TopicPartition(CONTROL_TOPIC, 0, OFFSET_BEGINNING)])
        try:
            while not self._stop.is_set():
                for msg in consume(consumer, 1000, 0.5):
                    value = msg.value()
                    if value is None:  # a tombstone: not a control message
                        continue
                    try:
                        c = wire.decode_control(value)
                    except ValueError:
                        continue
                    self._apply(c.query, c.kind, c.payload if isinstance(c.payload, dict) else {})
        finally:
            consumer.close()

    def _apply(self, query: str, kind: str, p: dict) -> None:
        with self.lock:
            if kind == "plan" and p.get("run"):
                cur = self.queries.get(query)
                if cur is None or cur.run != p["run"]:
                    self.queries[query] = QueryStatus(query, p["run"], p.get("plan", {}), "external")
                    self._restore_plan_metric(query, p)
                return
            cur = self.queries.get(query)
            if cur is None or p.get("run") != cur.run or "site" not in p:
                return
            site = cur.sites.setdefault(p["site"], {"done": False})
            if kind == "status":
                site.update(epoch=p.get("epoch"), last_epoch=p.get("last_epoch"))
            elif kind == "done":
                site.update(done=True, results=p.get("results"))

    def _restore_plan_metric(self, query: str, p: dict) -> None:
        if self.sensor is None or "query" not in p:
            return
        try:
            self.sensor.set_plan(query, from_json(parse_query(p["query"], query), p["plan"]))
        except JoinlibError:
            pass

    def close(self) -> None:
        self._stop.set()
        self._watcher.join(5)


def make_handler(service: PlannerService):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # quiet: one line per request is noise here
            pass

        def _answer(self, code: int, body) -> None:
            data = (json.dumps(body, indent=2) + "\n").encode() if not isinstance(body, bytes) else body
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = urlparse(self.path).path.rstrip("/")
            if path == "/healthz":
                return self._answer(200, b"ok\n")
            if path == "/queries":
                return self._answer(200, service.status())
            if path.startswith("/queries/"):
                st = service.status(path.split("/", 2)[2])
                return self._answer(200, st) if st else self._answer(404, {"error": "no such query"})
            self._answer(404, {"error": f"no route {path}; see GET /healthz, GET|POST /queries"})

        def do_POST(self):
            url = urlparse(self.path)
            if url.path.rstrip("/") != "/queries":
                return self._answer(404, {"error": "POST /queries with the query file as the body"})
            args = {k: v[0] for k, v in parse_qs(url.query).items()}
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
            try:
                out = service.submit(body, args.get("planner", "greedy"), args.get("model", "paper"))
            except JoinlibError as e:
                return self._answer(400, {"error": str(e)})
            self._answer(201, out)

    return Handler


def serve(service: PlannerService, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("0.0.0.0", port), make_handler(service))
    threading.Thread(target=server.serve_forever, name="planner-http", daemon=True).start()
    return server
