"""`offload serve sweep`: run the service over a grid of configurations (p client connections, w
workers, k kernel executors, e engine threads, batching policy and batch size; closed loop or
open loop at given arrival rates), measure each with the injector (the Rust load generator),
and draw the latency-vs-throughput Pareto front (the seed's Figure 8). Answers the two
questions a deployer asks: the most throughput under a p99 bound, and the lowest latency for a
throughput target. With ``together`` (``--together``) the series is p = w = k scaled together
(the seed's Figure 5), drawn as throughput and latency against the step.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from offload.files import atomic_write, save_figure, write_text
from offload.serve import ServeError, daemon
from offload.serve.inject import Trace, run


@dataclass(frozen=True)
class Config:
    """One point of the grid, written like the seed: `2p 1w 1k 1e` (+ batching, + load)."""

    p: int
    w: int
    k: int
    e: int
    batch_max_queries: int  # 0 = per request
    batch_timeout_us: int
    rate_rps: float = 0.0  # 0 = closed loop; else open loop, Poisson arrivals at this many requests/s

    def label(self) -> str:
        b = "per-req"
        if self.batch_max_queries:
            b = f"b{self.batch_max_queries}/{self.batch_timeout_us}us"
        load = f" @{self.rate_rps:,.0f}/s" if self.rate_rps else ""
        return f"{self.p}p {self.w}w {self.k}k {self.e}e {b}{load}"


def grid(
    p: Sequence[int],
    w: Sequence[int],
    k: Sequence[int],
    e: Sequence[int],
    batch: Sequence[int],
    timeout_us: int,
    rates: Sequence[float] = (0.0,),
) -> list[Config]:
    """Every combination; `rates` lists open-loop request rates (0 = closed loop)."""
    return [
        Config(pp, ww, kk, ee, bb, timeout_us, rr)
        for pp, ww, kk, ee, bb, rr in itertools.product(p, w, k, e, batch, rates)
    ]


def together(
    n: Sequence[int],
    e: Sequence[int],
    batch: Sequence[int],
    timeout_us: int,
    rates: Sequence[float] = (0.0,),
) -> list[Config]:
    """The seed's Figure 5: p = w = k = each of `n` (one client connection, one worker and one kernel
    executor more per step, each executor fed by its own flow), with every `e`, batch and rate."""
    return [
        Config(nn, nn, nn, ee, bb, timeout_us, rr) for nn, ee, bb, rr in itertools.product(n, e, batch, rates)
    ]


def check(configs: Sequence[Config]) -> None:
    """Refuses, before any daemon starts, a configuration the daemon or the injector would not
    take (ValueError naming the value and its range): the daemon's settings against its one
    table of ranges (offload_serve::config::BOUNDS), p and the rate as `inject` takes them."""
    from offload import _native
    from offload.serve.inject import MAX_PROCESSES

    for c in configs:
        settings = {
            "workers": c.w,
            "kernels": c.k,
            "engine_threads": c.e,
            "batch_max_queries": c.batch_max_queries,
            "batch_timeout_us": c.batch_timeout_us,
        }
        for key, value in settings.items():
            if value < 0:
                raise ValueError(f"{key} {value} is out of range: a count of 0 or more")
            _native.serve_check_setting(key, value)
        if not 1 <= c.p <= MAX_PROCESSES:
            raise ValueError(f"processes {c.p} is out of range: 1..={MAX_PROCESSES}")
        if not 0 <= c.rate_rps < float("inf"):
            raise ValueError(f"rate {c.rate_rps} is out of range: 0 (closed loop) or requests/s above 0")


def is_together(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the rows are a p = w = k series of more than one step (drawn as a scaling plot)."""
    return len({r["p"] for r in rows}) > 1 and all(r["p"] == r["w"] == r["k"] for r in rows)


