"""What the tests of a node's live inputs (joinlib.node.sources.LiveInputs: tests/property/test_ingest_run.py,
tests/unit/test_live_restore.py) build them from, without a broker."""
from __future__ import annotations

from joinlib.model import Query
from joinlib.query import parse_query


def two_stream_query(delta: int) -> Query:
    """Query "q": S1 at site a (topic t1) joined with S2 at site b (topic t2) on J, JSON sources with time field ts
    in ms and id field id, 1s windows, a 100ms interval and a max_delay of ``delta`` ms."""
    src = {"topic": "t1", "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id", "start": "earliest"}
    doc = {"streams": {"S1": {"site": "a", "window": "1s", "source": src},
                       "S2": {"site": "b", "window": "1s", "source": {**src, "topic": "t2"}}},
           "join": ["S1.J = S2.J"],
           "execution": {"interval": "100ms", "max_delay": f"{delta}ms", "idle_timeout": "1h"}}
    return parse_query(doc, "q")
