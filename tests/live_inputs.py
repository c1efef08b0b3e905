"""What the tests of a node's live inputs (joinlib.node.sources.LiveInputs: tests/property/test_ingest_run.py,
tests/unit/test_live_restore.py) build them from, without a broker."""
from __future__ import annotations

import json
from typing import Optional

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


class Record:
    """A JSON record of topic t1, partition 0, as the consumer hands it over: ``{"id", "ts", "J"}`` (id: ``id_``, or
    100 + the offset; J: the id modulo 3)."""

    def __init__(self, offset: int, ts: int, id_: Optional[int] = None) -> None:
        id_ = 100 + offset if id_ is None else id_
        self._offset, self._value = offset, json.dumps({"id": id_, "ts": ts, "J": id_ % 3}).encode()

    def topic(self) -> str:
        return "t1"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None
