"""Algorithm names (as the CLI and the experiment spell them) -> constructors."""
from __future__ import annotations

from typing import Optional

from joinlib.progressive.base import ProgressiveJoin
from joinlib.progressive.hmj import HMJ, POLICIES
from joinlib.progressive.model import JoinSpec, PairSink, SpecError, VirtualClock
from joinlib.progressive.rpj import RPJ, RPJdd, RPJmd
from joinlib.progressive.runs import RunStore
from joinlib.progressive.xjoin import XJoin

ALGORITHMS: dict[str, type[ProgressiveJoin]] = {
    "rpj": RPJ, "rpj-md": RPJmd, "rpj-dd": RPJdd, "xjoin": XJoin, "hmj": HMJ,
}


def make_join(name: str, spec: JoinSpec, store: RunStore, clock: VirtualClock, sink: PairSink, *,
              index: Optional[bool] = None, hmj_policy: str = "adaptive") -> ProgressiveJoin:
    """A fresh join of algorithm ``name`` (``hmj`` takes one of :data:`~.hmj.POLICIES`)."""
    key = name.lower()
    if key not in ALGORITHMS:
        raise SpecError(f"algorithm {name!r}: choose from {', '.join(ALGORITHMS)}")
    if key == "hmj":
        return HMJ(spec, store, clock, sink, index=index, policy=hmj_policy)
    return ALGORITHMS[key](spec, store, clock, sink, index=index)


__all__ = ["ALGORITHMS", "POLICIES", "make_join"]
