-- The routers query on live Kafka topics, in SQL (examples/routers_live.yaml says the same with results as ids):
-- each router writes one JSON event per forwarded packet to its own topic, e.g.
--   {"id": 17, "ts": 1714000000123, "dest": "10.0.1.44", "payload": "..."}
-- and the query finds the packets with the same destination seen at all three routers within 3 s (200 packets/s
-- per router over 2,000 destinations: about 50 results/s).  Each result is a row on the topic matches.routers:
--   {"dest": "10.0.1.44", "id1": 17, "id2": 903, "id3": 4410, "ids": {"S1": 17, "S2": 903, "S3": 4410}, "ts": ...}
-- Only the join attribute (dest) travels besides ids and times: the SELECT list names no other field.
-- `make live-demo` runs it (docs/live.md); `python -m services.generator --query this file` writes such events.

CREATE STREAM S1 (id BIGINT, ts BIGINT, dest VARCHAR, payload VARCHAR)
  WITH (site = 'r1', rate = 200, tuple_bytes = 1030, selectivity = 0.0005,
        topic = 'events.r1', timestamp = 'ts', id = 'id');
CREATE STREAM S2 (id BIGINT, ts BIGINT, dest VARCHAR, payload VARCHAR)
  WITH (site = 'r2', rate = 200, tuple_bytes = 1030, selectivity = 0.0005,
        topic = 'events.r2', timestamp = 'ts', id = 'id');
CREATE STREAM S3 (id BIGINT, ts BIGINT, dest VARCHAR, payload VARCHAR)
  WITH (site = 'r3', rate = 200, tuple_bytes = 1030, selectivity = 0.0005,
        topic = 'events.r3', timestamp = 'ts', id = 'id');

CREATE STREAM routers_live
  WITH (topic = 'matches.routers', format = 'json',
        latency = '25ms', bandwidth = '1024kbps', interval = '100ms', max_delay = '80ms', idle_timeout = '2s') AS
  SELECT S1.dest, S1.id AS id1, S2.id AS id2, S3.id AS id3
  FROM S1
  JOIN S2 WITHIN 3 SECONDS ON S1.dest = S2.dest
  JOIN S3 WITHIN 3 SECONDS ON S2.dest = S3.dest
  EMIT CHANGES;
