"""The PNG of ``joinlib experiment adaptive``: cost per measurement interval, static vs CNU vs DNU
(the layout of the paper's Fig. 4), one panel per join size, high-rate phases shaded."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from joinlib.adaptive.workload import Toggle

STYLE = {"static": ("non-adaptive", "tab:gray", "-"), "cnu": ("adaptive CNU", "tab:blue", "-"),
         "dnu": ("adaptive DNU", "tab:red", "--")}


def write_figure(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # heavy optional dependency: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy optional dependency: matplotlib

    ways = list(result["ways"].items())
    fig, axes = plt.subplots(1, len(ways), figsize=(6.5 * len(ways), 4), squeeze=False)
    duration = result["scale"]["duration_ms"]
    for ax, (m, a) in zip(axes[0], ways, strict=True):
        step = a["interval_ms"] / 1000.0
        for a0, b0, rate in Toggle("x").phases(duration):
            if rate > 100:
                ax.axvspan(a0 / 1000.0, b0 / 1000.0, color="tab:orange", alpha=0.12, lw=0)
        for v, (label, color, ls) in STYLE.items():
            ys = a["cost_ms_per_interval"][v][: -(-duration // a["interval_ms"])]  # stream time only
            ax.plot([i * step for i in range(len(ys))], ys, ls, color=color, label=label, lw=1.6)
        ax.set_xlim(0, duration / 1000.0)   # the drain after the last tuple (zero-padded in the mean): cut off
        hp = a["high_phase_ratio"]
        ratio = ", ".join(f"{v.upper()} {hp[v]['whole_phase']['mean']} (from the switch "
                          f"{hp[v]['from_the_switch']['mean']})" for v in ("cnu", "dnu"))
        ax.set_title(f"{m}-way join, {a['repetitions']} repetitions; static / adaptive cost in high phases:\n{ratio}",
                     fontsize=9)
        ax.set_xlabel("time (s); shaded: the toggled stream at 200 tuples/s")
        ax.set_ylabel(f"transmission time per {a['interval_ms']} ms (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
