"""The rate model of PMJoin (seed 002, Sect. 3.2): Eqs. (2)-(3) and their closed form for a set.

Eq. (2) λ_{i,j} = f·(λ_i·W_j + λ_j·W_i) and Eq. (3) W_{i,j} = f·W_i·W_j, applied recursively, give
for a set G of streams the closed form (independent of the join order, which is why a plan's cost
is the sum of the rates of the streams it ships):

    W_G = F_G · ∏_{i∈G} W_i          λ_G = F_G · Σ_{i∈G} λ_i ∏_{j≠i} W_j = W_G · Σ_{i∈G} c_i

with c_i = λ_i / W_i (= 1/T_i for a time window, λ_i/K_i for a tuple window). ``rate`` uses the last
form, so a stream (or substream) with no tuples needs no special case.

F_G, the combined selectivity of the predicates among G, is where implied equality edges bite:
S1.a = S2.a and S2.a = S3.a imply S1.a = S3.a, so {S1, S3} is a join, not a cross product, and
multiplying the three pairwise selectivities of {S1, S2, S3} would count the class twice. Two models
avoid that:

* :class:`SelectivityModel` - attribute equality classes with a selectivity f_i = 1/d_i per member
  (uniform values on nested domains): a class contributes ∏_{i∈G∩c} f_i / max_{i∈G∩c} f_i, i.e. the
  probability that |G∩c| tuples agree; two members give the usual min(f_i, f_j).
* :class:`ValueRateModel` - one class (a single-attribute PMJoin) with per-value rates λ_i^v (the
  FStreams): per value f = 1, so W_G = Σ_v ∏_{i∈G} W_i^v with W_i^v = λ_i^v·T_i. Summing per value
  is exact for any value distribution; this is the model of the paper's Example 1.

Costs are bytes per second: a shipped set costs λ_G times its tuple size, the sum of its members'
sizes (``same_size=False``, Example 1: a result carries every component) or one tuple
(``same_size=True``, Example 2 and the experiments: the paper counts tuples).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import numpy.typing as npt

from joinlib.errors import PlanError

Members = frozenset[int]  # indices into RateModel.streams
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StreamSpec:
    """One source stream as the rate model sees it: where it is born, how fast, its window.

    Exactly one of ``window_s`` (T, a time window) and ``window_tuples`` (K, a tuple window).
    ``rate`` is the whole stream's λ; a :class:`ValueRateModel` takes the per-value rates from its
    matrix and uses ``rate`` only for a tuple window's c = λ/K.
    """

    name: str
    node: str
    rate: float
    window_s: Optional[float] = None
    window_tuples: Optional[int] = None
    tuple_bytes: float = 1.0

    def __post_init__(self) -> None:
        if (self.window_s is None) == (self.window_tuples is None):
            raise PlanError(f"stream {self.name}: give exactly one of a time window (seconds) and a tuple window")
        if self.rate < 0 or not math.isfinite(self.rate):
            raise PlanError(f"stream {self.name}: rate {self.rate} must be a finite number >= 0")
        if (self.window_s is not None and self.window_s <= 0) or (self.window_tuples is not None
                                                                  and self.window_tuples <= 0):
            raise PlanError(f"stream {self.name}: the window must be positive")
        if self.tuple_bytes <= 0:
            raise PlanError(f"stream {self.name}: tuple_bytes must be positive")

    @property
    def window(self) -> float:
        """W: expected tuples in the window (K, or λ·T)."""
        if self.window_tuples is not None:
            return float(self.window_tuples)
        assert self.window_s is not None
        return self.rate * self.window_s

    @property
    def c(self) -> float:
        """λ / W, the rate a window's content turns over at (1/T, or λ/K)."""
        if self.window_s is not None:
            return 1.0 / self.window_s
        assert self.window_tuples is not None
        return self.rate / self.window_tuples


@dataclass(frozen=True)
class JoinClass:
    """An attribute equality class: every member joins every other (implied edges included).

    ``members`` pairs a stream index with its selectivity f_i = 1/(distinct values)."""

    name: str
    members: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        for i, f in self.members:
            if not 0.0 < f <= 1.0:
                raise PlanError(f"join class {self.name}: selectivity {f} of stream #{i} must be in (0, 1]")

    def streams(self) -> frozenset[int]:
        return frozenset(i for i, _ in self.members)

    def selectivity(self, g: Members) -> float:
        """F_c(G): the probability that the members of G in this class agree on the value."""
        fs = [f for i, f in self.members if i in g]
        if len(fs) < 2:
            return 1.0
        return math.prod(fs) / max(fs)


