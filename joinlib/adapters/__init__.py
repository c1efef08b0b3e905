"""I/O adapters: the only part of joinlib allowed to import Kafka, Redis and Prometheus clients.

- :mod:`joinlib.adapters.kafka` -- Kafka transport, topics, producer/consumer helpers;
- :mod:`joinlib.adapters.prometheus` -- the runtime Sensor as Prometheus metrics;
- :mod:`joinlib.adapters.redis_store` -- window stores in Redis.
"""
