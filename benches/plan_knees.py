"""Does the planner recommend what the service can do? (issue 44; BENCHMARKS.md, "The planner
recommends what the service can do").

From a knee sweep of the grid (`offload serve sweep --knee`, given with --sweep): the calibration
on knees (offload.plan.knees) and its leave-one-out errors; the recommendation over a larger
simulated grid (more connections and shapes than measured, every kind measured); then the
answer and the best measured point, each measured again at its knee --runs times, interleaved,
side by side: the answer's measured knee against the best one's (target: within 10%), and its
predicted knee and p99 against its measured medians (targets: 10% and 20%). Beside them, how the
machine moved since the sweep (`drift`: the best point's knee again over its knee in the sweep)
and the answer predicted again with the role costs of its own check runs
(`predicted_with_check_costs`: the model's error apart from that drift).

Usage: python benches/plan_knees.py --sweep knees.json --ruletype R --rules R --trace DIR
       --out build/bench/plan-knees.json [--runs 3] [--duration 1] [--profile probe.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import rules
from offload.files import write_text
from offload.host.machine import machine
from offload.plan import calibrate, knees, recommend
from offload.plan.simulate import Costs
from offload.serve import grid, inject, sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, type=Path, nargs="+",
                    help="`offload serve sweep --knee` JSON; several: repeats (median knee)")  # fmt: skip
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--trace", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--profile", type=Path, help="`offload probe` profile: the ipc channel")
    ap.add_argument("--runs", type=int, default=3, help="knees of the answer and of the best measured")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per knee step")
    ap.add_argument("--p99-us", type=float, default=5000.0)
    a = ap.parse_args()

    rows = _median_rows([json.loads(p.read_text())["rows"] for p in a.sweep])
    sizes = calibrate.trace_sizes(a.trace)
    channel = calibrate.profile_channel(json.loads(a.profile.read_text())) if a.profile else None
    base = Costs(channel_latency_s=channel[0], channel_bps=channel[1]) if channel else Costs()
    cal = knees.calibrate(rows, sizes, base, len(os.sched_getaffinity(0)), print)
    shapes = [(1, 0, 1), (2, 0, 1), (1, 1, 1), (2, 1, 1), (1, 2, 1)]
    points = knees.points(cal, [1, 2, 4, 8], shapes, [grid.Policy(4096)], [256])
    simulated = recommend.knee_rows(cal, sizes, points, progress=print)
    measured = recommend.tag(rows, "measured")
    rec = recommend.recommend(measured + simulated, p99_us=a.p99_us)
    answer = recommend.chosen(rec)
    best = max(measured, key=lambda r: r["queries_per_s"])
    print(f"answer: {answer and answer['label']}; best measured: {best['label']}")
    again = _measure_again(a, [answer, best] if answer else [best])
    result = _provenance() | _result(cal, rec, answer, best, simulated, again)
    result["drift"] = _drift(best, again[best["label"]])
    if answer:
        result["predicted_with_check_costs"] = _with_check_costs(cal, sizes, again[answer["label"]])
    write_text(a.out, json.dumps(result, indent=1))
    print(f"wrote {a.out}")


def _median_rows(repeats: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per point (label), the repeat with the median knee (its figures and host path together)
    with the median p50 and p99 of the repeats (the targets are about medians); `knee_runs`
    keeps every repeat's knee."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for rows in repeats:
        for r in rows:
            by_label.setdefault(r["label"], []).append(r)
    out = []
    for runs in by_label.values():
        ranked = sorted(runs, key=lambda r: r["queries_per_s"])
        latency = {key: statistics.median(r[key] for r in runs) for key in ("p50_us", "p99_us")}
        knee_runs = [r["queries_per_s"] for r in runs]
        out.append(ranked[(len(ranked) - 1) // 2] | latency | {"knee_runs": knee_runs})
    return out


def _measure_again(a: argparse.Namespace, picks: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each pick's knee --runs times, interleaved pick by pick."""
    rs = rules.load(a.ruletype, a.rules)
    trace = inject.load_trace(a.trace, rs.criterion_codes)
    setup = sweep.Setup(a.ruletype, a.rules, trace, duration_s=a.duration, sla_p99_us=a.p99_us)
    out: dict[str, list[dict[str, Any]]] = {p["label"]: [] for p in picks}
    for i in range(a.runs):
        for p in picks:
            failed: list[dict[str, str]] = []
            got = sweep.sweep(setup, sweep.grid([grid.Deployment.of_row(p)], knee=True), failed=failed)
            out[p["label"]] += got or [{"failed": failed}]
            print(f"run {i + 1}: {p['label']}: {got[0]['queries_per_s'] / 1e6:.2f} M q/s" if got else failed)
    return out


