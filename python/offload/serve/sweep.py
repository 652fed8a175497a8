"""`offload serve sweep`: run the service over the grid of what a deployment chooses
(`offload.serve.grid`: matcher, workers, executors or inline, engines, batching policy, client
encoding, request size, transport, connections), each point measured by the Rust load generator
(`offload serve bench`): closed loop, open loop at given rates, or to its knee (the most
requests/s whose p99 stays within the SLA) with the daemon's host path by thread role there.
Draws the latency-vs-throughput Pareto front (the seed's Figure 8) and answers the two questions
a deployer asks: the most throughput under a p99 bound, and the lowest latency for a throughput
target. With ``together`` (``--together``) the series is p = w = k scaled together (the seed's
Figure 5), drawn as throughput and latency against the step.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload.files import atomic_write, save_figure, write_text
from offload.serve import ServeError, bench, daemon
from offload.serve.grid import Deployment, Policy, endpoint
from offload.serve.inject import Trace, by_size, latency_us


@dataclass(frozen=True)
class Config:
    """One measured point: a deployment and the load it is measured under (closed loop, an
    open-loop rate, or its knee)."""

    deployment: Deployment
    rate_rps: float = 0.0  # 0 = closed loop; else open loop, Poisson arrivals at this many requests/s
    knee: bool = False  # the most requests/s whose p99 meets the SLA, found by bisection

    def label(self) -> str:
        load = " knee" if self.knee else (f" @{self.rate_rps:,.0f}/s" if self.rate_rps else "")
        return self.deployment.label() + load

    @property
    def mode(self) -> str:
        return "knee" if self.knee else ("open" if self.rate_rps else "closed")


def grid(
    deployments: Sequence[Deployment], rates: Sequence[float] = (0.0,), knee: bool = False
) -> list[Config]:
    """Every deployment under every load: its knee, or each of `rates` (0 = closed loop)."""
    if knee:
        return [Config(d, 0.0, True) for d in deployments]
    return [Config(d, r) for d, r in itertools.product(deployments, rates)]


def together(
    n: Sequence[int],
    e: Sequence[int],
    policies: Sequence[Policy],
    rates: Sequence[float] = (0.0,),
    **rest: Any,
) -> list[Config]:
    """The seed's Figure 5: p = w = k = each of `n` (one client connection, one worker and one kernel
    executor more per step, each executor fed by its own flow), with every `e`, policy and rate;
    `rest`: the deployment's other fields, the same for every step."""
    return [
        Config(Deployment(nn, nn, nn, ee, pol.max_queries, pol.timeout_us, **rest), rr)
        for nn, ee, pol, rr in itertools.product(n, e, policies, rates)
    ]


def check(configs: Sequence[Config]) -> None:
    """Refuses, before any daemon starts, a point the daemon or the generator would not take
    (ValueError naming the value and its range)."""
    for c in configs:
        c.deployment.check()
        if not 0 <= c.rate_rps < float("inf"):
            raise ValueError(f"rate {c.rate_rps} is out of range: 0 (closed loop) or requests/s above 0")


