"""Partition functions: one join value -> one partition id in [0, D).

One function is shared by every stream of a PMJoin (pitfall 1): tuples of different streams that
join must land in the same partition group, so the function is a value object carried by the plan,
never rebuilt per stream. Each maps *every* value, seen or not, deterministically:

* :class:`HashPartition` - a keyed BLAKE2b digest of the value mod D (not Python's ``hash``, which
  is salted per process for strings);
* :class:`RangePartition` - D contiguous sub-ranges given by D-1 cut points (monotone in the value
  order below);
* :class:`MapPartition` - an explicit value -> partition map (what rate-based partitioning builds,
  :mod:`.ratepart`) with a hash partition as the default for values the statistics never saw.

Values are what a join compares: JSON scalars. Values equal under the join's (Python) equality map
to the same partition: ``1``, ``1.0`` and ``True`` are one value. The order of :func:`order_key`:
None < booleans and numbers (by numeric value) < strings.
"""
from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Union

from joinlib.errors import PlanError

Value = Any  # a JSON scalar: str, int, float, bool or None


def canonical(v: Value) -> bytes:
    """Bytes identifying a value up to the join's equality (1 == 1.0 == True)."""
    if v is None:
        return b"n"
    if isinstance(v, (bool, int)):
        return b"i" + str(int(v)).encode()
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer():
            return b"i" + str(int(v)).encode()
        return b"f" + repr(v).encode()
    if isinstance(v, str):
        return b"s" + v.encode("utf-8", "surrogatepass")
    raise PlanError(f"join value {v!r} of type {type(v).__name__}: partition functions take JSON scalars "
                    "(string, number, boolean, null)")


def order_key(v: Value) -> tuple[int, Any]:
    """A total order over JSON scalars: None, then numbers, then strings (NaN sorts as +inf)."""
    if v is None:
        return (0, 0)
    if isinstance(v, (bool, int, float)):
        x = float(v) if not isinstance(v, int) else v
        return (1, math.inf if isinstance(x, float) and math.isnan(x) else x)
    if isinstance(v, str):
        return (2, v)
    canonical(v)  # raises the error that explains the accepted types
    raise AssertionError


def _check_d(d: int) -> None:
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise PlanError(f"the number of partitions D must be an integer >= 1, not {d!r}")


@dataclass(frozen=True)
class HashPartition:
    """pid = BLAKE2b_seed(value) mod D: a random partitioning that is stable across processes."""

    d: int
    seed: int = 0

    def __post_init__(self) -> None:
        _check_d(self.d)

    def __call__(self, v: Value) -> int:
        h = hashlib.blake2b(canonical(v), digest_size=8, key=self.seed.to_bytes(8, "big", signed=True))
        return int.from_bytes(h.digest(), "big") % self.d

    def to_json(self) -> dict[str, Any]:
        return {"kind": "hash", "d": self.d, "seed": self.seed}


@dataclass(frozen=True)
class RangePartition:
    """pid = the number of cut points <= the value: D = len(cuts) + 1 contiguous sub-ranges."""

    cuts: tuple[Value, ...]
    _keys: tuple[tuple[int, Any], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = tuple(order_key(c) for c in self.cuts)
        if any(a >= b for a, b in pairwise(keys)):
            raise PlanError(f"range partition: the cut points must increase strictly, got {list(self.cuts)[:8]}")
        object.__setattr__(self, "_keys", keys)

    @property
    def d(self) -> int:
        return len(self.cuts) + 1

    def __call__(self, v: Value) -> int:
        return bisect_right(self._keys, order_key(v))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "range", "d": self.d, "cuts": list(self.cuts)}

    @classmethod
    def equal_width(cls, lo: float, hi: float, d: int) -> RangePartition:
        """D sub-ranges of equal width over the integers lo..hi (the paper's data range)."""
        _check_d(d)
        if not lo <= hi:
            raise PlanError(f"range partition: the data range {lo}..{hi} is empty")
        width = (hi - lo + 1) / d
        cuts = [lo + k * width for k in range(1, d)]
        return cls(tuple(int(c) if float(c).is_integer() else c for c in cuts))

    @classmethod
    def from_values(cls, values: Any, d: int) -> RangePartition:
        """D sub-ranges with (about) equally many of the distinct ``values`` each: for values that are
        not numbers, or whose range is unknown."""
        _check_d(d)
        distinct = sorted({canonical(v): v for v in values}.values(), key=order_key)
        cuts = [distinct[(k * len(distinct)) // d] for k in range(1, d) if (k * len(distinct)) // d > 0]
        return cls(tuple(dict.fromkeys(cuts)))  # fewer distinct values than D: fewer sub-ranges


@dataclass(frozen=True)
class MapPartition:
    """An explicit value -> pid map; ``default`` places the values it does not list."""

    d: int
    assignment: tuple[tuple[Value, int], ...]
    default: HashPartition
    _map: dict[bytes, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_d(self.d)
        if self.default.d != self.d:
            raise PlanError(f"map partition: the default has D = {self.default.d}, the map D = {self.d}")
        m: dict[bytes, int] = {}
        for v, pid in self.assignment:
            if not 0 <= pid < self.d:
                raise PlanError(f"map partition: value {v!r} -> {pid} is outside [0, {self.d})")
            if m.setdefault(canonical(v), pid) != pid:
                raise PlanError(f"map partition: value {v!r} is mapped twice")
        object.__setattr__(self, "_map", m)

    def __call__(self, v: Value) -> int:
        pid = self._map.get(canonical(v))
        return self.default(v) if pid is None else pid

    def to_json(self) -> dict[str, Any]:
        return {"kind": "map", "d": self.d, "map": [[v, p] for v, p in self.assignment],
                "default": self.default.to_json()}


PartitionFunction = Union[HashPartition, RangePartition, MapPartition]


def from_json(obj: Any) -> PartitionFunction:
    """The inverse of ``to_json``; a malformed object is a :class:`PlanError` that says what is expected."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    try:
        if kind == "hash":
            return HashPartition(int(obj["d"]), int(obj.get("seed", 0)))
        if kind == "range":
            return RangePartition(tuple(obj["cuts"]))
        if kind == "map":
            return MapPartition(int(obj["d"]), tuple((v, int(p)) for v, p in obj["map"]),
                                HashPartition(int(obj["d"]), int(obj["default"].get("seed", 0))))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PlanError(f"partition function {obj!r:.80}: malformed ({e})") from None
    raise PlanError(f"partition function {obj!r:.80}: expected {{\"kind\": \"hash\" | \"range\" | \"map\", ...}}")
