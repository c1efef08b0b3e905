"""``joinlib plan --explain``: the byte model's estimate of a plan, per link and kind, and per flow."""
from __future__ import annotations

from typing import Optional

from joinlib.costs.inputs import inputs_for
from joinlib.costs.model import WireModel
from joinlib.model import Query, Tup
from joinlib.plan.logical import Plan


def format_estimate(query: Query, plan: Plan, streams: Optional[dict[str, list[Tup]]] = None,
                    duration_s: Optional[float] = None) -> str:
    """The estimated bytes per second (and per run of ``duration_s``, by default the data's span)
    per link and kind, then per flow."""
    inputs = inputs_for(query, streams)
    est = WireModel(inputs).estimate(query, plan)
    if duration_s is None and streams:
        ts = [t.ts for tups in streams.values() for t in tups]
        duration_s = (max(ts) - min(ts) + 1) / 1000.0 if ts else None
    src = "measured on --data" if inputs.measured else "from the query file"
    run = f"{'per run':>14}" if duration_s else ""
    lines = [f"estimated bytes (byte model, statistics {src}; windows full):",
             f"  {'link':<24}{'kind':<9}{'bytes/s':>12}" + run]
    for (s, d, k), v in est.by_link().items():
        lines.append(f"  {s + ' -> ' + d:<24}{k:<9}{v:>12,.0f}" + (f"{v * duration_s:>14,.0f}" if duration_s else ""))
    total = est.bytes_per_s
    lines.append(f"  {'total':<33}{total:>12,.0f}" + (f"{total * duration_s:>14,.0f}" if duration_s else ""))
    lines.append("  per flow (operator / flow: items per message, bytes/s):")
    for f in sorted(est.flows, key=lambda f: -f.bytes_per_s):
        lines.append(f"    {f.sig:<48} {f.src}->{f.dst} {f.kind:<8} {f.items:>9.2f} {f.bytes_per_s:>11,.0f}")
    return "\n".join(lines)