def is_together(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the rows are a p = w = k series of more than one step (drawn as a scaling plot)."""
    return len({r["p"] for r in rows}) > 1 and all(r["p"] == r["w"] == r["k"] for r in rows)


class NoKnee(ServeError):
    """A knee search that found no rate meeting the SLA (a point the machine cannot serve within
    it, or a run spoiled by the machine's noise at every rate tried)."""


@dataclass(frozen=True)
class Setup:
    """What every point runs on: the rules, the trace, and how long and hard each is measured."""

    ruletype: str
    rules: str
    trace: Trace
    duration_s: float = 3.0  # per run (each step of a knee search)
    sla_p99_us: float = 5000.0  # the knee's bound
    knee_steps: int = 5  # bisections
    emulate_profile: str | None = None  # the emulated matcher's device profile and its queries
    emulate_queries: str | None = None


def sweep(
    setup: Setup,
    configs: Sequence[Config],
    progress: Callable[[str], None] | None = None,
    failed: list[dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Measures every point with a fresh daemon; returns one row per point. The first point is
    run once more before it, unrecorded: the first run after a quiet spell measured up to 2x
    slower here (caches, page cache, CPU frequency), and the first row is the 1p 1w 1k 1e row
    `offload plan calibrate` takes its stage costs from. (A knee search is not repeated: each
    begins with a second of closed loop.) With `failed`, a knee search that found no rate is
    listed there ({label, why}) and the sweep goes on; without it, it ends the sweep."""
    say = progress or (lambda _m: None)
    rows = []
    runs = [(-1, configs[0])] if configs and not configs[0].knee else []  # a knee has its own warm-up
    for i, cfg in [*runs, *enumerate(configs)]:
        say("warming up" if i < 0 else f"[{i + 1}/{len(configs)}] {cfg.label()}")
        try:
            with tempfile.TemporaryDirectory(prefix="offload-sweep-") as tmp:  # the daemon's socket files
                row = measure(setup, cfg, tmp)
        except NoKnee as e:
            if failed is None:
                raise
            failed.append({"label": cfg.label(), "why": str(e)})
            say(f"{cfg.label()}: {e}")
            continue
        if i >= 0:
            rows.append(row)
    return rows


def measure(setup: Setup, cfg: Config, tmp: str) -> dict[str, Any]:
    """One point: its daemon started, its frames built (encoded with the daemon's dictionary
    where the point says so), the generator run, the daemon stopped (every wait bounded)."""
    d = cfg.deployment
    ep, ctl = endpoint(d.transport, tmp), f"ipc://{tmp}/control.sock"
    flags = [*daemon.rule_flags(setup.ruletype, setup.rules), "-e", ep, "-c", ctl, "--queue", "1024",
             *d.daemon_flags(), *_emulated_flags(d, setup)]  # fmt: skip
    proc = daemon.start(*flags, timeout_s=180)
    try:
        frames = frames_for(d, ep, setup.trace)
        load = bench.Load(
            mode=cfg.mode, rate=cfg.rate_rps, connections=d.p, in_flight=1, duration_s=setup.duration_s,
            drain_s=2.0, arrivals="poisson" if cfg.mode == "open" else "fixed", seed=1,
            sla_p99_us=setup.sla_p99_us, steps=setup.knee_steps, stages=not cfg.knee, stop_when_gone_s=5.0,
        )  # fmt: skip
        if cfg.knee:
            bench.warm(ep, frames, load)
        cpu0 = _process_cpu_s(proc.pid)
        result = bench.measure(ep, frames, load, control=ctl)
        daemon_cpu_s = _process_cpu_s(proc.pid) - cpu0
    except ValueError as e:
        raise ServeError(f"{cfg.label()}: {e}") from None
    finally:
        daemon.stop(proc)
    return _row(cfg, result, daemon_cpu_s, setup.sla_p99_us)


def _emulated_flags(d: Deployment, setup: Setup) -> list[str]:
    if d.matcher != "emulated":
        return []
    if not (setup.emulate_profile and setup.emulate_queries):
        raise ValueError("the emulated matcher needs a device profile and its queries (--emulate-profile)")
    return ["--emulate-profile", setup.emulate_profile, "--emulate-queries", setup.emulate_queries]


def frames_for(d: Deployment, ep: str, trace: Trace) -> list[bytes]:
    """The requests of a point: the trace's own, or cut to its request size; raw text or codes
    from the dictionary of the daemon at `ep`."""
    from offload import _native

    reqs = trace.fixed_size(d.request_queries).requests if d.request_queries else trace.requests
    if d.request_queries and reqs and reqs[-1][1] < d.request_queries:
        reqs = reqs[:-1] or reqs  # a short last request would be another size
    if d.encoding == "raw":
        fingerprint = int(_native.criteria_fingerprint(list(trace.criteria)))
        return bench.request_frames(trace.columns, None, reqs, fingerprint)
    bits = 16 if d.encoding == "codes16" else 32
    return bench.dictionary_frames(ep, trace.columns, list(trace.criteria), reqs, bits)[0]


def _row(cfg: Config, result: dict[str, Any], daemon_cpu_s: float, sla_p99_us: float) -> dict[str, Any]:
    """The row of one point: the deployment's fields, the load, the figures, the daemon's host
    path by thread role (`host_path`, `stats` → `cpu` over the run, at the knee's rate for a
    knee) and the generator's CPU beside it."""
    row: dict[str, Any] = {**cfg.deployment.fields(), "rate_rps": cfg.rate_rps, "mode": cfg.mode,
                           "label": cfg.label(), "host_path": result.get("daemon_cpu"),
                           "generator_to_host_path": result.get("generator_to_host_path")}  # fmt: skip
    return row | (_knee(cfg, result, sla_p99_us) if cfg.knee else _run(cfg, result, daemon_cpu_s))


def _knee(cfg: Config, result: dict[str, Any], sla_p99_us: float) -> dict[str, Any]:
    """A knee's figures: the search's passing run (rate, throughput, p50, p99), whether the run
    at its rate after the search held the SLA, and what bounded the search."""
    from offload.serve.hostpath import held

    knee, at_knee = result.get("knee"), result.get("at_knee") or {}
    p50 = (knee or {}).get("p50_us")
    if not knee or p50 is None:
        why = result.get("stopped") or "not even the first rate"
        raise NoKnee(f"{cfg.label()}: no rate met p99 <= {sla_p99_us:,.0f} µs ({why}{_lowest_miss(result)})")
    return {
        "queries_per_s": knee["queries_per_s"], "requests_per_s": knee["requests_per_s"],
        "p50_us": p50, "p99_us": knee["p99_us"], "knee_rate_rps": knee["rate_rps"], "sla_p99_us": sla_p99_us,
        "at_knee_held": held(at_knee, knee, sla_p99_us), "generator_bound": result.get("generator"),
    }  # fmt: skip


def _lowest_miss(result: dict[str, Any]) -> str:
    """What failed at the lowest rate a knee search tried (its misses: late, unanswered, not Ok)."""
    tried = [r for r in result.get("runs") or [] if r.get("rate_rps") and r.get("misses")]
    if not tried:
        return ""
    low = min(tried, key=lambda r: r["rate_rps"])
    return f"; at {low['rate_rps']:,.0f} requests/s, the lowest tried: {low['misses']}"


def _run(cfg: Config, result: dict[str, Any], daemon_cpu_s: float) -> dict[str, Any]:
    """A closed- or open-loop run's figures, and what `offload plan calibrate` fits to: stage
    medians by request size and the host CPU the daemon and the generator spent per request."""
    lat = latency_us(result["latency_us"])
    if lat["p50"] is None:  # nothing was answered: no point to place
        why = f"{result['status']}, {result['messages']}"
        raise ServeError(f"{cfg.label()}: no request was answered Ok ({why})")
    answered = max(1, int(result["status"].get("Ok", 0)))
    return {
        "queries_per_s": result["queries_per_s"], "requests_per_s": result["requests_per_s"],
        "p50_us": lat["p50"], "p99_us": lat["p99"], "requests": result["answered"],
        "unanswered": result["unanswered"], "status": result["status"],
        "daemon_cpu_us_per_request": daemon_cpu_s / answered * 1e6,
        "client_cpu_us_per_request": float(result["generator"]["process_cpu_s"]) / answered * 1e6,
        "stage_median_us": result["stage_median_us"], "by_size": by_size(result["by_size"]),
    }  # fmt: skip


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


def write(
    rows: list[dict[str, Any]], out: Path, p99_us: float, qps: float, failed: Sequence[dict[str, str]] = ()
) -> dict[str, Any]:
    """JSON + CSV + the Pareto plot; returns the summary with both recommendations (and the
    points whose knee search found no rate, `failed`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "rows": rows,
        "failed": list(failed),
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
    series = sorted(rows, key=lambda r: (_series(r), r["p"]))
    out: list[dict[str, Any]] = []
    base: dict[str, dict[str, Any]] = {}
    for r in series:
        b = base.setdefault(_series(r), r)
        qps = r["queries_per_s"] / b["queries_per_s"] if b["queries_per_s"] else None
        out.append({
            "n": r["p"], "label": r["label"], "queries_per_s": r["queries_per_s"], "p50_us": r["p50_us"],
            "p99_us": r["p99_us"], "throughput_vs_first": qps,
            "p50_vs_first": r["p50_us"] / b["p50_us"] if b["p50_us"] else None,
        })  # fmt: skip
    return out


def _series(row: dict[str, Any]) -> str:
    """What a p = w = k series keeps the same from step to step: its label less "Np Nw Nk"
    ("1e per-req raw ipc fast", and the load)."""
    return str(row["label"]).split(" ", 3)[3]


def scaling_plot(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Throughput and latency (p50, p99) against p = w = k (the seed's Figure 5), one line per
    e, batching and load."""
    from offload.host.plots import pyplot

    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_series(r), []).append(r)
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
