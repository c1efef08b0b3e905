"""``joinlib plan --planner auto``: the plan ``auto`` chooses among every run kind, and with
``--explain`` the candidates it weighed (issue 30).

With ``--data`` the choice may be a plan per partition (``pmjoin``), an MJoin tree or a tree per
partition: its JSON is printed as the run kind writes it, and the candidates' table says which kind
each is, the byte model's estimate and, for the short list run on a sample, the measured bytes per
second once the windows are full.  Without data ``auto`` weighs plans of sequences only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from joinlib.costs.explain import format_estimate
from joinlib.model import Query, Tup
from joinlib.plan.logical import Plan
from joinlib.planner.auto import Ranked, auto_ranked
from joinlib.planner.kinds import Candidate

Streams = dict[str, list[Tup]]
SHOWN = 25   # model candidates listed besides the measured ones


def plan_auto(query: Query, streams: Optional[Streams], out: Optional[Path], explain: bool,
              write: Callable[[Any, Optional[Path]], None]) -> int:
    """Print (or ``write`` to ``out``) ``auto``'s choice; ``explain``: the estimate of a plan of
    sequences per link, then the candidates."""
    ranked, measured = auto_ranked(query, streams, every_kind=streams is not None)
    chosen = (measured or ranked)[0]
    write(chosen.plan.to_json(), out)
    if explain:
        if isinstance(chosen.plan, Plan):
            print(format_estimate(query, chosen.plan, streams))
        print(format_candidates(ranked, measured, chosen))
    return 0


def format_candidates(ranked: list[Ranked[Candidate]], measured: list[Ranked[Candidate]],
                      chosen: Ranked[Candidate]) -> str:
    """The candidates ``auto`` weighed: kind, name, estimated and (short list) measured bytes per
    second, the chosen one marked ``*``; model-ranked, the measured ones first in measured order."""
    sampled = {r.name: r for r in measured}
    rows = list(measured) + [r for r in ranked if r.name not in sampled][:SHOWN]
    lines = [f"candidates auto weighed ({len(ranked)}; {len(measured)} measured on a sample of --data, "
             "bytes per second once the windows are full):",
             f"  {'':2}{'kind':<13}{'candidate':<48}{'estimated':>13}{'measured':>13}"]
    for r in rows:
        mark = "*" if r is chosen or (r.name == chosen.name and r.measured == chosen.measured) else ""
        got = f"{r.measured:>13,.0f}" if r.measured is not None else f"{'-':>13}"
        lines.append(f"  {mark:<2}{r.kind:<13}{r.name[:47]:<48}{r.estimate:>13,.0f}{got}")
    if len(ranked) > len(rows):
        lines.append(f"  ... {len(ranked) - len(rows)} more (model estimate above those shown)")
    return "\n".join(lines)