def sweep(
    ruletype: str,
    rules: str,
    trace: Trace,
    configs: Sequence[Config],
    duration: float = 3.0,
    matcher: str = "fast",
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Measures every configuration with a fresh daemon; returns one row per configuration.
    The first configuration is run once more before it, unrecorded: the first run after a quiet
    spell measured up to 2x slower here (caches, page cache, CPU frequency), and the first row is
    the 1p 1w 1k 1e row `offload plan calibrate` takes its stage costs from."""
    say = progress or (lambda _m: None)
    rows = []
    tmp = tempfile.mkdtemp(prefix="offload-sweep-")
    try:
        runs = [(-1, configs[0])] if configs else []
        for i, cfg in [*runs, *enumerate(configs)]:
            say("warming up" if i < 0 else f"[{i + 1}/{len(configs)}] {cfg.label()}")
            endpoint = f"ipc://{tmp}/s{i}-{os.getpid()}.sock"
            proc = daemon.start(
                *daemon.rule_flags(ruletype, rules), "-e", endpoint,
                "--workers", str(cfg.w), "--kernels", str(cfg.k), "--engine-threads", str(cfg.e),
                "--queue", "1024", "--matcher", matcher, "--batch-max-queries", str(cfg.batch_max_queries),
                "--batch-timeout-us", str(cfg.batch_timeout_us),
            )  # fmt: skip
            try:
                mode = "open" if cfg.rate_rps else "closed"
                cpu0 = _process_cpu_s(proc.pid)
                r = run(endpoint, trace, processes=cfg.p, mode=mode, rate=cfg.rate_rps, duration=duration)
                daemon_cpu = _process_cpu_s(proc.pid) - cpu0
            finally:
                daemon.stop(proc)
            if i < 0:
                continue
            if r["latency_us"]["p50"] is None:  # nothing was answered: no point to place
                raise ServeError(
                    f"{cfg.label()}: no request was answered Ok ({r['status']}, {r['messages']})"
                )
            answered = max(1, r["status"].get("Ok", 0))
            rows.append(
                {
                    **asdict(cfg),
                    "label": cfg.label(),
                    "queries_per_s": r["queries_per_s"],
                    "requests_per_s": r["requests_per_s"],
                    "mode": mode,
                    "p50_us": r["latency_us"]["p50"],
                    "p99_us": r["latency_us"]["p99"],
                    "requests": r["requests"],
                    "unanswered": r["unanswered"],
                    "status": r["status"],
                    # What `offload plan calibrate` fits stage costs to: stage medians by request
                    # size, and the host CPU the daemon and the clients spent per answered request.
                    "daemon_cpu_us_per_request": daemon_cpu / answered * 1e6,
                    "client_cpu_us_per_request": r.get("client_cpu_s", 0.0) / answered * 1e6,
                    "stage_median_us": r["stage_median_us"],
                    "by_size": r["by_size"],
                }
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the daemons' IPC socket files
    return rows


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pareto(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Configurations no other beats on both throughput (higher) and p99 (lower)."""
    front = [
        r
        for r in rows
        if not any(
            o["queries_per_s"] >= r["queries_per_s"] and o["p99_us"] <= r["p99_us"] and o is not r
            and (o["queries_per_s"] > r["queries_per_s"] or o["p99_us"] < r["p99_us"])
            for o in rows
        )
    ]  # fmt: skip
    return sorted(front, key=lambda r: r["queries_per_s"])


def best_under_p99(rows: Sequence[dict[str, Any]], p99_us: float) -> dict[str, Any] | None:
    ok = [r for r in rows if r["p99_us"] <= p99_us]
    return max(ok, key=lambda r: r["queries_per_s"]) if ok else None


def lowest_latency_for(rows: Sequence[dict[str, Any]], queries_per_s: float) -> dict[str, Any] | None:
    ok = [r for r in rows if r["queries_per_s"] >= queries_per_s]
    return min(ok, key=lambda r: r["p99_us"]) if ok else None


def write(rows: list[dict[str, Any]], out: Path, p99_us: float, qps: float) -> dict[str, Any]:
    """JSON + CSV + the Pareto plot; returns the summary with both recommendations."""
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "rows": rows,
        "pareto": [r["label"] for r in pareto(rows)],
        "best_under_p99": {"p99_us": p99_us, "config": best_under_p99(rows, p99_us)},
        "lowest_latency_for": {"queries_per_s": qps, "config": lowest_latency_for(rows, qps)},
    }
    if is_together(rows):
        summary["together"] = scaling(rows)
    write_text(out, json.dumps(summary, indent=2))
    with atomic_write(out.with_suffix(".csv"), "w", newline="") as f:
        keys = [k for k in rows[0] if k not in ("status", "stage_median_us", "by_size")] if rows else []
        wr = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
    if is_together(rows):
        scaling_plot(rows, out.with_suffix(".png"))
    else:
        _plot(rows, out.with_suffix(".png"))
    return summary


def _plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    pareto_plot(rows, path, "offload serve sweep: latency vs throughput")


