# joinlib — `make help` lists the targets.
PYTHON ?= python3
STAMP := .make
.DEFAULT_GOAL := help

.PHONY: help deps demo test test-fast lint bench bench-latency clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP)/deps: requirements.txt requirements-dev.txt pyproject.toml
	@mkdir -p $(STAMP)
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

deps: $(STAMP)/deps ## Install the pinned Python dependencies and joinlib itself

demo: deps ## Run the example: three routers joined on destination address (embedded, simulated network)
	$(PYTHON) -m joinlib gen examples/routers_wan.yaml --out data/routers --duration 10s --seed 1
	$(PYTHON) -m joinlib plan examples/routers_wan.yaml --planner sampled --data data/routers --out data/routers/plan.json
	$(PYTHON) -m joinlib run examples/routers_wan.yaml --data data/routers --plan data/routers/plan.json \
		--out data/routers/results.jsonl --report data/routers/report.json
	@echo "first results (data/routers/results.jsonl):"; head -n 3 data/routers/results.jsonl
	@echo; echo "for comparison, shipping every tuple to one site (what centralized engines do):"
	$(PYTHON) -m joinlib run examples/routers_wan.yaml --data data/routers --plan central --quiet \
		--report data/routers/report-central.json
	@$(PYTHON) -c "import json; a=json.load(open('data/routers/report.json')); b=json.load(open('data/routers/report-central.json')); \
		print(f\"chosen plan ships {a['bytes']:,} bytes, central ships {b['bytes']:,} bytes ({a['bytes']/b['bytes']:.0%}); same {a['results']:,} results: {a['results']==b['results']}\")"

test: deps cluster-install helm-install-tool spark-deps ## Run every test (starts its own Kafka broker and Redis server)
	$(PYTHON) -m pytest

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

bench-latency: deps ## Simulated result latency of every algorithm and the demo: p50/p99 against tau + delta + 2 x hops
	$(PYTHON) bench/latency_bench.py

clean: ## Remove generated data and caches
	rm -rf data bench/out .pytest_cache .hypothesis .mypy_cache .ruff_cache .import_linter_cache $(STAMP)

-include infra/infra.mk
-include deploy.mk
-include spark.mk
