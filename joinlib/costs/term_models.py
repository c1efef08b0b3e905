"""The models that price the Appendix B terms of each step (:class:`~joinlib.costs.unit_time.TermModel`).

* :class:`PaperModel` — the six Appendix B formulas with the paper's constants
  c_p, c_u, c_h, c_i and S(x) = latency + x / bandwidth;
* :class:`BytesModel` — bytes per second crossing the network (no latency, no CPU);
* :class:`CalibratedModel` — the paper's formulas with measured constants, a
  per-byte encoding cost and optionally hash-indexed probes, loaded from JSON
  (:mod:`joinlib.costs.calibrate` measures them).

The formulas themselves are the algorithms' records' (:mod:`joinlib.algorithms`); these models only
say what a term is worth.  :func:`joinlib.costs.get_model` builds them by name.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Union

from joinlib.algorithms.terms import RawTerm, StepParams
from joinlib.costs.unit_time import TermModel, transfer_s
from joinlib.errors import JoinlibError
from joinlib.model import Query


class PaperModel(TermModel):
    """The six Appendix B formulas (seconds of processing + transmission per second).

    ``c_p`` per probe comparison (nested loop), ``c_u`` per window update, ``c_h`` per
    hash of a tuple, ``c_i`` per tuple insert, all in seconds.  The defaults are
    placeholders of the right order for a 2010 Java nested-loop engine, not
    measurements: calibrate (:class:`CalibratedModel`) before trusting absolute values.
    """

    name = "paper"

    def __init__(self, c_p: float = 1e-6, c_u: float = 5e-6, c_h: float = 1e-6, c_i: float = 5e-6) -> None:
        for k, v in (("c_p", c_p), ("c_u", c_u), ("c_h", c_h), ("c_i", c_i)):
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise JoinlibError(f"cost constant {k} must be a non-negative number, not {v!r}")
        self.c_p, self.c_u, self.c_h, self.c_i = float(c_p), float(c_u), float(c_h), float(c_i)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(c_p={self.c_p}, c_u={self.c_u}, c_h={self.c_h}, c_i={self.c_i})"

    def price(self, query: Query, p: StepParams, t: RawTerm) -> float:
        _, kind, qty, arg, arg2 = t
        if kind == "cpu":  # arg: the name of the constant
            const: float = getattr(self, str(arg))
            return qty * const
        if kind == "probe":  # arg: the size of the probed structure
            return qty * float(arg) * self.c_p
        src, dst = (p.src, p.dst) if arg == "fwd" else (p.dst, p.src)
        return qty * transfer_s(query, src, dst, arg2)


class BytesModel(TermModel):
    """Expected bytes per second over the network (same-site shipments are free)."""

    name = "bytes"

    def __repr__(self) -> str:
        return "BytesModel()"

    def price(self, query: Query, p: StepParams, t: RawTerm) -> float:
        if t[1] != "ship" or p.src == p.dst:
            return 0.0
        return t[2] * t[4]


CALIBRATION_KEYS = {"c_p", "c_u", "c_h", "c_i", "c_byte", "probe", "c_match"}


class CalibratedModel(PaperModel):
    """The Appendix B formulas with constants measured on this implementation.

    Adds to :class:`PaperModel`:

    * ``c_byte`` — seconds per shipped byte spent encoding + decoding (added to S(x));
    * ``probe`` — ``"nested"`` (the paper: a probe scans the structure, qty × size × c_p)
      or ``"hash"`` (a hash-indexed structure: qty × (c_p + c_match × matches));
    * ``c_match`` — seconds per produced match with hash probes (default c_p).

    :meth:`from_json` reads a JSON object with exactly these keys (see
    docs/cost-model.md); a ``"meta"`` object (machine, date, command) is kept as-is.
    """

    name = "calibrated"

    def __init__(self, c_p: float = 1e-6, c_u: float = 5e-6, c_h: float = 1e-6, c_i: float = 5e-6,
                 c_byte: float = 0.0, probe: str = "nested", c_match: Optional[float] = None,
                 meta: Optional[dict[str, Any]] = None) -> None:
        super().__init__(c_p, c_u, c_h, c_i)
        if probe not in ("nested", "hash"):
            raise JoinlibError(f"calibration: probe must be 'nested' or 'hash', not {probe!r}")
        if not (isinstance(c_byte, (int, float)) and c_byte >= 0):
            raise JoinlibError(f"calibration: c_byte must be a non-negative number, not {c_byte!r}")
        self.c_byte = float(c_byte)
        self.probe = probe
        self.c_match = self.c_p if c_match is None else float(c_match)
        self.meta = dict(meta or {})

    @classmethod
    def from_json(cls, path: Union[str, Path]) -> "CalibratedModel":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise JoinlibError(f"calibration file {path} not found") from None
        except json.JSONDecodeError as e:
            raise JoinlibError(f"calibration file {path} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise JoinlibError(f"calibration file {path}: expected a JSON object")
        unknown = set(data) - CALIBRATION_KEYS - {"meta"}
        if unknown:
            raise JoinlibError(f"calibration file {path}: unknown keys {', '.join(sorted(unknown))} "
                               f"(expected {', '.join(sorted(CALIBRATION_KEYS))}, meta)")
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        return {"c_p": self.c_p, "c_u": self.c_u, "c_h": self.c_h, "c_i": self.c_i,
                "c_byte": self.c_byte, "probe": self.probe, "c_match": self.c_match, "meta": self.meta}

    def __repr__(self) -> str:
        return (f"CalibratedModel(c_p={self.c_p}, c_u={self.c_u}, c_h={self.c_h}, c_i={self.c_i}, "
                f"c_byte={self.c_byte}, probe={self.probe!r}, c_match={self.c_match})")

    def price(self, query: Query, p: StepParams, t: RawTerm) -> float:
        _, kind, qty, arg, arg2 = t
        if kind == "probe" and self.probe == "hash":
            return qty * (self.c_p + self.c_match * arg2)
        value = super().price(query, p, t)
        if kind == "ship" and p.src != p.dst:
            value += qty * arg2 * self.c_byte
        return value


__all__ = ["PaperModel", "BytesModel", "CalibratedModel", "CALIBRATION_KEYS"]
