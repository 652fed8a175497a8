"""The seed's figures from `offload recsys bench` JSON: Fig. 2 (where the time goes), Fig. 3 (read
amplification), Fig. 10 (the SLS operator), Figs. 12/13 and 15 (end-to-end throughput and latency)
and Fig. 14 (RecSSD vs RM-SSD over the locality knob K). PNG, matplotlib's Agg backend."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from offload.files import save_figure
from offload.host.plots import pyplot
from offload.recsys.bench import SLS_STAGES, STAGES

plt = pyplot()

COLORS = {
    "bot_mlp": "#4c72b0",
    "emb_ssd": "#c44e52",
    "emb_fs": "#dd8452",
    "emb_op": "#937860",
    "concat": "#8172b3",
    "top_mlp": "#55a868",
    "link": "#8c8c8c",
}


def _title(b: dict[str, Any]) -> str:
    gib = b["table_bytes"] / 2**30
    return f"{b['model']}, {gib:.2f} GiB of tables, {b['mode']} mode"


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path


def breakdown(b: dict[str, Any], path: Path) -> Path:
    """Fig. 2: seconds per 1,000 inferences by stage, one stacked bar per strategy."""
    runs = b["strategies"]
    names = list(runs)
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom = [0.0] * len(names)
    for st in STAGES:
        vals = [runs[n]["stages_s"][st] * 1000 / max(1, runs[n]["samples"]) for n in names]
        ax.bar(names, vals, bottom=bottom, label=st.replace("_", "-"), color=COLORS[st])
        bottom = [x + v for x, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("seconds per 1K inferences (sum of stages)")
    ax.set_title(f"Where the time goes — {_title(b)}")
    ax.legend(fontsize=8, ncol=4)
    ax.tick_params(axis="x", rotation=30)
    return _save(fig, path)


def read_amplification(b: dict[str, Any], path: Path) -> Path:
    """Fig. 3: bytes read from the media over the bytes the lookups need; and traffic per sample."""
    runs = {n: r for n, r in b["strategies"].items() if n != "dram"}
    names = list(runs)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.bar(names, [runs[n]["read_amplification"] for n in names], color="#c44e52")
    a1.axhline(1, color="k", lw=0.8)
    a1.set_ylabel("read amplification (media / useful bytes)")
    a2.bar(names, [max(runs[n]["traffic_bytes_per_sample"], 1e-3) for n in names], color="#4c72b0")
    a2.set_yscale("log")
    a2.set_ylabel("host↔storage bytes per inference")
    for a in (a1, a2):
        a.tick_params(axis="x", rotation=30)
    fig.suptitle(f"I/O — {_title(b)}")
    return _save(fig, path)


def sls(b: dict[str, Any], path: Path) -> Path:
    """Fig. 10(a): the SparseLengthSum operator alone, per 1K inferences, with the × over ssd-s."""
    want = ("ssd-s", "emb-mmio", "emb-pagesum", "emb-vectorsum")
    runs = {n: b["strategies"][n] for n in want if n in b["strategies"]}
    names = list(runs)
    vals = [runs[n]["sls_s"] * 1000 / max(1, runs[n]["samples"]) for n in names]
    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar(names, vals, color=["#c44e52", "#dd8452", "#8172b3", "#55a868"][: len(names)])
    base = vals[0] if names and names[0] == "ssd-s" else None
    for bar, v in zip(bars, vals, strict=True):
        if base and v > 0:
            ax.annotate(f"{base / v:.1f}×", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom")
    parts = " + ".join(s.replace("_", "-") for s in SLS_STAGES)
    ax.set_ylabel("SLS seconds per 1K inferences")  # the stages summed go under the axes, not clipped
    note = f"SLS = {parts}"
    ax.annotate(note, (0, 0), xytext=(0, -28), xycoords="axes fraction", textcoords="offset points",
                fontsize=7, color="#555", va="top")  # fmt: skip
    ax.set_title(f"SLS operator — {_title(b)}\n(seed: EMB-VectorSum 16× SSD-S)", fontsize=10)
    return _save(fig, path)


def lookups_sensitivity(points: Sequence[dict[str, Any]], path: Path) -> Path:
    """Fig. 10(b): the SLS time of emb-vectorsum per inference against lookups per table."""
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p["lookups"] for p in points]
    ax.plot(xs, [p["sls_us_per_inference"] for p in points], "o-", color="#55a868", label="emb-vectorsum")
    ax.set_xlabel("lookups per table")
    ax.set_ylabel("SLS µs per inference")
    ax.set_ylim(bottom=0)
    ax.set_title("Sensitivity to lookups (Fig. 10b): linear in tables × lookups")
    return _save(fig, path)


def end_to_end(benches: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    """Figs. 12/13 (and 15 for NCF/WnD): throughput and p50 latency per model and strategy."""
    models = [b["model"] for b in benches]
    names: list[str] = []
    for b in benches:
        names += [n for n in b["strategies"] if n not in names]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    w = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        xs = [m + (i - (len(names) - 1) / 2) * w for m in range(len(models))]
        tp = [(b["strategies"].get(n) or {}).get("throughput_per_s") or 0 for b in benches]
        lat = [((b["strategies"].get(n) or {}).get("latency_s") or {}).get("p50", 0) * 1e3 for b in benches]
        a1.bar(xs, tp, w, label=n)
        a2.bar(xs, lat, w, label=n)
    for a, lab in ((a1, "inferences per second"), (a2, "p50 batch latency (ms)")):
        a.set_xticks(range(len(models)), models)
        a.set_yscale("log")
        a.set_ylabel(lab)
    a1.legend(fontsize=7, ncol=2)
    mode = benches[0]["mode"] if benches else ""
    fig.suptitle(f"{title} ({mode} mode)")
    return _save(fig, path)


def locality(points: Sequence[dict[str, Any]], path: Path) -> Path:
    """Fig. 14: throughput of RecSSD and RM-SSD against RecSSD's locality knob K, with the host
    cache's hit rate (the seed: K = 0 / 0.3 / 1 / 2 → about 80 / 65 / 45 / 30%)."""
    ks = [p["k"] for p in points]
    fig, a1 = plt.subplots(figsize=(6.5, 4))
    for name, color in (("recssd", "#4c72b0"), ("rm-ssd", "#c44e52")):
        a1.plot(ks, [p[name]["throughput_per_s"] for p in points], "o-", color=color, label=name)
    a1.set_xlabel("locality knob K (RecSSD's trace generator)")
    a1.set_ylabel("inferences per second")
    a2 = a1.twinx()
    a2.plot(ks, [100 * (p["recssd"]["host_cache_hit_rate"] or 0) for p in points], "s--", color="#8c8c8c",
            label="host cache (per batch)")  # fmt: skip
    if all("trace_lru_hit_rate" in p for p in points):
        a2.plot(ks, [100 * p["trace_lru_hit_rate"] for p in points], "^:", color="#555555", label="trace LRU")
    if all(p.get("paper_hit_rate") for p in points):
        a2.plot(ks, [100 * p["paper_hit_rate"] for p in points], "x", color="k", label="seed")
    a2.set_ylabel("hit rate (%)", color="#8c8c8c")
    a2.legend(loc="center right", fontsize=8)
    a2.set_ylim(0, 100)
    a1.legend(loc="upper right")
    a1.set_title("RecSSD's sensitivity to locality (Fig. 14)")
    return _save(fig, path)


