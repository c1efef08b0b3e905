# Live queries on Kafka topics (docs/live.md). Included from the top-level Makefile (`-include live.mk`).

# Do not let these targets become the default goal wherever this file is included.
_LIVE_MK_PREV_GOAL := $(.DEFAULT_GOAL)

PYTHON ?= python3
LIVE_DEMO_ARGS ?=

.PHONY: live-demo live-bench bench-soak bench-chaos test-drills

SOAK_ARGS ?=
CHAOS_ARGS ?=

live-demo: deps ## After `make up`: submits examples/routers_live.sql (planner, a node per site, JSON router events); prints rows with the matched destination and bytes vs central until Ctrl-C (LIVE_DEMO_ARGS="--query examples/routers_live.yaml" for the YAML query)
	$(PYTHON) scripts/live_demo.py $(LIVE_DEMO_ARGS)

live-bench: deps ## Live JSON topics, Fig. 7 workload at three sites: sustained events/s and p50/p99 latency (bench/out/live.*)
	$(PYTHON) bench/live_bench.py

bench-soak: deps ## Soak: a live query at 80% of the rate measured just before, 10 min (SOAK_ARGS="--minutes N"); RSS, Redis memory, lag, p99, every result checked (results/soak)
	$(PYTHON) bench/soak.py $(SOAK_ARGS)

bench-chaos: deps ## Chaos: two live queries (reduce; pmjoin scaled out) under a seeded schedule of kills, pauses, broker and Redis restarts and replans for 10 min, outputs checked exactly (CHAOS_ARGS="--seed N --minutes M"; results/chaos)
	$(PYTHON) bench/chaos.py $(CHAOS_ARGS)

test-drills: deps ## Fault drills: broker stopped 10 s, Redis killed, a node paused, a node killed in a checkpoint (docs/reliability.md)
	$(PYTHON) -m pytest tests/integration/test_drills.py

.DEFAULT_GOAL := $(_LIVE_MK_PREV_GOAL)
