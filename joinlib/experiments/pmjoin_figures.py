"""The PNGs of ``joinlib experiment pmjoin``, in the layout of seed 002's Figs. 8 and 5, drawn from
the experiment's JSON summaries (plain dicts)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"hash": "tab:blue", "range": "tab:green", "rate": "tab:red", "heuristic": "tab:red",
          "optimal": "black", "simple": "tab:grey"}
PANELS8 = ("SD-CHS", "DD-CHS", "SD-RHS", "DD-RHS")  # the paper's Fig. 8 (a)-(d) order
PANELS5 = ("LASW-SD", "LASW-DD", "HASW-SD", "HASW-DD")


def write_figures(doc: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib  # heavy optional dependency: matplotlib

    matplotlib.use("Agg")
    return [_fig8(doc, out / "fig8_pmjoin.png"), _fig5(doc, out / "fig5_heuristic.png")]


def _fig8(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for ax, name in zip(axes.flat, PANELS8, strict=True):
        entry = doc["pmjoin"][name]
        ds = [int(d) for d in entry["hash"]]
        for m in ("hash", "range", "rate"):
            ax.plot(ds, [entry[m][str(d)]["cost"] for d in ds], marker="o", color=COLORS[m], label=m)
        ax.axhline(entry["simple"], color=COLORS["simple"], linestyle="--", label="Simple")
        ax.plot([ds[0]], [entry["optimal"]], marker="*", markersize=12, color=COLORS["optimal"], linestyle="",
                label="Optimal (D = 1)")
        ax.set_xscale("log")
        ax.set_ylim(0, max(entry["simple"], entry["hash"][str(ds[0])]["cost"]) * 1.1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("number of partitions D", fontsize=8)
        ax.set_ylabel("communication cost (tuples/s)", fontsize=8)
        ax.legend(fontsize=7)
    sc = doc["scale"]
    fig.suptitle(f"PMJoin (rate model): {sc['streams']} streams, data range 1..{sc['data_range']}, "
                 f"mean of {sc['seeds']} seeds", fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _fig5(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for ax, name in zip(axes.flat, PANELS5, strict=True):
        entry = doc["heuristic"][name]
        ranges = [int(r) for r in entry]
        for k, label in (("heuristic", "Heuristic"), ("optimal", "Optimal"), ("simple", "Simple")):
            ax.plot(ranges, [entry[str(r)][k] for r in ranges], marker="o", color=COLORS[k], label=label,
                    linestyle="--" if k == "optimal" else "-")
        ax.set_xscale("log")
        ax.set_ylim(0, max(v["simple"] for v in entry.values()) * 1.1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("data range", fontsize=8)
        ax.set_ylabel("communication cost (tuples/s)", fontsize=8)
        ax.legend(fontsize=7)
    sc = doc["scale"]
    fig.suptitle(f"STREAMJOINOPT vs Optimal vs Simple: {sc['streams']} streams, mean of {sc['heuristic_seeds']} "
                 "seed(s)", fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
