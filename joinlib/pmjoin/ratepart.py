"""Rate-based partitioning (seed 002, Sect. 3.3): group values whose FStreams rank alike.

For each value v the FStreams FS_1^v .. FS_n^v (the tuples of each stream with value v) are sorted by
increasing rate and V_v[i] is the 1-based position of FS_i^v in that list: the paper's
<FS_3, FS_1, FS_2> gives V = <2, 3, 1>. Values with similar vectors tend to have similar optimal plans,
so k-means over the vectors puts them in one of D partitions.

Determinism, and what the paper leaves open ([impl]):
* rate ties in the ranking are broken by stream order (the earlier stream ranks lower);
* k-means runs on the distinct vectors weighted by how many values share each, the best of four
  k-means++ starts drawn with ``random.Random(seed)`` over the vectors in lexicographic order; an assignment tie goes
  to the lower cluster; an emptied cluster is reseeded with the farthest vector;
* many values share one vector when the streams have similar distributions (the paper's Fig. 8(a):
  with more than two partitions k-means then "randomly places them"). Here, when there are fewer
  distinct vectors than D, the remaining partitions split the cluster with the largest total rate
  in two by the values' total rate (fast values and slow ones), until D partitions or one value each;
* partitions are numbered by their smallest value (:func:`.partition.order_key`); values not in the
  statistics go to ``HashPartition(D, seed)``.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from joinlib.plan.partition import HashPartition, MapPartition, Value, order_key
from joinlib.pmjoin.rates import FloatArray, ValueRates

MAX_ITERATIONS = 100
RESTARTS = 4


def rank_vectors(lam: FloatArray) -> FloatArray:
    """(values × streams) V: V[v, i] = 1-based rank of stream i's rate for value v (ties: stream order)."""
    n_streams, n_values = lam.shape
    order = np.argsort(lam.T, axis=1, kind="stable")  # per value: streams by increasing rate
    ranks = np.empty((n_values, n_streams), dtype=np.float64)
    rows = np.arange(n_values)[:, None]
    ranks[rows, order] = np.arange(1, n_streams + 1, dtype=np.float64)[None, :]
    return ranks


def _plus_plus(points: FloatArray, weights: FloatArray, k: int, rng: random.Random) -> FloatArray:
    """k-means++ seeding, O(k·n): each next centre drawn with probability ∝ weight × squared distance."""
    idx = [rng.choices(range(len(points)), weights=list(weights))[0]]
    d2 = ((points - points[idx[0]]) ** 2).sum(axis=1)
    while len(idx) < k:
        p = d2 * weights
        if p.sum() <= 0:
            break
        idx.append(rng.choices(range(len(points)), weights=list(p))[0])
        d2 = np.minimum(d2, ((points - points[idx[-1]]) ** 2).sum(axis=1))
    return points[idx].copy()


def kmeans(points: FloatArray, weights: FloatArray, k: int, seed: int, restarts: int = RESTARTS) -> list[int]:
    """The cluster (0..k-1) of each point: the best (least weighted squared error) of ``restarts``
    k-means++ starts drawn from ``random.Random(seed)``; deterministic for a seed."""
    if k >= len(points):
        return list(range(len(points)))
    rng = random.Random(seed)
    best: tuple[float, list[int]] = (float("inf"), [])
    for _ in range(restarts):
        assign = _lloyd(points, weights, _plus_plus(points, weights, k, rng))
        centres = np.zeros((k, points.shape[1]))
        np.add.at(centres, assign, points * weights[:, None])
        centres /= np.maximum(np.bincount(assign, weights=weights, minlength=k), 1e-300)[:, None]
        sse = float((((points - centres[assign]) ** 2).sum(axis=1) * weights).sum())
        if sse < best[0] - 1e-9:
            best = (sse, [int(a) for a in assign])
    return best[1]


def _lloyd(points: FloatArray, weights: FloatArray, centres: FloatArray) -> npt.NDArray[np.int64]:
    assign = np.full(len(points), -1, dtype=np.int64)
    for _ in range(MAX_ITERATIONS):
        d2 = (points ** 2).sum(axis=1)[:, None] - 2 * points @ centres.T + (centres ** 2).sum(axis=1)[None, :]
        new = np.argmin(np.round(d2, 9), axis=1)  # first minimum: ties to the lower cluster
        if np.array_equal(new, assign):
            break
        assign = new
        centres = _centres(points, weights, assign, centres, d2)
    return assign


def _centres(points: FloatArray, weights: FloatArray, assign: npt.NDArray[np.int64], old: FloatArray,
             d2: FloatArray) -> FloatArray:
    """Weighted means; an emptied cluster is reseeded with the point farthest from its centre."""
    k = len(old)
    sums = np.zeros_like(old)
    np.add.at(sums, assign, points * weights[:, None])
    wsum = np.bincount(assign, weights=weights, minlength=k)
    out: FloatArray = np.where(wsum[:, None] > 0, sums / np.maximum(wsum, 1e-300)[:, None], old)
    empty = np.flatnonzero(wsum == 0)
    if empty.size:
        far = np.argsort(-d2[np.arange(len(points)), assign], kind="stable")
        out[empty] = points[far[:empty.size]]
    return out


def _split_to(groups: list[list[int]], d: int, total: FloatArray, values: Sequence[Value]) -> list[list[int]]:
    """Split the heaviest multi-value group by total rate until there are ``d`` groups."""
    groups = [g for g in groups if g]
    while len(groups) < d:
        splittable = [g for g in groups if len(g) > 1]
        if not splittable:
            break
        g = max(splittable, key=lambda g: (float(total[g].sum()), -min(g)))
        groups.remove(g)
        by_rate = sorted(g, key=lambda v: (-float(total[v]), order_key(values[v])))
        half = len(by_rate) // 2
        groups += [by_rate[:half], by_rate[half:]]
    return groups


def rate_partition(stats: ValueRates, d: int, seed: int = 0) -> MapPartition:
    """The rate-based partition function of ``stats`` into ``d`` partitions."""
    default = HashPartition(d, seed)
    lam = stats.matrix()
    values = stats.values
    if not values:
        return MapPartition(d, (), default)
    ranks = rank_vectors(lam)
    distinct, inverse, counts = np.unique(ranks, axis=0, return_inverse=True, return_counts=True)
    clusters = kmeans(distinct, counts.astype(np.float64), min(d, len(distinct)), seed)
    groups: list[list[int]] = [[] for _ in range(max(clusters) + 1)]
    for v, u in enumerate(np.asarray(inverse).reshape(-1)):
        groups[clusters[int(u)]].append(v)
    groups = _split_to(groups, d, lam.sum(axis=0), values)
    groups.sort(key=lambda g: min(order_key(values[v]) for v in g))
    assignment = tuple((values[v], pid) for pid, g in enumerate(groups) for v in sorted(g))
    return MapPartition(d, assignment, default)