def scaling(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A p = w = k series step by step: throughput and latency, each against the first step's
    (the seed's Figure 5: more throughput, slightly more latency per request)."""
    series = sorted(rows, key=lambda r: (r["e"], r["batch_max_queries"], r["rate_rps"], r["p"]))
    out: list[dict[str, Any]] = []
    base: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in series:
        key = (r["e"], r["batch_max_queries"], r["rate_rps"])
        b = base.setdefault(key, r)
        qps = r["queries_per_s"] / b["queries_per_s"] if b["queries_per_s"] else None
        out.append({
            "n": r["p"], "label": r["label"], "queries_per_s": r["queries_per_s"], "p50_us": r["p50_us"],
            "p99_us": r["p99_us"], "throughput_vs_first": qps,
            "p50_vs_first": r["p50_us"] / b["p50_us"] if b["p50_us"] else None,
        })  # fmt: skip
    return out


def scaling_plot(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Throughput and latency (p50, p99) against p = w = k (the seed's Figure 5), one line per
    e, batching and load."""
    from offload.host.plots import pyplot

    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tail = r["label"].split(" ", 3)[3]  # "1e per-req" (+ load)
        groups.setdefault(tail, []).append(r)
    for i, (tail, rs) in enumerate(sorted(groups.items())):
        rs = sorted(rs, key=lambda r: r["p"])
        n = [r["p"] for r in rs]
        a1.plot(n, [r["queries_per_s"] / 1e6 for r in rs], "o-", color=f"C{i}", label=tail)
        a2.plot(n, [r["p50_us"] for r in rs], "o-", color=f"C{i}", label=f"{tail}, p50")
        a2.plot(n, [r["p99_us"] for r in rs], "s--", color=f"C{i}", label=f"{tail}, p99")
    steps = sorted({r["p"] for r in rows})
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(steps, [str(n) for n in steps])
        ax.minorticks_off()
        ax.set_xlabel("p = w = k (client connections = workers = kernel executors)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    a1.set_ylabel("throughput (M queries/s)")
    a1.set_ylim(bottom=0)
    a2.set_ylabel("latency per request (µs)")
    a2.set_yscale("log")
    fig.suptitle("Parallel components scaled together (seed 000/001, Fig. 5)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def _labels(
    fig: Any,
    ax: Any,
    rows: Sequence[dict[str, Any]],
    front: Sequence[dict[str, Any]],
    chosen: dict[str, Any] | None,
) -> None:
    """Point labels that stay readable: the chosen row and the Pareto front first, each to the right
    of its point or else to the left, and none where it would overlap another label, the legend
    or the axes' edge (the table lists every row)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend()
    placed = [legend.get_window_extent(renderer)] if legend is not None else []
    key = lambda r: (r["label"], r.get("source", "measured"))  # noqa: E731
    first = {key(r) for r in front} | ({key(chosen)} if chosen is not None else set())
    hidden = 0
    for r in sorted(rows, key=lambda r: (chosen is None or key(r) != key(chosen), key(r) not in first)):
        for dx, ha in ((4, "left"), (-4, "right")):
            a = ax.annotate(r["label"], (r["queries_per_s"] / 1e6, r["p99_us"]), xytext=(dx, 3),
                            textcoords="offset points", fontsize=6, alpha=0.8, ha=ha)  # fmt: skip
            box = a.get_window_extent(renderer)
            inside = ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1 and box.y1 <= ax.bbox.y1
            if inside and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            a.remove()
        else:
            hidden += 1
    if hidden:
        ax.text(1.0, -0.11, f"{hidden} labels left out where they would overlap", transform=ax.transAxes,
                ha="right", va="top", fontsize=6, color="#777")  # fmt: skip


def pareto_plot(
    rows: Sequence[dict[str, Any]], path: Path, title: str, chosen: dict[str, Any] | None = None
) -> Path:
    """p99 vs throughput of every row, the Pareto front, and the recommended row if any.
    Rows with "source": "simulated" are drawn hollow (measured ones filled)."""
    from offload.host.plots import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 5))
    for source, style in (
        ("measured", {"color": "grey"}),
        ("simulated", {"facecolors": "none", "edgecolors": "C0"}),
    ):
        pts = [r for r in rows if r.get("source", "measured") == source]
        if pts:
            x, y = [r["queries_per_s"] / 1e6 for r in pts], [r["p99_us"] for r in pts]
            ax.scatter(x, y, s=18, label=source, **style)  # type: ignore[arg-type]
    front = pareto(rows)
    ax.plot([r["queries_per_s"] / 1e6 for r in front], [r["p99_us"] for r in front], "o-", color="C3",
            label="Pareto front")  # fmt: skip
    if chosen is not None:
        ax.scatter([chosen["queries_per_s"] / 1e6], [chosen["p99_us"]], s=160, marker="*", color="gold",
                   edgecolors="black", zorder=5, label=f"recommended: {chosen['label']}")  # fmt: skip
    ax.set_xlabel("throughput (M queries/s)")
    ax.set_ylabel("p99 latency per request (µs)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    _labels(fig, ax, rows, front, chosen)
    save_figure(fig, path, dpi=120)
    return path
