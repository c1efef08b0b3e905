"""Spark Structured Streaming / batch jobs on the joinlib topics (docs/spark.md)."""
