"""The MBWU sweep's figure: throughput against workers, per workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.files import save_figure
from offload.host.plots import pyplot


def plot(r: dict[str, Any], path: Path) -> None:
    """Throughput against workers per workload: each step's steady median with min-max bars, the
    MBWU (a red star and line); the embedded budget's sweep beside the host's when measured."""
    plt = pyplot()

    ws = list(r["workloads"])
    fig, axes = plt.subplots(1, len(ws), figsize=(4.5 * len(ws), 3.8), squeeze=False)
    for ax, w in zip(axes[0], ws, strict=True):
        x = r["workloads"][w]
        for side, style in (("host", "o-"), ("embedded", "s--")):
            if side not in x:
                continue
            sw = x[side]
            ts = [s["threads"] for s in sw["steps"]]
            vs = [s["value"] for s in sw["steps"]]
            win = [s["samples"][slice(*(s["window"] or (0, None)))] for s in sw["steps"]]
            lo = [v - min(xs) for v, xs in zip(vs, win, strict=True)]
            hi = [max(xs) - v for v, xs in zip(vs, win, strict=True)]
            label = "host" if side == "host" else f"{r['plan']['embedded']} budget"
            bars = ax.errorbar(ts, vs, yerr=[lo, hi], fmt=style, capsize=3, label=label)
            shaky = [(t, v) for t, v, s in zip(ts, vs, sw["steps"], strict=True) if not s["steady"]]
            if shaky:  # hollow: no steady window within the bound
                ax.plot(*zip(*shaky, strict=True), style[0], mfc="white", color=bars[0].get_color(), zorder=3)
            best = next(s for s in sw["steps"] if s["threads"] == sw["threads_at_mbwu"])
            ax.plot([best["threads"]], [best["value"]], "r*", ms=14, zorder=4)
            if side == "host":
                ax.axhline(sw["mbwu"], color="red", lw=0.8, ls=":")
                ax.set_xticks(ts)
        note = "at the plateau" if x["host"]["plateau_reached"] else "no plateau: a lower bound"
        ax.set_xlabel("workers (processes; Arrow: threads)")
        ax.set_ylabel(x["unit"])
        ax.set_title(f"{w}: MBWU {x['mbwu']:,.0f} {x['unit']}\n({note}, red star)", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    m = r["machine"]
    fig.suptitle(
        f"MBWU sweep on {m['cpus']} CPUs: each step's steady-window median, min-max bars "
        "(hollow: no window within the bound, second-half median)"
    )
    fig.tight_layout()
    save_figure(fig, path)