def per_bench(b: dict[str, Any], out_dir: Path) -> list[Path]:
    """The single-run figures of one bench JSON: breakdown, I/O, and the SLS operator."""
    stem = f"{b['model']}-{b['mode']}"
    paths = [
        breakdown(b, out_dir / f"{stem}-breakdown.png"),
        read_amplification(b, out_dir / f"{stem}-io.png"),
    ]
    if "ssd-s" in b["strategies"] and b["strategies"]["ssd-s"].get("sls_s"):
        paths.append(sls(b, out_dir / f"{stem}-sls.png"))
    return paths


STRATEGY_COLORS = {
    "dram": "#555555",
    "ssd-s": "#dd8452",
    "emb-vectorsum": "#55a868",
    "recssd": "#4c72b0",
    "rm-ssd": "#c44e52",
}


def batch_sweep(sweeps: Sequence[dict[str, Any]], path: Path) -> Path:
    """Figs. 12/13 by batch size: throughput (top) and p50 batch latency (bottom) of each strategy,
    one column per model, with the seed's shape in each title and rm-ssd's eq. 1 pace dotted."""
    n = max(1, len(sweeps))
    fig, axes = plt.subplots(2, n, figsize=(4.6 * n, 7), squeeze=False)
    for col, sw in enumerate(sweeps):
        xs = [p["batch_size"] for p in sw["points"]]
        a1, a2 = axes[0][col], axes[1][col]
        for s in sw["strategies"]:
            runs = [p["strategies"][s] for p in sw["points"]]
            kw = {"color": STRATEGY_COLORS.get(s), "label": s, "marker": "o", "ms": 3}
            a1.plot(xs, [r["throughput_per_s"] or 0 for r in runs], **kw)
            a2.plot(xs, [r["latency_s"]["p50"] * 1e3 for r in runs], **kw)
        if all("rm_ssd_eq1" in p for p in sw["points"]):
            a1.plot(xs, [p["rm_ssd_eq1"]["eq1_samples_per_s"] for p in sw["points"]], ":",
                    color=STRATEGY_COLORS["rm-ssd"], label="rm-ssd, eq. 1")  # fmt: skip
        for a, lab in ((a1, "inferences per second"), (a2, "p50 batch latency (ms)")):
            a.set_xscale("log", base=2)
            a.set_yscale("log")
            a.set_xticks(xs, [str(x) for x in xs])
            a.set_xlabel("batch size")
            a.set_ylabel(lab)
        a1.set_title(textwrap.fill(f"{sw['model']}; seed: {sw.get('paper_shape') or ''}", 48), fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("By batch size (Figs. 12/13), flash mode", fontsize=10)
    return _save(fig, path)


def locality_constants(sweeps: dict[str, dict[str, Any]], path: Path) -> Path:
    """Fig. 14 with both sets of trace constants side by side: RecSSD's and RM-SSD's throughput
    against K (left) and the trace's LRU hit rate against the seed's (right)."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"fitted": "--", "recssd": "-"}
    for label, sw in sweeps.items():
        ks = [p["k"] for p in sw["points"]]
        for name in ("recssd", "rm-ssd"):
            a1.plot(ks, [p[name]["throughput_per_s"] for p in sw["points"]], styles.get(label, "-"),
                    marker="o", color=STRATEGY_COLORS[name], label=f"{name} ({label} constants)")  # fmt: skip
        a2.plot(ks, [100 * p["trace_lru_hit_rate"] for p in sw["points"]], styles.get(label, "-"), marker="^",
                color="#555555", label=f"trace LRU ({label} constants)")  # fmt: skip
    first = next(iter(sweeps.values()))
    seed = [(p["k"], 100 * (p["paper_hit_rate"] or 0)) for p in first["points"]]
    a2.plot(*zip(*seed, strict=True), "x", color="k", ms=9, label="seed")
    a1.set_xlabel("locality knob K")
    a1.set_ylabel("inferences per second")
    a1.legend(fontsize=7)
    a2.set_xlabel("locality knob K")
    a2.set_ylabel("hit rate (%)")
    a2.set_ylim(0, 100)
    a2.legend(fontsize=7)
    fig.suptitle("Fig. 14 with RM-SSD-fitted and RecSSD's own trace constants")
    return _save(fig, path)


def dram_by_size(result: dict[str, Any], path: Path) -> Path:
    """Fig. 15's dram baseline: dram's throughput by table size, 4 KiB pages against huge pages
    (each run a point), with rm-ssd's (the flash model) as a line, one panel per model."""
    models = list(result["models"])
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5.5 * max(1, len(models)), 4), squeeze=False)
    for ax, m in zip(axes[0], models, strict=False):
        r = result["models"][m]
        for pages, color in (("4k", "#dd8452"), ("huge", "#4c72b0")):
            runs = [(c["table_bytes"], run) for c in r["dram"] if c["pages"] == pages for run in c["runs"]]
            pts = [(size / 2**20, run["throughput_per_s"]) for size, run in runs]
            if pts:
                ax.scatter(*zip(*pts, strict=True), color=color, label=f"dram, {pages} pages", s=14)
        if r.get("rm_ssd"):
            ax.axhline(
                r["rm_ssd"]["throughput_per_s"],
                color=STRATEGY_COLORS["rm-ssd"],
                ls="--",
                label="rm-ssd (flash model)",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tables (MiB)")
        ax.set_ylabel("inferences per second")
        ax.set_title(m)
        ax.legend(fontsize=7)
    fig.suptitle("Fig. 15's all-DRAM baseline, by table size and page size")
    return _save(fig, path)