def _provenance() -> dict[str, Any]:
    """What made the result: the command line, commit, date and machine."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {"benchmark": "plan-knees", "command": " ".join([sys.executable, *sys.argv]),
            "commit": commit.stdout.strip(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine()}  # fmt: skip


def _drift(best: dict[str, Any], runs: list[dict[str, Any]]) -> float | None:
    """How the machine moved between the sweep and the check: the best point's knee measured
    again (median) over its knee in the sweep (median of the repeats)."""
    again = _median(runs, "queries_per_s")
    return again / statistics.median(best["knee_runs"]) if again and best.get("knee_runs") else None


def _with_check_costs(
    cal: dict[str, Any], sizes: list[int], runs: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The answer predicted again with the role costs its own check runs measured (the run with
    the median knee) and the calibration's fitted parameters: the model's error once the costs
    are the machine's of the moment, apart from how the machine moved since the sweep."""
    ranked = sorted((r for r in runs if "queries_per_s" in r), key=lambda r: r["queries_per_s"])
    role = knees.RoleCosts.of_row(ranked[(len(ranked) - 1) // 2]) if ranked else None
    if role is None:
        return None
    d = grid.Deployment.of_row(ranked[0])
    costs = knees.stage_costs(d, role, knees.mean_queries(d, sizes), Costs(**cal["base_costs"]))
    got = knees.predict(d, costs, sizes, cal["cpus"], cal["knee_utilisation"], cal["stall_s"])
    q, p99 = _median(runs, "queries_per_s"), _median(runs, "p99_us")
    return {
        "queries_per_s": got["queries_per_s"], "p99_us": got["p99_us"],
        "error": {"queries_per_s": got["queries_per_s"] / q - 1 if q else None,
                  "p99": got["p99_us"] / p99 - 1 if p99 else None},
    }  # fmt: skip


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    got = [r[key] for r in runs if key in r]
    return statistics.median(got) if got else None


def _result(
    cal: dict[str, Any], rec: dict[str, Any], answer: dict[str, Any] | None, best: dict[str, Any],
    simulated: list[dict[str, Any]], again: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:  # fmt: skip
    """The calibration, the answer, and the figures the targets are about."""
    label = answer["label"] if answer else None
    predicted = next((r for r in simulated if r["label"] == label), None)
    a_q, a_p99 = (
        (_median(again[label], "queries_per_s"), _median(again[label], "p99_us")) if label else (None, None)
    )
    b_q = _median(again[best["label"]], "queries_per_s")
    return {
        "calibration": cal, "recommend": {k: v for k, v in rec.items() if k != "rows"},
        "simulated": simulated,
        "again": again, "answer": label, "best_measured": best["label"],
        "answer_knee_qps_median": a_q, "answer_p99_us_median": a_p99, "best_knee_qps_median": b_q,
        "answer_over_best": a_q / b_q if a_q and b_q else None,
        "predicted": predicted and {k: predicted[k] for k in ("queries_per_s", "p50_us", "p99_us")},
        "predicted_error": predicted and a_q and {
            "queries_per_s": predicted["queries_per_s"] / a_q - 1,
            "p99": predicted["p99_us"] / a_p99 - 1 if a_p99 else None,
        },
    }  # fmt: skip


if __name__ == "__main__":
    main()
