# Deployment artefacts: docker-compose.yml, services/Dockerfile, services/spark/Dockerfile,
# helm/joinlib, monitoring/. Included from the top-level Makefile:   -include deploy.mk
# Everything here runs without a Docker engine or a cluster except deploy-images.

# Do not let these targets become the default goal wherever this file is included.
_DEPLOY_MK_PREV_GOAL := $(.DEFAULT_GOAL)

PYTHON ?= python3
JOINLIB_CACHE ?= $(HOME)/.cache/joinlib
HELM_INSTALL_SH ?= bash $(CURDIR)/scripts/install-helm.sh

.PHONY: deploy-check helm-install-tool grafana-dashboards deploy-images

helm-install-tool: ## Build the pinned helm v3 into ~/.cache/joinlib/bin (JOINLIB_CACHE) from the Go module proxy; needs Go >= 1.26
	$(HELM_INSTALL_SH)

deploy-check: deps ## Offline checks of compose, Dockerfiles, Helm chart (lint/template/k8s 1.30 schemas), Prometheus, Grafana
	$(PYTHON) -m pytest tests/deploy

grafana-dashboards: ## Regenerate monitoring/grafana/dashboards/*.json from monitoring/grafana/build_dashboards.py
	$(PYTHON) monitoring/grafana/build_dashboards.py

deploy-images: ## Build the joinlib:local and joinlib-spark:local images (needs a Docker engine)
	docker compose build

.DEFAULT_GOAL := $(_DEPLOY_MK_PREV_GOAL)
