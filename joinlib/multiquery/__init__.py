"""Multi-query planning with operator reuse over hierarchical network partitions (seed 001, issue 15).

Seshadri, Kumar, Cooper and Liu (IEEE TPDS 2009, "integrated planning and deployment", IFLOW) choose a
query's join order and the nodes of its operators *together*, over a hierarchy of network clusters of at
most ``maxcs`` nodes, and reuse the join operators earlier queries deployed (stream advertisements).

This package is the pure planning and simulation part: no I/O besides reading a topology file and writing
the experiment's output.  Modules, bottom to top:

- :mod:`.errors`      user mistakes (:class:`~joinlib.errors.JoinlibError` subclasses);
- :mod:`.topology`    nodes, links, shortest-path traversal costs, the seeded transit-stub generator, YAML;
- :mod:`.hierarchy`   clusters of at most ``maxcs`` nodes with one coordinator each, level by level;
- :mod:`.streams`     base streams, queries, canonical signatures, the rate model, the query generator;
- :mod:`.cost`        plans, deployments, advertisements and network usage (marginal and total);
- :mod:`.search`      Lemma 1, tree enumeration, tree DP placement, the subset DP, brute force;
- :mod:`.planners`    exhaustive / optimal, Top-Down, Bottom-Up, NPC (reconstructions), plan-then-deploy;
- :mod:`.experiment`  ``joinlib experiment iflow``; :mod:`.cli` registers it;
- :mod:`.execute`     a planner's plans as MJoin trees the runtime runs;
- :mod:`.deployed`    the running system's side: continuous queries' trees split into operator deployments,
  reused by key and kept while referenced (the planner service publishes them).

Nothing is imported here on purpose: the modules import each other, never the package.
docs/multiquery.md says what is the paper's and what is reconstructed.
"""
