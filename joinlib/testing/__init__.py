"""Testing joins: the tools the project's own tests use, for users who test their own plans (as bytewax's
``testing`` module does for dataflows).

- :func:`reference_join` (from :mod:`joinlib.reference`): the centralized, deliberately naive join every plan
  must match; a multiset of (ids by stream position, head ts).
- :class:`TestingSource`: a query's streams built in memory from rows; :class:`TestingSink`: keeps the results
  of a run in the reference join's form.
- :func:`run_plan`, :func:`assert_exact`, :func:`assert_same`: run a plan embedded and check its results against
  the reference join (each once, none missing).
- :mod:`joinlib.testing.strategies`: hypothesis strategies of random queries, streams and plans. Import it
  explicitly: hypothesis is a test dependency, and ``import joinlib.testing`` works without it.

>>> from joinlib.plan.logical import uniform
>>> from joinlib.query import parse_query
>>> q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
...     "A": {"site": "n1", "window": "1s"}, "B": {"site": "n2", "window": "1s"}}})
>>> streams = TestingSource(q, {"A": [{"ts": 10, "k": 1}], "B": [{"ts": 20, "k": 1}, {"ts": 30, "k": 2}]}).streams()
>>> reference_join(q, streams)
Counter({((0, 0), 20): 1})
>>> assert_exact(q, streams, uniform(q, "SP-S"))

docs/testing.md shows a property test of a plan of one's own.
"""
from joinlib.reference import Result, reference_join
from joinlib.testing.exact import assert_exact, assert_same, run_plan
from joinlib.testing.sink import TestingSink
from joinlib.testing.source import Row, TestingSource

__all__ = ["Result", "Row", "TestingSink", "TestingSource", "assert_exact", "assert_same", "reference_join",
           "run_plan"]
