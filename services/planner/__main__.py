"""``python -m services.planner``: the planner service (HTTP API on PLANNER_PORT, metrics on METRICS_PORT)."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Optional, Sequence

from prometheus_client import CollectorRegistry

from joinlib.adapters.kafka import check_reachable
from joinlib.adapters.prometheus import PrometheusSensor, serve_metrics
from joinlib.errors import JoinlibError
from joinlib.settings import HttpSecurity, KafkaSecurity, ServiceEnv, planner_token
from services.common import error_line, info_line
from services.planner.service import PlannerService, serve


def main(argv: Optional[Sequence[str]] = None) -> int:
    env = ServiceEnv.from_env()   # the environment, read once
    ap = argparse.ArgumentParser(prog="python -m services.planner",
                                 description="Accepts queries (POST /queries, or 'joinlib submit'), plans them with "
                                             "joinlib's planners and publishes each plan on the control topic, "
                                             "where every node service takes its share.")
    ap.add_argument("--bootstrap", default=env.kafka_bootstrap or "localhost:9092")
    ap.add_argument("--port", type=int, default=int(env.planner_port or "8080"))
    ap.add_argument("--metrics-port", type=int, default=int(env.metrics_port or "9100"))
    args = ap.parse_args(argv)
    try:
        token = planner_token()
        http = HttpSecurity.from_env()
        tls = http.server_context()   # a bad certificate fails here, before Kafka is asked
        check_reachable(args.bootstrap)
        registry = CollectorRegistry()
        service = PlannerService(args.bootstrap, sensor=PrometheusSensor(registry))
        serve_metrics(args.metrics_port, registry, http)
        server = serve(service, args.port, token, tls)
    except (JoinlibError, OSError) as e:
        error_line(f"planner: {e}")
        return 2
    info_line("planner", f"listening on {http.scheme}://:{args.port} (metrics {http.scheme}://:{args.metrics_port}"
                         f"{', bearer token' if http.metrics_token else ''}), Kafka {args.bootstrap} "
                         f"({KafkaSecurity.from_env().describe()})")
    if token is None:
        info_line("planner", "no API token configured (JOINLIB_PLANNER_TOKEN / JOINLIB_PLANNER_TOKEN_FILE): "
                             "the HTTP API is open to anyone who can reach the port")
    else:
        info_line("planner", "API token configured: every request but /healthz needs 'Authorization: Bearer ...'")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
