# Local Kafka (KRaft, jars from Maven Central) + Redis without Docker.
# Included from the top-level Makefile:   include infra/infra.mk
# Ports/paths come from the environment: KAFKA_PORT, KAFKA_CONTROLLER_PORT, REDIS_PORT,
# JOINLIB_CACHE, JOINLIB_RUN_DIR (see scripts/cluster.sh).

# Do not let these targets become the default goal wherever this file is included.
_INFRA_MK_PREV_GOAL := $(.DEFAULT_GOAL)

CLUSTER_SH ?= bash $(CURDIR)/scripts/cluster.sh

.PHONY: up up-secure down cluster-status cluster-install

cluster-install: ## Fetch the Kafka jars (Maven Central) and apt-get install redis-server if missing
	$(CLUSTER_SH) install

up: ## Start local Kafka (127.0.0.1:19092) and Redis (127.0.0.1:16379); prints KAFKA_BOOTSTRAP_SERVERS/REDIS_URL
	$(CLUSTER_SH) up

up-secure: ## Like up, with Kafka SASL_SSL (SCRAM) and Redis TLS + ACL users; certs and secrets in .secure/ (docs/security.md)
	$(CLUSTER_SH) up-secure

down: ## Stop the local Kafka and Redis (idempotent)
	$(CLUSTER_SH) down

cluster-status: ## Show whether the local Kafka and Redis are running
	$(CLUSTER_SH) status

.DEFAULT_GOAL := $(_INFRA_MK_PREV_GOAL)
