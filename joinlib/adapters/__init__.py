"""I/O adapters: the only part of joinlib allowed to import Kafka, Redis and Prometheus clients.

- :mod:`joinlib.adapters.kafka` -- Kafka transport, topics, producer/consumer helpers;
- :mod:`joinlib.adapters.prometheus` -- the runtime Sensor as Prometheus metrics;
- :mod:`joinlib.adapters.redis_store` -- window stores in Redis (their Lua scripts: :mod:`joinlib.adapters.redis_lua`);
- :mod:`joinlib.adapters.redis_client` -- Redis clients, key namespaces and their deletion;
- :mod:`joinlib.adapters.redis_checkpoint`, :mod:`joinlib.adapters.redis_outage` -- node checkpoints in Redis,
  riding out a Redis restart.
"""
