"""PMJoin (seed 002, Zhou et al.): distributed multi-way stream joins by stream partitioning.

When join values are distributed differently at different sites, one plan for the whole stream is
far from optimal; PMJoin splits every stream by join value into D partition groups and optimises a
plan per group. This package is the model and the planning (docs/pmjoin.md). The runtime
(``joinlib.plan.partitioned``) routes tuples with these partition functions, but does not execute the
MJoin trees planned here.

* :mod:`.rates` - the rate model (Eqs. 2-3, the closed form for a set, implied equality edges);
* :mod:`.tree` - MJoin trees placed on nodes, their cost and JSON;
* :mod:`.streamjoinopt` - STREAMJOINOPT (Algorithm 1); :mod:`.exhaustive` - Optimal and Simple;
* :mod:`.partition`, :mod:`.ratepart` - hash, range and rate-based partition functions;
* :mod:`.findpartition` - FINDPARTITION (Algorithm 2) for joins on different attributes;
* :mod:`.plan` - :class:`PMJoinPlan`; :mod:`.stats` - per-value rates from data, models from queries;
* :mod:`.workload`, :mod:`.experiment`, :mod:`.figures`, :mod:`.cli` - ``joinlib experiment pmjoin``.
"""
from joinlib.plan.partition import HashPartition, MapPartition, PartitionFunction, RangePartition
from joinlib.pmjoin.exhaustive import central_tree, optimal, simple
from joinlib.pmjoin.findpartition import PMJoinCandidate, find_partitions, select_pmjoins
from joinlib.pmjoin.plan import GroupPlan, PMJoinPlan, plan_pmjoin
from joinlib.pmjoin.ratepart import rate_partition
from joinlib.pmjoin.rates import JoinClass, RateModel, SelectivityModel, StreamSpec, ValueRateModel, ValueRates
from joinlib.pmjoin.stats import selectivity_model, value_model, value_rates
from joinlib.pmjoin.streamjoinopt import stream_join_opt
from joinlib.pmjoin.tree import Leaf, MJoin, Tree, tree_cost

__all__ = ["GroupPlan", "HashPartition", "JoinClass", "Leaf", "MJoin", "MapPartition", "PMJoinCandidate",
           "PMJoinPlan", "PartitionFunction", "RangePartition", "RateModel", "SelectivityModel", "StreamSpec",
           "Tree", "ValueRateModel", "ValueRates", "central_tree", "find_partitions", "optimal", "tree_cost",
           "plan_pmjoin", "rate_partition", "select_pmjoins", "selectivity_model", "simple", "stream_join_opt",
           "value_model", "value_rates"]
