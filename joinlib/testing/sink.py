"""A testing sink: keeps every result so that a test can compare them, as a multiset, with the reference join's."""
from __future__ import annotations

from collections import Counter

from joinlib.reference import Result
from joinlib.runtime.sink import CollectingSink


class TestingSink(CollectingSink):
    """A :class:`~joinlib.runtime.sink.CollectingSink` (``results``: ids by stream position, head ts, emit time)
    that also gives its results in :func:`~joinlib.reference.reference_join`'s form.

    >>> from joinlib.query import parse_query
    >>> from joinlib.plan.logical import central
    >>> from joinlib.sim.engine import run_embedded
    >>> from joinlib.testing import TestingSource
    >>> q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
    ...     "A": {"site": "n1", "window": "100ms"}, "B": {"site": "n2", "window": "100ms"}}})
    >>> streams = TestingSource(q, {"A": [{"ts": 5, "k": "x"}], "B": [{"ts": 9, "k": "x"}]}).streams()
    >>> sink = TestingSink(q)
    >>> _ = run_embedded(q, streams, central(q, "n1"), sink)
    >>> sink.counts()
    Counter({((0, 0), 9): 1})
    """

    __test__ = False  # not a pytest test class, whatever its name

    def counts(self) -> Counter[Result]:
        """Each result's (ids by stream position, head ts) and how often it was emitted (once, if exact)."""
        return Counter((ids, ts) for ids, ts, _ in self.results)
