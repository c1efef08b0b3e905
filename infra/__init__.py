"""Local infrastructure helpers (Kafka/Redis without Docker); see infra/local_cluster.py."""
