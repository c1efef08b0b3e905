-- `make demo`'s query in SQL (examples/routers_selective.yaml says the same but the SELECT list; docs/sql.md).  Three routers see
-- packet streams; find the packets with the same destination seen at all three within 3 s.  Full packet records
-- (1250 bytes) over 5,000 destination addresses: few packets match at the other routers, so a plan that ships
-- join values first and full packets only when they match ships a fraction of what sending every packet to one
-- site does.  rate, attributes, tuple_bytes and selectivity are the statistics the planner prices plans with.
--   joinlib gen examples/routers_selective.sql --out data/routers --duration 15s
--   joinlib run examples/routers_selective.sql --data data/routers --out rows.jsonl   (reads data/routers/S1.jsonl,
--   ...; writes a row per result: {"dest": ..., "id1": ..., "id2": ..., "id3": ..., "payload3": ..., "ids": ..., "ts": ...})

CREATE STREAM S1 (id BIGINT, ts BIGINT, dest VARCHAR)
  WITH (site = 'r1', rate = 100, attributes = 250, tuple_bytes = 1250, selectivity = 0.0002);
CREATE STREAM S2 (id BIGINT, ts BIGINT, dest VARCHAR)
  WITH (site = 'r2', rate = 100, attributes = 250, tuple_bytes = 1250, selectivity = 0.0002);
CREATE STREAM S3 (id BIGINT, ts BIGINT, dest VARCHAR, a0 VARCHAR)
  WITH (site = 'r3', rate = 100, attributes = 250, tuple_bytes = 1250, selectivity = 0.0002);

CREATE STREAM routers_selective
  WITH (latency = '25ms', bandwidth = '1024kbps', interval = '100ms', max_delay = '80ms') AS
  SELECT S1.dest, S1.id AS id1, S2.id AS id2, S3.id AS id3, S3.a0 AS payload3
  FROM S1
  JOIN S2 WITHIN 3 SECONDS ON S1.dest = S2.dest
  JOIN S3 WITHIN 3 SECONDS ON S2.dest = S3.dest
  EMIT CHANGES;
