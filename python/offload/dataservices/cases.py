"""The seed's two case studies (003, slides 30-31) on a node: the query, the node's estimate
and decision, both ways measured, and the transfer sizes, beside the seed's figures.

Seed setting: 6,177,731 particles; the host two 16-core Xeon E5-2698 (32 threads), the node a
BlueField-2 (6 threads). Ours: whatever node is given (e.g. the bluefield2 profile) and this host.
"""

from __future__ import annotations

import statistics
from typing import Any

CASES: dict[str, dict[str, Any]] = {
    "I": {
        "sql": "select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1",
        "seed": {
            "estimated_rows": 55_036.7,
            "actual_rows": 55_517,
            "estimate_error": 0.0087,
            "decision": "offload",
            "offload_faster_by": 0.746,
            "transfer_mib": {"offload": 3.81, "pushback": 424.2},
        },
    },
    "II": {
        "sql": "select * from particles where x >= 0.5 and y < 0.55 and z <= 0.67",
        "seed": {
            "selectivity": 0.184,
            "decision": "pushback",
            "offload_faster_by": 0.0138,
        },
    },
}


def run_case(client: Any, name: str, repeat: int = 3) -> dict[str, Any]:
    """Explains and runs one case both ways (``repeat`` times each, medians) on ``client``'s node."""
    case = CASES[name]
    plan = client.plan(case["sql"])
    ex = client.explain(plan)
    est = ex["estimate"] or client.estimate(plan)  # None where the node fell back: ask, and say why
    runs: dict[str, list[Any]] = {"offload": [], "pushback": []}
    for _ in range(repeat):
        for way in runs:
            runs[way].append(client.query(plan, way)[1])
    med = {w: statistics.median(t.total for t in ts) for w, ts in runs.items()}
    rows = runs["offload"][0].rows
    faster = min(med, key=lambda w: med[w])
    return {
        "case": name,
        "sql": case["sql"],
        "estimated_rows": est["rows"],
        "actual_rows": rows,
        "estimate_error": abs(est["rows"] - rows) / max(rows, 1),
        "estimate_ms": 1e3 * est["seconds"],
        "decision": ex["way"],
        "why": ex["why"],
        "predicted_s": {w: ex["decision"][f"{w}_s"] for w in runs} if "decision" in ex else None,
        "predicted_crossover_mbit": ex.get("decision", {}).get("crossover_mbit"),
        "above_crossover": ex.get("decision", {}).get("above_crossover"),
        "measured_s": med,
        "faster": faster,
        "offload_faster_by": 1 - med["offload"] / med["pushback"],
        "decision_right": ex["way"] == faster,
        "transfer_mib": {w: ts[0].arrow_bytes / 2**20 for w, ts in runs.items()},
        "stages_ms": {w: {k: 1e3 * v for k, v in _stages(ts).items()} for w, ts in runs.items()},
        "seed": case["seed"],
    }


def _stages(ts: list[Any]) -> dict[str, float]:
    keys = ("info", "node_engine", "node", "fetch", "host", "total")
    return {k: statistics.median(getattr(t, k) for t in ts) for k in keys}
