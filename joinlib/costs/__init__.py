"""The plan-level byte model (issue 11): what a plan ships, as the runtime encodes it.

* :mod:`.encoding` — message sizes from the runtime's own encoder on representative bodies;
* :mod:`.flows` — the expected content of every flow's message per epoch;
* :mod:`.model` — :class:`WireModel` / :func:`estimate`: bytes per link and kind of a plan, each
  shipment counted once (priced from the plan's IR);
* :mod:`.inputs` — statistics from the query file or measured from data;
* :mod:`.floor` — the floor: the bytes of the tuples that take part in a result.

``docs/cost-model.md`` describes the model; the paper's per-step model stays in :mod:`joinlib.costs.unit_time`.
"""
from __future__ import annotations

from typing import Any, Optional

from joinlib.costs.inputs import Inputs, from_data, from_query, inputs_for
from joinlib.costs.model import FlowCost, PlanEstimate, WireModel, estimate
from joinlib.costs.unit_time import MODELS as PAPER_MODELS
from joinlib.costs.unit_time import CostModel
from joinlib.costs.unit_time import get_model as _paper_model
from joinlib.errors import JoinlibError

#: every cost model name; ``wire`` (this package) is the default
MODELS = ("wire",) + PAPER_MODELS
DEFAULT_MODEL = "wire"


def get_model(name: str = DEFAULT_MODEL, inputs: Optional[Inputs] = None, **params: Any) -> CostModel:
    """A cost model by name: ``wire`` (the plan-level byte model, optionally over measured
    ``inputs``), or one of :mod:`joinlib.costs.unit_time`'s (``paper``, ``bytes``, ``calibrated``)."""
    if name == "wire":
        if params:
            raise JoinlibError(f"the wire model takes no parameters (got {', '.join(params)})")
        return WireModel(inputs)
    if name not in PAPER_MODELS:
        raise JoinlibError(f"unknown cost model {name!r} (choose from {', '.join(MODELS)})")
    return _paper_model(name, **params)


__all__ = ["MODELS", "DEFAULT_MODEL", "get_model", "Inputs", "from_data", "from_query", "inputs_for",
           "FlowCost", "PlanEstimate", "WireModel", "estimate"]
