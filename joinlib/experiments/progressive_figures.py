"""The PNGs of ``joinlib experiment rpj`` (the paper's Figs. 8-12 layout), drawn from the
experiment's run summaries (plain dicts with a ``timeline`` of [seconds, results, cost ms])."""
from __future__ import annotations

from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("harmony", "reverse")
RATIOS = (1.0, 5.0)
LABELS = {"rpj": "RPJ", "xjoin": "XJoin", "hmj": "HMJ", "rpj-md": "RPJ-md", "rpj-dd": "RPJ-dd"}
COLORS = {"rpj": "tab:red", "xjoin": "tab:blue", "hmj": "tab:green", "rpj-md": "tab:purple", "rpj-dd": "tab:orange"}
FIGURES = {  # name: (network, algorithms, metric, only the transmission period - as the paper's)
    "fig8_reliable_results.png": ("reliable", ("rpj", "xjoin", "hmj"), "results", True),
    "fig9_reliable_cost.png": ("reliable", ("rpj", "xjoin", "hmj"), "cost", False),
    "fig10_unreliable_results.png": ("unreliable", ("rpj", "xjoin", "hmj"), "results", False),
    "fig11_variants_results.png": ("unreliable", ("rpj", "rpj-md", "rpj-dd"), "results", True),
    "fig12_variants_cost.png": ("unreliable", ("rpj", "rpj-md", "rpj-dd"), "cost", False),
}


def find(runs: list[dict[str, Any]], network: str, dist: str, ratio: float, algorithm: str) -> dict[str, Any]:
    """The run of one algorithm in one case."""
    return next(r for r in runs if (r["network"], r["distribution"], r["ratio"], r["algorithm"])
                == (network, dist, ratio, algorithm))


def write_figures(runs: list[dict[str, Any]], title: str, out: Path) -> list[Path]:
    """One PNG per figure, four panels each (harmony / reverse × ratio 1 / 5)."""
    import matplotlib  # heavy optional dependency: matplotlib

    matplotlib.use("Agg")
    written = []
    for name, (network, algorithms, metric, crop) in FIGURES.items():
        path = out / name
        _figure(runs, title, network, algorithms, metric, crop, path)
        written.append(path)
    return written


def _figure(runs: list[dict[str, Any]], title: str, network: str, algorithms: tuple[str, ...], metric: str,
            crop: bool, path: Path) -> None:
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for row, ratio in enumerate(RATIOS):
        for col, dist in enumerate(DISTRIBUTIONS):
            ax = axes[row][col]
            for alg in algorithms:
                run = find(runs, network, dist, ratio, alg)
                _plot(ax, run, metric, COLORS[alg], LABELS[alg])
            end = find(runs, network, dist, ratio, algorithms[0])["transmission_end_s"]
            ax.axvline(end, color="grey", linestyle="--", linewidth=0.8)
            if crop:
                _crop(ax, [find(runs, network, dist, ratio, a) for a in algorithms], end)
            ax.set_title(f"{dist}, P(R1):P(R2) = {ratio:g}:1 ({network})"
                         + (", clean-up omitted" if crop else ""), fontsize=9)
            ax.set_xlabel("virtual time (s); dashed: end of transmission", fontsize=8)
            ax.set_ylabel("results reported" if metric == "results" else "amortised cost per result (ms)",
                          fontsize=8)
            if metric == "cost":
                ax.set_yscale("log")
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _plot(ax: Any, run: dict[str, Any], metric: str, color: str, label: str) -> None:
    pts = run["timeline"]
    if metric == "results":
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, label=label, linewidth=1.2)
    else:
        kept = [p for p in pts if p[1] > 0]
        ax.plot([p[0] for p in kept], [p[2] / p[1] for p in kept], color=color, label=label, linewidth=1.2)


def _crop(ax: Any, runs: list[dict[str, Any]], end: float) -> None:
    """Show the transmission period only (the clean-up would flatten it)."""
    top = max((p[1] for r in runs for p in r["timeline"] if p[0] <= end), default=1)
    ax.set_xlim(0, end)
    ax.set_ylim(0, top * 1.1 + 1)
