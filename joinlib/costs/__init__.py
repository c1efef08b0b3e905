"""Cost models of join plans, and the one registry that builds them by name (:func:`get_model`).

* :mod:`.encoding` — message sizes from the runtime's own encoder on representative bodies;
* :mod:`.flows` — the expected content of every flow's message per epoch;
* :mod:`.model` — :class:`WireModel` / :func:`estimate`: bytes per link and kind of a plan, each
  shipment counted once (priced from the plan's IR): the plan-level byte model, ``wire``;
* :mod:`.inputs` — statistics from the query file or measured from data;
* :mod:`.floor` — the floor: the bytes of the tuples that take part in a result;
* :mod:`.unit_time` and :mod:`.term_models` — the paper's per-step model (Appendix B): ``paper``,
  ``bytes``, ``calibrated``.

``docs/cost-model.md`` describes the models.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from joinlib.costs.inputs import Inputs, from_data, from_query, inputs_for
from joinlib.costs.model import FlowCost, PlanEstimate, WireModel, estimate
from joinlib.costs.term_models import BytesModel, CalibratedModel, PaperModel
from joinlib.costs.unit_time import CostModel
from joinlib.errors import JoinlibError


@dataclass(frozen=True)
class ModelSpec:
    """A cost model by name: ``build(inputs, **params)`` makes it (``inputs``: measured statistics, read by
    the models that take them); ``terms``: it prices the Appendix B terms of each step (the models the
    paper's experiments report, :mod:`joinlib.costs.unit_time`)."""

    name: str
    build: Callable[..., CostModel]
    terms: bool


def _no_params(name: str, params: dict[str, Any]) -> None:
    if params:
        raise JoinlibError(f"the {name} model takes no parameters (got {', '.join(params)})")


def _wire(inputs: Optional[Inputs] = None, **params: Any) -> CostModel:
    _no_params("wire", params)
    return WireModel(inputs)


def _paper(inputs: Optional[Inputs] = None, **params: Any) -> CostModel:
    return PaperModel(**params)


def _bytes(inputs: Optional[Inputs] = None, **params: Any) -> CostModel:
    _no_params("bytes", params)
    return BytesModel()


def _calibrated(inputs: Optional[Inputs] = None, **params: Any) -> CostModel:
    """``path=`` a calibration JSON file, or the constants themselves."""
    if "path" in params:
        if len(params) > 1:
            raise JoinlibError("calibrated model: give either path= or the constants, not both")
        return CalibratedModel.from_json(params["path"])
    return CalibratedModel(**params)


#: every cost model by name; ``wire`` (the plan-level byte model) is the default
REGISTRY: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("wire", _wire, terms=False),
    ModelSpec("paper", _paper, terms=True),
    ModelSpec("bytes", _bytes, terms=True),
    ModelSpec("calibrated", _calibrated, terms=True),
)}
MODELS = tuple(REGISTRY)
#: the models that price each step's Appendix B terms (what the paper's experiments report)
TERM_MODELS = tuple(name for name, m in REGISTRY.items() if m.terms)
DEFAULT_MODEL = "wire"


def get_model(name: str = DEFAULT_MODEL, inputs: Optional[Inputs] = None, **params: Any) -> CostModel:
    """A cost model by name: ``wire`` (the plan-level byte model, optionally over measured ``inputs``),
    ``paper`` (constants c_p, c_u, c_h, c_i), ``bytes``, or ``calibrated`` (``path=`` a calibration JSON
    file, or the constants themselves)."""
    spec = REGISTRY.get(name)
    if spec is None:
        raise JoinlibError(f"unknown cost model {name!r} (choose from {', '.join(MODELS)})")
    return spec.build(inputs, **params)


__all__ = ["MODELS", "TERM_MODELS", "DEFAULT_MODEL", "REGISTRY", "ModelSpec", "get_model", "Inputs", "from_data",
           "from_query", "inputs_for", "FlowCost", "PlanEstimate", "WireModel", "estimate"]
