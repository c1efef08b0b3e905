"""How well the cost models predict the engine: correlations and worst cases.

Every experiment records, per measured plan, the models' estimates (``paper`` and
``calibrated`` in seconds per second, ``bytes`` in bytes per second) and the
steady-state measurement.  This module collects those pairs from the outputs found
under a directory (``fig7.json``, ``table3_runs.json``, ``fig9.json``, searched
recursively) and reports, per experiment and overall, Pearson's r, Spearman's rho, the
ratio measured / estimated and the worst pairs.

Correlation says whether the model *orders* plans right, which is all a planner
needs; the ratio says whether its absolute values are right.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, TypedDict

from joinlib.errors import JoinlibError
from joinlib.experiments import fig7, fig9, table3
from joinlib.experiments.common import Record
from joinlib.experiments.estimates import Accuracy, accuracy, accuracy_pairs, format_accuracy
from joinlib.experiments.output import write_json

FILES = {"fig7.json": "fig7", "table3_runs.json": "table3", "fig9.json": "fig9"}


def records_of(doc: Record) -> list[Record]:
    """The (label, estimated, measured) run records of one experiment document."""
    kind = doc.get("experiment")
    if kind == "fig7":
        return fig7.all_runs(doc)
    if kind == "table3":
        return table3.run_records(doc)
    if kind == "fig9":
        return fig9.run_records(doc)
    raise JoinlibError(f"not an experiment output (experiment = {kind!r})")


def collect(directory: Path) -> dict[str, list[Record]]:
    """Run records per experiment file found under ``directory``."""
    directory = Path(directory)
    if not directory.exists():
        raise JoinlibError(f"--from {directory}: no such directory")
    paths = [directory] if directory.is_file() else sorted(
        p for name in FILES for p in directory.rglob(name))
    if not paths:
        raise JoinlibError(f"--from {directory}: no experiment output found (expected "
                           f"{', '.join(FILES)}; run 'joinlib experiment fig7|table3|fig9 --out DIR' first)")
    out: dict[str, list[Record]] = {}
    for p in paths:
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise JoinlibError(f"{p}: cannot read experiment output ({e})") from None
        if not isinstance(doc, dict):
            raise JoinlibError(f"{p}: not an experiment output")
        try:
            out[str(p)] = records_of(doc)
        except (KeyError, TypeError) as e:
            raise JoinlibError(f"{p}: malformed experiment output (missing {e})") from None
    return out


class AccuracyReport(TypedDict):
    sources: dict[str, dict[str, Accuracy]]  # file -> model -> accuracy
    all: dict[str, Accuracy]  # model -> accuracy over every file


def report(directory: Path, out: Optional[Path] = None, worst: int = 5) -> AccuracyReport:
    found = collect(directory)
    result: AccuracyReport = {"sources": {}, "all": {}}
    everything: list[Record] = []
    for path, recs in found.items():
        result["sources"][path] = {m: accuracy(p, worst) for m, p in accuracy_pairs(recs).items()}
        everything += recs
    result["all"] = {m: accuracy(p, worst) for m, p in accuracy_pairs(everything).items()}
    for path, acc in result["sources"].items():
        print(format_accuracy(acc, path))
        print()
    print(format_accuracy(result["all"], f"all {len(everything)} measured plans"))
    if out is not None:
        write_json(out, result)
        print(f"\nwrote {out}")
    return result
