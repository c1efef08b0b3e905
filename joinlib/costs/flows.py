"""Expected messages per epoch of every flow of a plan: the arithmetic of the byte model.

Per epoch (one batch interval τ), with b_X = r_X·τ the batch of stream X, w_X its window in
tuples and L_X the number of epochs a tuple stays in the window view (T_X/τ + 1):

* the **intermediate stream** entering a step (:class:`Inter`) has ``rows`` rows per epoch
  (r_new = r_old × w_next × ρ, as in the paper) and ``heads``: head tuples of the epoch with at
  least one row;
* a row finds a partner in the next stream N with probability ``p = 1 − (1 − ρ)^w_N``
  (uniform keys: the semijoin's pass-through fraction);
* the distinct probe keys of an epoch are ``d·(1 − (1 − 1/d)^n)`` for n key draws over d = 1/f
  values, where n is ``heads`` when the probed key is the head's own (every row of a head tuple
  carries its key) and ``rows`` otherwise;
* a tuple of N shipped by a semijoin (SM-S1's ΔW'_2) is shipped once per replica: with the
  requests of every step sharing the replica, a tuple is requested during its L_N epochs with
  probability ``q = 1 − Π (1 − ρ_i)^(n_i·L_N)``;
* DJA replicas (SM-S2, SM-D1) receive every epoch the new distinct values v_J, the count vector
  v_C of all distinct values in the window, and (SM-S2) s_F, the new tuples of keys held in full.

:func:`step_flows` and :func:`replica_flows` turn these into :class:`Msg` items, the expected
content of one message per flow and epoch; :mod:`joinlib.costs.model` prices them with
:class:`~joinlib.costs.encoding.Encoding`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..cost import SeqState, interval_s, selectivity, stream_rate, window_tuples
from ..model import Query

#: flows of each algorithm across sites: (name, direction, kind); fwd = intermediate's site -> N's site
ALG_FLOWS = {
    "SP-S": (),
    "SP-D": (("data", "fwd", "full"),),
    "SM-S1": (("req", "fwd", "partial"), ("resp", "back", "full")),
    "SM-S2": (("req", "fwd", "partial"), ("resp", "back", "full")),
    "SM-D1": (("data", "fwd", "full"),),
    "SM-D2": (("keys", "fwd", "partial"), ("match", "back", "partial"), ("data", "fwd", "full")),
}
#: the replica an algorithm keeps at the intermediate's site when it crosses sites
REPLICA = {"SP-S": "SP-S", "SM-S1": "SM-S1", "SM-S2": "SM-S2", "SM-D1": "SM-D1"}


def presence(rho: float, n: float) -> float:
    """P(at least one of ``n`` independent trials of probability ``rho`` succeeds)."""
    if n <= 0 or rho <= 0:
        return 0.0
    if rho >= 1:
        return min(1.0, n)
    return -math.expm1(n * math.log1p(-rho))


def distinct(n: float, d: float) -> float:
    """Expected distinct values among ``n`` uniform draws over ``d`` values."""
    if n <= 0:
        return 0.0
    if d <= 1:
        return min(1.0, n)
    return d * -math.expm1(n * math.log1p(-1.0 / d))


@dataclass(frozen=True)
class Inter:
    """The intermediate stream entering a step, per epoch."""

    state: SeqState
    rows: float
    heads: float

    @classmethod
    def start(cls, query: Query, head: str, site: Optional[str] = None) -> "Inter":
        s = SeqState.start(query, head, site)
        b = stream_rate(query.stream(head)) * interval_s(query)
        return cls(s, b, b)


@dataclass(frozen=True)
class Probe:
    """What one step's rows ask of the next stream N, per epoch."""

    stream: str
    index: tuple[int, ...]   # positions of N's probed attributes in its join_attrs
    rho: float               # P(a row matches a given tuple of N)
    p: float                 # P(a row, or a probe key, finds a partner in N's window)
    draws: float             # independent key draws among the rows
    keys: float              # distinct probe keys
    rows: float              # rows
    parts: tuple[str, ...]   # the streams of a row


def probe(query: Query, inter: Inter, stream: str) -> Probe:
    info = inter.state.info(query, stream)
    n = query.stream(stream)
    head_keyed = any((inter.state.head, a) in ln.cls.attrs for ln in info.links
                     for a in query.stream(inter.state.head).join_attrs)
    draws = inter.heads if head_keyed else inter.rows
    index = tuple(n.attr_index(a) for a in info.key_attrs)
    return Probe(stream, index, info.rho, presence(info.rho, window_tuples(n)), draws,
                 distinct(draws, 1.0 / info.f1), inter.rows, inter.state.joined)


def advance(query: Query, inter: Inter, stream: str, algorithm: str, pr: Optional[Probe] = None) -> Inter:
    """The intermediate after joining ``stream``."""
    pr = pr or probe(query, inter, stream)
    state = inter.state.advance(query, stream, algorithm)
    rows = inter.rows * window_tuples(query.stream(stream)) * pr.rho
    return Inter(state, rows, min(inter.heads * pr.p, rows))


