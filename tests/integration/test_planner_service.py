"""The deployed flow: planner service <- `joinlib submit`; node services take the plan; the
source service replays; results on out.<query> equal the reference join; status says done."""
from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest

from joinlib.cli.main import main as cli
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.protocol import records
from joinlib.query import load_query
from joinlib.reference import reference_join

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def planner(kafka_bootstrap):
    from prometheus_client import CollectorRegistry

    from joinlib.adapters.prometheus import PrometheusSensor
    from services.planner.service import PlannerService, serve
    registry = CollectorRegistry()
    svc = PlannerService(kafka_bootstrap, sensor=PrometheusSensor(registry))
    port = _free_port()
    server = serve(svc, port)
    yield f"http://127.0.0.1:{port}", svc, registry
    server.shutdown()
    svc.close()


def test_submit_plan_run_and_status(planner, kafka_bootstrap, tmp_path, capsys):
    from prometheus_client import generate_latest
    url, svc, registry = planner
    text = (ROOT / "examples" / "routers.yaml").read_text().replace("name: routers", f"name: plsvc{int(time.time())}")
    qfile = tmp_path / "q.yaml"
    qfile.write_text(text)
    query = load_query(qfile)
    generate(query, tmp_path / "data", 1500, seed=5)
    streams = load_streams(query, tmp_path / "data")

    assert cli(["submit", str(qfile), "--planner", "SM-S1", "--url", url]) == 0
    assert f"query {query.name} planned" in capsys.readouterr().out
    st = svc.status(query.name)
    assert st["state"] == "running" and st["plan"]["S1"] == [["S2", "SM-S1"], ["S3", "SM-S1"]]
    assert 'joinlib_plan_info{' in generate_latest(registry).decode()

    _serve_and_replay(query, qfile, tmp_path / "data", kafka_bootstrap, lambda: svc.status(query.name)["state"])
    st = svc.status(query.name)
    assert sum(s["results"] for s in st["sites"].values()) == sum(reference_join(query, streams).values())
    assert cli(["status", query.name, "--url", url]) == 0
    assert '"state": "done"' in capsys.readouterr().out
    assert _results(kafka_bootstrap, query) == Counter(
        {(tuple(ids), ts): n for (ids, ts), n in reference_join(query, streams).items()})


def _serve_and_replay(query, qfile: Path, data: Path, bootstrap: str, state) -> None:
    """A node service per site (threads), the source service's replay of ``data``, until ``state()`` is done."""
    from prometheus_client import CollectorRegistry

    from joinlib.node.node_service import NodeService
    from services.source.__main__ import main as source_main
    stop = threading.Event()
    nodes = [NodeService(site, bootstrap, query=query.name, registry=CollectorRegistry(), stop=stop,
                         plan_timeout_s=60, quiet=True) for site in query.sites]
    threads = [threading.Thread(target=n.run, daemon=True) for n in nodes]
    for t in threads:
        t.start()
    try:
        assert source_main(["--query", str(qfile), "--data", str(data), "--fast", "--bootstrap", bootstrap,
                            "--no-progress"]) == 0
        deadline = time.monotonic() + 120
        while state() != "done" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert state() == "done"
    finally:
        stop.set()
        for t in threads:
            t.join(10)


def test_bad_submissions_are_400_with_the_reason(planner, capsys):
    url, _, _ = planner
    assert cli(["submit", str(ROOT / "examples" / "routers.yaml"), "--planner", "nonsense", "--url", url]) == 2
    assert "unknown plan 'nonsense'" in capsys.readouterr().err


def _results(bootstrap: str, query) -> Counter:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from joinlib.adapters.kafka import consume, end_offsets, make_consumer, out_topic
    consumer = make_consumer(bootstrap, f"check-{query.name}")
    topic = out_topic(query.name)
    end = end_offsets(consumer, [topic])[topic]
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    pos = {s.name: s.pos for s in query.streams}
    got: Counter[tuple[tuple[Optional[int], ...], int]] = Counter()
    seen, deadline = 0, time.monotonic() + 60
    while seen < end and time.monotonic() < deadline:
        for m in consume(consumer, 5000, 0.5):
            value, offset = m.value(), m.offset()
            assert value is not None and offset is not None   # a consumed message has both
            for r in records.decode_result_batch(value).results():
                ids: list[Optional[int]] = [None] * len(pos)
                for name, i in r.ids.items():
                    ids[pos[name]] = i
                got[(tuple(ids), r.head_ts)] += 1
            seen = offset + 1
    consumer.close()
    return got


def test_explain_endpoint_is_joinlib_explain(planner, capsys):
    """POST /explain (``joinlib explain --url``, SQL's EXPLAIN through the service): the explanation the command
    computes itself, text and JSON; nothing is submitted."""
    url, svc, _ = planner
    sql = ROOT / "examples" / "routers_selective.sql"
    for extra in ([], ["--json"]):
        assert cli(["explain", str(sql), "--plan", "SM-S1", *extra]) == 0
        local = capsys.readouterr().out
        assert cli(["explain", str(sql), "--plan", "SM-S1", "--url", url, *extra]) == 0
        assert capsys.readouterr().out == local
    assert svc.status("routers_selective") is None
    assert cli(["explain", str(sql), "--plan", "nonsense", "--url", url]) == 2
    assert "planner service: unknown plan 'nonsense'" in capsys.readouterr().err


def test_the_python_api_submits_reads_results_and_stops(planner, kafka_bootstrap, tmp_path):
    """joinlib.connect(url).submit(path) -> handle; handle.results() is the reference join (out.<query> through
    the planner); handle.status(); handle.stop() publishes stop."""
    import joinlib
    url, _, _ = planner
    name = f"api{int(time.time())}"
    qfile = tmp_path / "q.yaml"
    qfile.write_text((ROOT / "examples" / "routers.yaml").read_text().replace("name: routers", f"name: {name}"))
    query = load_query(qfile)
    generate(query, tmp_path / "data", 1500, seed=6)
    streams = load_streams(query, tmp_path / "data")

    h = joinlib.connect(url).submit(qfile, plan="SP-D")
    assert h.name == name and h.plan["S1"] == [["S2", "SP-D"], ["S3", "SP-D"]]
    assert h.status()["state"] == "running"
    _serve_and_replay(query, qfile, tmp_path / "data", kafka_bootstrap, lambda: h.status()["state"])
    got = Counter((tuple(r["ids"].get(n) for n in query.names), r["ts"]) for r in h.results())
    assert got == Counter({(tuple(ids), ts): n for (ids, ts), n in reference_join(query, streams).items()})
    again = joinlib.connect(url).submit(qfile, plan="SP-D")   # a new run nobody serves: stop it
    assert again.run != h.run and again.stop(wait_s=0) == "stopping"
    assert again.status()["state"] == "stopping"
