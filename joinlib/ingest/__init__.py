"""Live sources, the pure part: records of a user's topic -> tuples of a stream, with watermarks.

* :mod:`.records`: a record's bytes (JSON, or Avro in the Confluent wire format) -> an event
  (time from the query's origin, id, join key, payload) or why it is malformed;
* :mod:`.stream`: per partition, watermarks and lateness; per stream, the on-time records below its
  watermark in (ts, id) order with their ranks (``Tup.seq``), idle advances, checkpoints;
* :mod:`.status`: what ``joinlib queries`` shows, from the nodes' status messages.

Kafka, dead-letter topics and the advance log are the adapter's (:mod:`joinlib.node.sources`);
docs/live.md states the rules.
"""
from joinlib.ingest.records import REASONS, Bad, Decoder, Event, derived_id
from joinlib.ingest.stream import Advance, StreamIngest

__all__ = ["REASONS", "Advance", "Bad", "Decoder", "Event", "StreamIngest", "derived_id"]
