"""``python -m services.node --site SITE [--query NAME] [--run ID] [--serve]``

Env: ``KAFKA_BOOTSTRAP_SERVERS`` (required), ``REDIS_URL`` (windows in Redis if set),
``JOINLIB_SITE`` (default for --site), ``METRICS_PORT`` (default 9100; 0 = no HTTP server),
``JOINLIB_CHECKPOINT_EVERY_S`` (default for --checkpoint-every), ``JOINLIB_SHARED`` (``1``: --shared),
``JOINLIB_GC_GEN0`` (the garbage collector's young-generation threshold, default 50000; Python's is 700),
``JOINLIB_MALLOC_TRIM_S`` (how often the C heap's free memory goes back to the system, default 10; 0 = never).
With ``REDIS_URL``, a node that is restarted resumes from its last checkpoint (joinlib/node/recovery.py).
Errors (Kafka unreachable, bad plan) print one ``error:`` line and exit with status 2.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import signal
import sys
import threading
from typing import Optional

from joinlib.errors import JoinlibError
from joinlib.node.node_service import CHECKPOINT_EVERY_S, NodeService
from joinlib.settings import ServiceEnv, reveal
from services.common import error_line


def tune_gc(gen0: int) -> None:
    """The garbage collector for a node: what was imported moves to the permanent generation (never scanned
    again), and the young generation is collected every ``gen0`` allocations instead of 700.  Why: a node allocates
    a row per intermediate result (millions a minute on a busy result site) and holds them for a step; the
    collector scanned them again and again for cycles a node does not make."""
    gc.freeze()
    gc.set_threshold(gen0, 20, 50)


def trim_memory(every_s: float, stop: threading.Event) -> Optional[threading.Thread]:
    """A daemon thread handing the C heap's free memory back to the system every ``every_s`` seconds until ``stop``
    (glibc's ``malloc_trim(0)``; None where there is no glibc, or ``every_s`` is 0).  Why: glibc gives back by itself
    only the free memory at the top of its heap, so a node that worked off a backlog kept that backlog's high-water
    mark as RSS, and a long run's RSS climbed in steps, one per bigger backlog (the soak's memory verdict failed on
    it: docs/reliability.md).  A trim takes 0.3-6 ms; ctypes releases the GIL for it."""
    if every_s <= 0:
        return None
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):   # not glibc (musl, macOS): nothing to trim
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int

    def loop() -> None:
        while not stop.wait(every_s):
            trim(0)
    thread = threading.Thread(target=loop, name="malloc-trim", daemon=True)
    thread.start()
    return thread


def _checkpoint_every(given: Optional[float], env: ServiceEnv) -> float:
    """--checkpoint-every, else $JOINLIB_CHECKPOINT_EVERY_S, else the default; ValueError with the message."""
    every = given
    if every is None:
        try:
            every = float(env.checkpoint_every_s or str(CHECKPOINT_EVERY_S))
        except ValueError:
            raise ValueError(f"JOINLIB_CHECKPOINT_EVERY_S={env.checkpoint_every_s!r} is not a number of seconds") \
                from None
    if every < 0:
        raise ValueError("--checkpoint-every must be >= 0 seconds")
    return every


def main(argv=None) -> int:
    env = ServiceEnv.from_env()   # the environment, read once: what the options and the service get
    ap = argparse.ArgumentParser(prog="python -m services.node",
                                 description="Run the join node of one site on Kafka (docs/contracts.md).")
    ap.add_argument("--site", default=env.site, help="this node's site (default: $JOINLIB_SITE)")
    ap.add_argument("--query", help="only run plans of this query (default: any query with a stream here)")
    ap.add_argument("--run", help="only run the plan with this run id")
    ap.add_argument("--serve", action="store_true", help="after a plan is done, wait for the next one")
    ap.add_argument("--bootstrap", default=env.kafka_bootstrap,
                    help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    ap.add_argument("--plan-timeout", type=float, help="give up if no plan arrives within this many seconds")
    ap.add_argument("--connect-timeout", type=float, default=15.0,
                    help="give up if Kafka does not answer within this many seconds (default 15)")
    ap.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                    help="with REDIS_URL: save a checkpoint (windows + state + offsets) this often, so that a "
                         "restarted node resumes where it was; 0 = never (default: $JOINLIB_CHECKPOINT_EVERY_S or 1)")
    ap.add_argument("--shared", action="store_true", default=(env.shared or "") in ("1", "true", "yes"),
                    help="one of several instances of this site (e.g. Helm replicas): run only scaled-out plans "
                         "('joinlib run|submit ... --plan pmjoin... --scale-out'), whose partitions the instances "
                         "share as a consumer group (a live query's re-keyer too); skip other plans with an "
                         "error line, since each instance would run them whole (default: $JOINLIB_SHARED=1)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if not args.site:
        error_line("no site: pass --site SITE or set JOINLIB_SITE")
        return 2
    if not args.bootstrap:
        error_line("no Kafka: set KAFKA_BOOTSTRAP_SERVERS (host:port) or pass --bootstrap")
        return 2
    try:
        port = int(env.metrics_port or "9100")
    except ValueError:
        error_line(f"METRICS_PORT={env.metrics_port!r} is not a port number")
        return 2
    try:
        every = _checkpoint_every(args.checkpoint_every, env)
        tune_gc(env.node.gc_threshold)
        trim_every = env.node.trim_every_s
    except (ValueError, JoinlibError) as e:
        error_line(str(e))
        return 2
    stop = threading.Event()
    trim_memory(trim_every, stop)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    svc = NodeService(args.site, args.bootstrap, query=args.query, run=args.run, redis_url=reveal(env.redis_url),
                      metrics_port=port or None, serve=args.serve, stop=stop,
                      plan_timeout_s=args.plan_timeout, connect_timeout_s=args.connect_timeout, quiet=args.quiet,
                      checkpoint_every_s=every, shared=args.shared, settings=env.node)
    try:
        return svc.run()
    except JoinlibError as e:
        error_line(f"node {args.site}: {e}")
        return 2
    except OSError as e:  # e.g. the metrics port is taken
        error_line(f"node {args.site}: {e}")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
