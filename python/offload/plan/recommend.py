"""`offload plan recommend`: pick a configuration from measured sweeps and/or simulated ones.

Two questions, as in the seed's Figure 8:
- the most throughput whose p99 stays under an SLA;
- the lowest p99 that still delivers a throughput target.

Measured rows come from `offload serve sweep`; simulated rows from `offload plan simulate`'s model
over a grid (calibrated costs, optionally a what-if kernel preset), each carrying the
calibration's validation error. Both go on one Pareto plot with the choice marked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from offload.plan.simulate import Costs, Load, pipeline_for, request_sizes, simulate, with_preset
from offload.serve.grid import Deployment
from offload.serve.sweep import best_under_p99, lowest_latency_for, pareto, pareto_plot


def simulated_rows(
    costs: Costs,
    sizes: Sequence[int],
    points: Sequence[Deployment],
    cpus: int | None = None,
    duration_s: float = 0.5,
    error: dict[str, float] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per point of the grid (`offload.serve.grid`), closed loop, in `offload serve
    sweep`'s row format and named as it names them; a point with a request size replays
    requests of that size, else the trace's `sizes`."""
    say = progress or (lambda _m: None)
    rows = []
    for i, d in enumerate(points):
        say(f"[{i + 1}/{len(points)}] simulating {d.label()}")
        load = Load(request_sizes(d, sizes), duration_s=duration_s, warmup_s=0.1)
        r = simulate(pipeline_for(d, cpus), costs, load)
        rows.append({
            **d.fields(), "label": d.label(), "mode": "closed", "rate_rps": 0.0, "source": "simulated",
            "queries_per_s": r.throughput_qps, "requests_per_s": r.throughput_rps,
            "p50_us": r.percentile(50) * 1e6, "p99_us": r.percentile(99) * 1e6,
            "validation_error": error,
        })  # fmt: skip
    return rows


