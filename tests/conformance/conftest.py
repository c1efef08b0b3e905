"""The conformance suite reuses the integration fixtures: a real Redis (REDIS_URL, Docker, or a
local redis-server), and a test FAILS - never skips - when none can be had."""
from tests.integration.conftest import _local_cluster, redis_url  # noqa: F401  (fixtures)
