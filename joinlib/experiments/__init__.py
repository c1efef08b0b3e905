"""Reproductions of the experiments of Tran & Lee 2010, Sect. 5, on the embedded engine.

* :mod:`.fig7`   — the six one-way algorithms under the Fig. 7 parameter sweeps;
* :mod:`.table3` — greedy / beam vs exhaustive plans on random Table 2 queries
  (Table 3 and the Fig. 8 histogram);
* :mod:`.fig9`   — greedy vs exhaustive with identical parameters on every node;
* :mod:`.accuracy` — how well the cost models predict what the engine measures;
* :mod:`.common` — queries, warm-ups, data generation with caching;
* :mod:`.measure` — steady-state measurement of a plan (:func:`~.measure.measure`);
* :mod:`.estimates` — the cost models' estimates, summaries, correlations;
* :mod:`.output` — JSON records, figures, progress bars.

Commands (``joinlib experiment fig7|table3|fig9|accuracy``, ``joinlib stats``,
``joinlib calibrate``) are registered by :func:`joinlib.cli.experiments.add_commands`; see
``docs/experiments.md``.
"""
from joinlib.experiments.estimates import pearson, spearman, summarize
from joinlib.experiments.measure import Measurement, measure

__all__ = ["Measurement", "measure", "pearson", "spearman", "summarize"]
