# joinlib — `make help` lists the targets.
PYTHON ?= python3
STAMP := .make
.DEFAULT_GOAL := help

.PHONY: help deps demo test test-fast lint bench bench-latency bench-bytes bench-adaptive-cluster bench-mjoin bench-scale-out bench-scale-out-live bench-repartition bench-shared-ops bench-flink bench-cpu clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP)/deps: requirements.txt requirements-dev.txt pyproject.toml setup.py $(wildcard joinlib/*/_*.c joinlib/*/*/_*.c)
	@mkdir -p $(STAMP)
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

deps: $(STAMP)/deps ## Install the pinned Python dependencies and joinlib itself

demo: deps ## Run the example: three routers joined on destination address; auto's bytes vs central's and the floor
	$(PYTHON) -m joinlib gen examples/routers_selective.sql --out data/routers --duration 15s --seed 1
	$(PYTHON) -m joinlib plan examples/routers_selective.sql --planner auto --data data/routers --out data/routers/plan.json
	@echo "the plan auto chose, with the byte model's estimates (joinlib explain):"
	@$(PYTHON) -m joinlib explain examples/routers_selective.sql --plan data/routers/plan.json --data data/routers
	$(PYTHON) -m joinlib run examples/routers_selective.sql --data data/routers --plan data/routers/plan.json \
		--out data/routers/results.jsonl --report data/routers/report.json
	@echo "first results (data/routers/results.jsonl):"; head -n 3 data/routers/results.jsonl
	@echo; echo "for comparison, shipping every tuple to one site (what centralized engines do), at its best site:"
	@for s in r1 r2 r3; do $(PYTHON) -m joinlib run examples/routers_selective.sql --data data/routers \
		--plan central:$$s --quiet --report data/routers/report-central-$$s.json || exit 1; done
	$(PYTHON) -m joinlib.costs.floor examples/routers_selective.sql data/routers --json data/routers/floor.json
	@$(PYTHON) -c "import json; a=json.load(open('data/routers/report.json')); \
		cs=[json.load(open(f'data/routers/report-central-{s}.json')) for s in ('r1','r2','r3')]; \
		b=min(cs, key=lambda c: c['bytes']); f=json.load(open('data/routers/floor.json')); \
		print(f\"auto ships {a['bytes']:,} bytes; best central ships {b['bytes']:,} ({a['bytes']/b['bytes']:.1%} of it)\"); \
		print(f\"floor {f['floor']:,} bytes (floor + keys {f['floor_keys']:,}); auto / floor = {a['bytes']/max(1,f['floor']):.1f}\"); \
		print(f\"same {a['results']:,} results as every central: {all(c['results']==a['results'] for c in cs)}\")"

# -X faulthandler: a fatal error after pytest's own handler is off (at the interpreter's exit) still prints
# every thread's stack -- a CI run on 2026-11-30 aborted there on a glibc heap check, without one
test: deps cluster-install prometheus-install helm-install-tool spark-deps ## Run every test (starts its own Kafka broker and Redis server)
	$(PYTHON) -X faulthandler -m pytest

test-fast: deps ## Unit and property tests only (no Kafka/Redis)
	$(PYTHON) -m pytest tests/unit tests/property

# Every check runs, then lint fails if any did. pyspark (spark.mk) is installed so that mypy
# checks services/spark against its types, the same on every machine.
LINT_CHECKS := "$(PYTHON) -m ruff check ." \
	"$(PYTHON) -m mypy" \
	"$(PYTHON) -c 'from importlinter.cli import lint_imports_command as c; c()'" \
	"$(PYTHON) scripts/check_import_cycles.py"

lint: deps $(STAMP)/spark-pip ## Static checks: ruff, mypy (strict on the core), import layers (import-linter), no import cycles
	@failed=""; for check in $(LINT_CHECKS); do \
		echo "+ $$check"; sh -c "$$check" || failed="$$failed\n  $$check"; \
	done; \
	if [ -n "$$failed" ]; then printf "lint failed:$$failed\n"; exit 1; fi; echo "lint: all checks passed"

bench: deps ## Benchmarks of the embedded engine (JSON + PNG under bench/out)
	$(PYTHON) bench/engine_bench.py

bench-bytes: deps ## Bytes of every planner's plan vs the best central and the floor over the issue-11 grid (results/bytes, docs/bytes.md)
	$(PYTHON) bench/bytes_bench.py --out results/bytes --table docs/bytes.md

bench-adaptive-cluster: deps cluster-install ## Adaptive re-planning embedded and on Kafka + Redis (results/adaptive-cluster; docs/adaptive.md table)
	$(PYTHON) bench/adaptive_cluster.py --out results/adaptive-cluster

bench-mjoin: deps cluster-install ## MJoin trees (mjoin, pmjoin:...:mjoin) against seed 002's model, and two queries sharing an operator, embedded and on Kafka (results/mjoin)
	$(PYTHON) bench/mjoin_bench.py --cluster --out results/mjoin

bench-scale-out: deps cluster-install ## A site's partitions shared by node instances (scale-out, issue 14): exact runs, bytes, and the latency of a hand-over and a take-over (results/scale-out)
	$(PYTHON) bench/scale_out_bench.py --out results/scale-out

bench-scale-out-live: deps cluster-install ## A scaled-out live query (re-keyed sources) with N = 1, 2, 4 instance processes at the busy site: CPU per event and throughput (issue 27 item 4; results/scale-out-live)
	$(PYTHON) bench/scale_out_live_bench.py --out results/scale-out-live

bench-repartition: deps ## An automatic re-partition's gain: a partition function fitted to moved per-value rates vs a refit, model and simulator (issue 29 item 2; results/repartition)
	$(PYTHON) bench/repartition_bench.py --out results/repartition

bench-shared-ops: deps cluster-install ## Live queries sharing an MJoin operator vs each deploying its own, on Kafka: bytes and equal results (results/shared-ops)
	$(PYTHON) bench/shared_ops_bench.py --seconds 60 --out results/shared-ops

bench-cpu: deps ## Input tuples per operator CPU-second of every plan kind on the routers, Fig. 7 and chain workloads, and the slowest plan's profile (results/cpu)
	$(PYTHON) bench/cpu_bench.py --out results/cpu

bench-flink: deps cluster-install ## joinlib vs Apache Flink 2.2 (interval joins, mini-cluster; jar built with mvn) on the same topics, 300 s backlogs: results, events/s, CPU, bytes (results/flink; docs/results.md table)
	$(PYTHON) bench/flink_compare.py --out results/flink --table docs/results.md

bench-latency: deps ## Simulated result latency of every algorithm and the demo: p50/p99 against tau + delta + 2 x hops
	$(PYTHON) bench/latency_bench.py

clean: ## Remove generated data and caches
	rm -rf data bench/out .pytest_cache .hypothesis .mypy_cache .ruff_cache .import_linter_cache $(STAMP)

-include infra/infra.mk
-include infra/prometheus.mk
-include deploy.mk
-include spark.mk
-include live.mk
