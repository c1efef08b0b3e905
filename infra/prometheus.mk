# A real Prometheus server for the monitoring test (tests/integration/test_prometheus_eval.py).
# Included from the top-level Makefile; `make test` depends on prometheus-install.
_PROM_MK_PREV_GOAL := $(.DEFAULT_GOAL)

.PHONY: prometheus-install

prometheus-install: ## apt-get install prometheus (Debian's package) if missing, for the monitoring test
	bash $(CURDIR)/scripts/install-prometheus.sh

.DEFAULT_GOAL := $(_PROM_MK_PREV_GOAL)
