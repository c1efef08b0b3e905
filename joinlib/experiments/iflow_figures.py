"""The PNGs of ``joinlib experiment iflow``, drawn from its report and per-query records (Agg backend).

- ``iflow_totals.png``: total network usage of the 100 queries per approach (the paper's Fig. 2 layout:
  plan-then-deploy with Relaxation / optimal placement against integrated planning with reuse);
- ``iflow_maxcs.png``: per-query cost relative to the optimum and fraction of Lemma 1's space examined,
  against ``maxcs``, for Top-Down, Bottom-Up and NPC, with the paper's 10 % / 1 % marks;
- ``iflow_cumulative.png``: network usage as the queries arrive;
- ``iflow_overlap.png``: the saving against plan-then-deploy as queries overlap more.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"optimal": "tab:green", "optimal-noreuse": "tab:olive", "ptd-optimal": "tab:blue",
          "ptd-optimal+reuse": "tab:cyan", "ptd-relaxation": "tab:purple", "top-down": "tab:red",
          "bottom-up": "tab:orange", "npc": "tab:brown"}


def write_figures(report: dict[str, Any], records: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib  # heavy optional dependency: matplotlib

    matplotlib.use("Agg")
    paths = [out / "iflow_totals.png", out / "iflow_maxcs.png", out / "iflow_cumulative.png", out / "iflow_overlap.png"]
    _totals(report, paths[0])
    _maxcs(report, paths[1])
    _cumulative(report, records, paths[2])
    _overlap(report, paths[3])
    return paths


def _mid(report: dict[str, Any]) -> int:
    ms: list[int] = report["scale"]["maxcs"]
    return 8 if 8 in ms else ms[0]


def _totals(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib
    m = _mid(report)
    runs = [r for r in report["runs"] if r["maxcs"] in (None, m)]
    order = ["ptd-relaxation", "ptd-optimal", "ptd-optimal+reuse", "optimal-noreuse", "bottom-up", "npc",
             "top-down", "optimal"]
    runs.sort(key=lambda r: order.index(r["planner"]))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [r["planner"] + (f"\n(maxcs {m})" if r["maxcs"] else "") for r in runs]
    ax.bar(labels, [r["total"] for r in runs], color=[COLORS[r["planner"]] for r in runs])
    ptd = next(r["total"] for r in runs if r["planner"] == "ptd-optimal")
    for i, r in enumerate(runs):
        ax.annotate(f"{r['total'] / ptd:.0%}", (i, r["total"]), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("total network usage (rate x latency)")
    ax.set_title(f"{report['scale']['queries']} queries x {report['scale']['k']} streams, "
                 f"{report['topology']['nodes']} nodes (labels: relative to ptd-optimal)")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _maxcs(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("top-down", "bottom-up", "npc"):
        rs = sorted((r for r in report["runs"] if r["planner"] == name), key=lambda r: r["maxcs"])
        xs = [r["maxcs"] for r in rs]
        a1.plot(xs, [r["ratio"]["mean"] for r in rs], "o-", color=COLORS[name], label=f"{name} (mean)")
        a1.plot(xs, [r["ratio"]["median"] for r in rs], "x--", color=COLORS[name], alpha=0.6)
        a2.plot(xs, [max(r["fraction_examined"]["mean"], 1e-9) for r in rs], "o-", color=COLORS[name], label=name)
    a1.axhline(1.10, color="grey", ls=":", label="paper: Top-Down ~1.10")
    a1.set_xscale("log", base=2)
    a1.set_xlabel("maxcs")
    a1.set_ylabel("cost / optimum under the same D (o mean, x median)")
    a1.legend(fontsize=8)
    a2.axhline(0.01, color="grey", ls=":", label="paper: < 1 %")
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("maxcs")
    a2.set_ylabel("fraction of Lemma 1's space examined")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cumulative(report: dict[str, Any], records: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib
    m = _mid(report)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key in ("ptd-relaxation", "ptd-optimal", "ptd-optimal+reuse", "optimal", f"top-down@{m}"):
        acc, ys = 0.0, []
        for r in records[key]:
            acc += r["cost"]
            ys.append(acc)
        ax.plot(range(1, len(ys) + 1), ys, color=COLORS[key.split("@")[0]], label=key)
    ax.set_xlabel("queries deployed")
    ax.set_ylabel("total network usage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _overlap(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for variant, style in (("varied", "-"), ("uniform", "--")):
        rows = [r for r in report["sweep"] if r["variant"] == variant]
        xs = [r["streams"] for r in rows]
        ax.plot(xs, [r["saving_vs_ptd_optimal"] * 100 for r in rows], "o" + style, color=COLORS["ptd-optimal"],
                label=f"vs ptd-optimal ({variant})")
        ax.plot(xs, [r["saving_vs_ptd_relaxation"] * 100 for r in rows], "s" + style,
                color=COLORS["ptd-relaxation"], label=f"vs ptd-relaxation ({variant})")
    ax.axhline(50, color="grey", ls=":", label="paper: > 50 %")
    ax.set_xlabel("base streams the queries draw from (fewer: more overlap)")
    ax.set_ylabel("saving of integrated + reuse (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