class RateModel(ABC):
    """Rates, windows and shipping costs of sets of streams; the input of the planners."""

    def __init__(self, streams: Sequence[StreamSpec], nodes: Iterable[str] = (), same_size: bool = False) -> None:
        if not streams:
            raise PlanError("a rate model needs at least one stream")
        names = [s.name for s in streams]
        if len(set(names)) != len(names):
            raise PlanError(f"stream names must be distinct: {names}")
        self.streams = tuple(streams)
        sites = list(dict.fromkeys(s.node for s in streams))
        self.nodes: tuple[str, ...] = tuple(sites + [n for n in dict.fromkeys(nodes) if n not in sites])
        self.same_size = same_size
        self._c = [s.c for s in self.streams]
        self._windows: dict[Members, float] = {}
        self._costs: dict[Members, float] = {}

    @property
    def all(self) -> Members:
        return frozenset(range(len(self.streams)))

    def index(self, name: str) -> int:
        for i, s in enumerate(self.streams):
            if s.name == name:
                return i
        raise PlanError(f"unknown stream {name!r} (streams: {', '.join(s.name for s in self.streams)})")

    def node_of(self, i: int) -> str:
        return self.streams[i].node

    def window(self, g: Members) -> float:
        """W_G (cached: the planners ask for the same sets many times)."""
        w = self._windows.get(g)
        if w is None:
            w = self._windows[g] = self._window(g)
        return w

    def rate(self, g: Members) -> float:
        """λ_G = W_G · Σ c_i (tuples per second)."""
        return self.window(g) * sum(self._c[i] for i in g)

    def tuple_bytes(self, g: Members) -> float:
        sizes = [self.streams[i].tuple_bytes for i in g]
        return max(sizes) if self.same_size else sum(sizes)

    def cost(self, g: Members) -> float:
        """Bytes per second of shipping the result stream of G once (cached)."""
        c = self._costs.get(g)
        if c is None:
            c = self._costs[g] = self.rate(g) * self.tuple_bytes(g)
        return c

    @abstractmethod
    def _window(self, g: Members) -> float: ...

    @abstractmethod
    def joinable(self, a: Members, b: Members) -> bool:
        """Whether a predicate (explicit or implied) connects a stream of ``a`` with one of ``b``."""


class SelectivityModel(RateModel):
    """Streams with rates and windows, predicates as attribute equality classes with selectivities."""

    def __init__(self, streams: Sequence[StreamSpec], classes: Sequence[JoinClass], nodes: Iterable[str] = (),
                 same_size: bool = False) -> None:
        super().__init__(streams, nodes, same_size)
        n = len(self.streams)
        for c in classes:
            if any(not 0 <= i < n for i, _ in c.members):
                raise PlanError(f"join class {c.name}: a member is not a stream of the model")
        self.classes = tuple(classes)
        self._neighbours = [frozenset(j for c in self.classes if i in c.streams() for j in c.streams() if j != i)
                            for i in range(n)]

    def _window(self, g: Members) -> float:
        w = math.prod(self.streams[i].window for i in g)
        return w * math.prod(c.selectivity(g) for c in self.classes)

    def joinable(self, a: Members, b: Members) -> bool:
        return any(self._neighbours[i] & b for i in a)


@dataclass(frozen=True)
class ValueRates:
    """Per-value rates λ_i^v (FStream rates) of the streams of a single-attribute join.

    ``rates[i][k]`` is the rate of stream ``streams[i]`` for value ``values[k]`` (tuples/s)."""

    streams: tuple[str, ...]
    values: tuple[object, ...]
    rates: tuple[tuple[float, ...], ...]
    attribute: str = "key"
    period_s: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if len(self.rates) != len(self.streams) or any(len(r) != len(self.values) for r in self.rates):
            raise PlanError("value rates: one row per stream and one column per value are needed")

    def matrix(self) -> FloatArray:
        return np.asarray(self.rates, dtype=np.float64).reshape(len(self.streams), len(self.values))

    def stream_rate(self, name: str) -> float:
        return float(sum(self.rates[self.streams.index(name)]))


class ValueRateModel(RateModel):
    """One equality class (every stream joins every other on one attribute) with per-value rates.

    ``lam`` is the (streams × values) matrix of λ_i^v. :meth:`group` restricts the model to a set of
    values: a PMJoin partition group, whose substreams have W_i^k = λ_i^k·T_i (pitfall 3).
    """

    def __init__(self, streams: Sequence[StreamSpec], lam: FloatArray, nodes: Iterable[str] = (),
                 same_size: bool = False) -> None:
        super().__init__(streams, nodes, same_size)
        lam = np.asarray(lam, dtype=np.float64)
        if lam.ndim != 2 or lam.shape[0] != len(self.streams):
            raise PlanError("value rates: expected a (streams × values) matrix")
        if lam.size and (not np.all(np.isfinite(lam)) or lam.min() < 0):
            raise PlanError("value rates must be finite and >= 0")
        self.lam = lam
        # W_i^v = λ_i^v / c_i: λ_i^v·T_i, or K_i·λ_i^v/λ_i -- in that order, not via c_i, which underflows
        # for a tuple window over a tiny rate (λ_i/K_i = 0, W = ∞, λ_G = ∞·0 = NaN)
        rows = [row * s.window_s if s.window_s is not None else
                (row / s.rate * float(s.window_tuples or 0) if s.rate > 0 else np.zeros_like(row))
                for s, row in zip(self.streams, lam, strict=True)]
        self.w: FloatArray = np.asarray(rows, dtype=np.float64).reshape(lam.shape)
        self._rows = [tuple(float(x) for x in row) for row in self.w] if lam.shape[1] <= 4 else None

    def _window(self, g: Members) -> float:
        if self._rows is not None:  # a handful of values: plain floats beat numpy's call overhead
            cols = zip(*(self._rows[i] for i in g), strict=True)
            return float(sum(math.prod(col) for col in cols))
        return float(np.prod(self.w[sorted(g)], axis=0).sum())

    def joinable(self, a: Members, b: Members) -> bool:
        return bool(a) and bool(b)

    def group(self, columns: Sequence[int]) -> ValueRateModel:
        """The model of the substreams of the values at ``columns`` (a partition group)."""
        return ValueRateModel(self.streams, self.lam[:, list(columns)], self.nodes, self.same_size)
