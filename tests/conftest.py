"""Fixtures for a real Kafka broker and Redis server, shared by every test directory so that
one pytest session starts at most one of each (see tests/cluster_fixtures.py)."""
pytest_plugins = ["tests.cluster_fixtures"]