@dataclass(frozen=True)
class Msg:
    """The expected content of one message per epoch on a flow: ``what`` is ``rows`` (a full-tuple
    message of ``n`` rows of ``parts``), ``keys`` (``n`` keys of ``stream`` on ``index``), ``expiry``
    (count ``n``, ``extra`` arrival timestamps) or ``dja`` (``n`` new values, ``extra`` =
    (entries of v_C, their typical count, s_F tuples, arrivals))."""

    name: str
    direction: str
    kind: str
    what: str
    n: float
    stream: str = ""
    index: tuple[int, ...] = ()
    parts: tuple[str, ...] = ()
    extra: tuple[float, ...] = ()


def step_flows(query: Query, algorithm: str, pr: Probe, share: float) -> list[Msg]:
    """The messages of a cross-site step per epoch; ``share``: this step's part of what its
    (shared) replica ships in answers (SM-S1, SM-S2), see :func:`replica_flows`."""
    n = pr.stream
    if algorithm == "SP-D":
        return [Msg("data", "fwd", "full", "rows", pr.rows, parts=pr.parts)]
    if algorithm == "SM-S1":
        return [Msg("req", "fwd", "partial", "keys", pr.keys, n, pr.index),
                Msg("resp", "back", "full", "rows", share, parts=(n,))]
    if algorithm == "SM-S2":  # share: the keys this step requests
        return [Msg("req", "fwd", "partial", "keys", share, n, pr.index),
                Msg("resp", "back", "full", "rows", share * _window_keys(query, n, pr.index)[1], parts=(n,))]
    if algorithm == "SM-D1":
        return [Msg("data", "fwd", "full", "rows", pr.rows * pr.p, parts=pr.parts)]
    if algorithm == "SM-D2":
        return [Msg("keys", "fwd", "partial", "keys", pr.keys, n, pr.index),
                Msg("match", "back", "partial", "keys", pr.keys * pr.p, n, pr.index),
                Msg("data", "fwd", "full", "rows", pr.rows * pr.p, parts=pr.parts)]
    return []


def _key_f(query: Query, stream: str, index: tuple[int, ...]) -> float:
    s = query.stream(stream)
    return math.prod(selectivity(s, s.join_attrs[i]) for i in index) if index else 1.0


def _lifetime(query: Query, stream: str) -> float:
    """L: epochs a tuple stays in the window view (T/τ + 1; w/b + 1 for tuple windows)."""
    s = query.stream(stream)
    tau = interval_s(query)
    if s.window.is_time:
        return s.window.size / 1000.0 / tau + 1
    b = stream_rate(s) * tau
    return (s.window.size / b if b > 0 else 0.0) + 1


def _window_keys(query: Query, stream: str, index: tuple[int, ...]) -> tuple[float, float, float]:
    """(distinct values in N's window, their mean count, new values per batch)."""
    s = query.stream(stream)
    d = 1.0 / _key_f(query, stream, index)
    w, b = window_tuples(s), stream_rate(s) * interval_s(query)
    entries = distinct(w, d)
    new = distinct(b, d) * (1.0 - presence(1.0 / d, w))
    return entries, (w / entries if entries > 0 else 0.0), new


def requested(query: Query, stream: str, probes: list[Probe]) -> float:
    """q: P(a tuple of ``stream`` is asked for by one of ``probes`` while in the window)."""
    life = _lifetime(query, stream)
    miss = 1.0
    for pr in probes:
        miss *= 1.0 - presence(pr.rho, pr.draws * life)
    return 1.0 - miss


def replica_flows(query: Query, kind: str, stream: str, index: tuple[int, ...],
                  probes: list[Probe]) -> tuple[Msg, list[float]]:
    """The update message of a replica per epoch and each requester's share of the answers
    (SM-S1: tuples shipped; SM-S2: keys requested)."""
    s = query.stream(stream)
    b = stream_rate(s) * interval_s(query)
    arrivals = 0.0 if s.window.is_time else b
    weights = [pr.draws * pr.rho for pr in probes]
    total_w = sum(weights)
    shares = [w / total_w if total_w > 0 else 1.0 / max(1, len(probes)) for w in weights]
    if kind == "SP-S":
        return Msg("update", "back", "full", "rows", b, parts=(stream,)), [0.0] * len(probes)
    q = requested(query, stream, probes)
    if kind == "SM-S1":
        shipped = b * q
        return Msg("update", "back", "update", "expiry", shipped, extra=(arrivals,)), [shipped * x for x in shares]
    entries, count, new = _window_keys(query, stream, index)
    if kind == "SM-S2":
        full = b * q * presence(_key_f(query, stream, index), window_tuples(s))
        req = new * q
        msg = Msg("update", "back", "update", "dja", new, stream, index, extra=(entries, count, full, arrivals))
        return msg, [req * x for x in shares]
    msg = Msg("update", "back", "update", "dja", new, stream, index, extra=(entries, count, 0.0, arrivals))
    return msg, [0.0] * len(probes)
