"""The node service's orchestration on Kafka and Redis: plan runs, trees, scale-out, recovery, sources and control."""