def knee_rows(
    calib: dict[str, Any],
    sizes: Sequence[int],
    points: Sequence[Deployment],
    cpus: float | None = None,
    progress: Callable[[str], None] | None = None,
    devices: Mapping[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Each point's knee predicted from a calibration on knees (`offload.plan.knees`): the role
    costs of its kind, the fitted share of the model's capacity and stall; each row carries its
    kind's validation error (the median over all knees where its kind was not checked). A point
    whose matcher is one of `devices` (a what-if preset's name → its [costs]) pays its host kind's
    roles with the device's kernel instead of the match; it is marked `what_if` and has no
    validation error (nothing of it was measured)."""
    from offload.plan import knees

    say, devices = progress or (lambda _m: None), devices or {}
    base, u, stall = Costs(**calib["base_costs"]), calib["knee_utilisation"], calib["stall_s"]
    if u is None or stall is None:
        raise ValueError("the calibration holds too few knees to predict any (two of one kind at least)")
    mae = calib["median_abs_error"]
    rows = []
    for i, d in enumerate(points):
        k = knees.host_kind(d, calib)
        say(f"[{i + 1}/{len(points)}] the knee of {d.label()}")
        costs = knees.stage_costs(d, knees.RoleCosts(**calib["kinds"][k]), knees.mean_queries(d, sizes), base)
        if d.matcher in devices:
            costs = with_preset(costs, devices[d.matcher])
        pred = knees.predict(d, costs, sizes, cpus or calib["cpus"], u, stall)
        error = mae["by_kind"].get(k) or {"queries_per_s": mae["queries_per_s"], "p99_us": mae["p99"]}
        rows.append({
            **d.fields(), "label": f"{d.label()} knee", "mode": "knee", "rate_rps": 0.0,
            "source": "simulated", "what_if": d.matcher in devices,
            "queries_per_s": pred["queries_per_s"], "requests_per_s": pred["requests_per_s"],
            "p50_us": pred["p50_us"], "p99_us": pred["p99_us"], "knee_rate_rps": pred["rate_rps"],
            "validation_error": None if d.matcher in devices else
            {"queries_per_s": error["queries_per_s"], "p99": error["p99_us"]},
        })  # fmt: skip
    return rows


def recommend(
    rows: Sequence[dict[str, Any]], p99_us: float | None = None, target_qps: float | None = None
) -> dict[str, Any]:
    """Both answers (None where nothing qualifies) and the Pareto front of every row. Rows of a
    what-if device (`what_if`) are not deployable here: the answers skip them, and the best of
    them under the p99 bound is given beside (`what_if`)."""
    here = [r for r in rows if not r.get("what_if")]
    q1 = None if p99_us is None else {"p99_us": p99_us, "config": best_under_p99(here, p99_us)}
    q2 = None
    if target_qps is not None:
        q2 = {"queries_per_s": target_qps, "config": lowest_latency_for(here, target_qps)}
    front = [[r["label"], r.get("source", "measured")] for r in pareto(rows)]  # labels repeat across sources
    result: dict[str, Any] = {"best_under_p99": q1, "lowest_latency_for": q2, "pareto": front}
    devices = [r for r in rows if r.get("what_if")]
    if devices and p99_us is not None:
        result["what_if"] = {"p99_us": p99_us, "config": best_under_p99(devices, p99_us)}
    return result | {"answer": answer(here, result)}


def answer(rows: Sequence[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any] | None:
    """The one answer: the configuration to deploy, for which load and p99 bound, with its
    measured figures beside its simulated ones where both exist (rows of the same label)."""
    pick = chosen(result)
    if pick is None:
        return None
    q1, q2 = result["best_under_p99"] or {}, result["lowest_latency_for"] or {}
    by_source = {r.get("source", "measured"): r for r in rows if r["label"] == pick["label"]}
    figures = ("queries_per_s", "p50_us", "p99_us")

    def of(source: str) -> dict[str, Any] | None:
        r = by_source.get(source)
        return (
            None
            if r is None
            else {k: r[k] for k in figures} | {"validation_error": r.get("validation_error")}
        )

    return {"config": pick["label"], "p99_bound_us": q1.get("p99_us"), "target_qps": q2.get("queries_per_s"),
            "measured": of("measured"), "simulated": of("simulated")}  # fmt: skip


def answer_line(a: dict[str, Any] | None) -> str:
    """The answer in one line, as the report opens with it."""
    if a is None:
        return "No configuration meets the bound asked: nothing to deploy."
    bound = f"p99 ≤ {a['p99_bound_us'] / 1e3:g} ms" if a.get("p99_bound_us") else "the throughput target"
    config, at = a["config"].removesuffix(" knee"), " at its knee" if a["config"].endswith(" knee") else ""
    parts = []
    if a["measured"]:
        m = a["measured"]
        parts.append(f"measured {m['queries_per_s'] / 1e6:.2f} M queries/s at p99 {m['p99_us'] / 1e3:.1f} ms")
    if a["simulated"]:
        sim, err = a["simulated"], (a["simulated"].get("validation_error") or {}).get("queries_per_s")
        note = f", validation error ±{err:.0%}" if err is not None else ""
        parts.append(
            f"simulated {sim['queries_per_s'] / 1e6:.2f} M at p99 {sim['p99_us'] / 1e3:.1f} ms{note}"
        )
    return f"Deploy {config} for {bound}{at}: {'; '.join(parts)}."


def on_front(rows: Sequence[dict[str, Any]], front: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """The rows of a recommendation's Pareto front, by throughput."""
    keys = {(label, source) for label, source in front}
    return sorted((r for r in rows if (r["label"], r.get("source", "measured")) in keys),
                  key=lambda r: r["queries_per_s"])  # fmt: skip


def measured_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The rows of `offload serve sweep` JSON files, tagged measured; a ValueError names the file."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        try:
            rows += tag(json.loads(path.read_text())["rows"], "measured")
        except (OSError, KeyError, ValueError) as ex:
            raise ValueError(f"{path}: {ex}") from None
    return rows


def chosen(result: dict[str, Any]) -> dict[str, Any] | None:
    """The configuration a recommendation picks: the SLA's answer, else the target's."""
    q1, q2 = result["best_under_p99"] or {}, result["lowest_latency_for"] or {}
    return q1.get("config") or q2.get("config")


def plot(rows: Sequence[dict[str, Any]], chosen: dict[str, Any] | None, path: Path, title: str) -> Path:
    return pareto_plot(rows, path, title, chosen)


def tag(rows: Sequence[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    return [r if "source" in r else {**r, "source": source} for r in rows]


__all__ = ["answer", "answer_line", "knee_rows", "on_front", "plot", "recommend", "simulated_rows", "tag"]
