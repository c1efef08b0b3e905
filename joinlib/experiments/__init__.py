"""Reproductions of the experiments of Tran & Lee 2010, Sect. 5, on the embedded engine.

* :mod:`.fig7`   — the six one-way algorithms under the Fig. 7 parameter sweeps;
* :mod:`.table3` — greedy / beam vs exhaustive plans on random Table 2 queries
  (Table 3 and the Fig. 8 histogram);
* :mod:`.fig9`   — greedy vs exhaustive with identical parameters on every node;
* :mod:`.accuracy` — how well the cost models predict what the engine measures;
* :mod:`.common` — data generation with caching, steady-state measurement of a plan
  (:func:`~.common.measure`), summaries, correlations.

Commands (``joinlib experiment fig7|table3|fig9|accuracy``, ``joinlib stats``,
``joinlib calibrate``) are registered by :func:`.cli.add_commands`; see
``docs/experiments.md``.
"""
from joinlib.experiments.common import Measurement, measure, pearson, spearman, summarize

__all__ = ["Measurement", "measure", "pearson", "spearman", "summarize"]
