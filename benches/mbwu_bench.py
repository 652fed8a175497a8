"""The MBWU benchmark behind BENCHMARKS.md (seed 003's media-based work unit) on this machine's disk:

* YCSB A and C on RocksDB (rocksdict; 1 KiB values, zipfian keys) and a filtered Arrow scan of
  Parquet files, each preconditioned, swept over worker counts to the plateau, read in its
  steady-state window (``offload.metrics.mbwu``);
* with ``--embedded`` (default ``bluefield2``), the same sweep in a process held to that node
  budget, and its throughput in MBWUs;
* the seed's key-value case study: $/MBWU, kWh/MBWU and m³/MBWU of its host and embedded
  systems from data/prices/catalog.toml, beside the slide's reductions.

With ``--repeats N`` the whole procedure runs N times and each workload's MBWU is the median.

    python benches/mbwu_bench.py                      # about 2 minutes on 2 vCPUs
    python benches/mbwu_bench.py --embedded none --seconds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from offload.metrics import mbwu as M

console = Console(stderr=True)
OUT = Path(__file__).resolve().parent / "results" / "metrics"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/offload-mbwu"), help="on the disk under test")
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--threads", default="1,2,4,8")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--scan-rows", type=int, default=4_000_000)
    ap.add_argument("--embedded", default="bluefield2", help="a node budget, or none")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    plan = M.Plan(
        work_dir=a.dir, keys=a.keys, threads=tuple(int(t) for t in a.threads.split(",")), seconds=a.seconds,
        warmup_s=a.warmup,
        scan_rows=a.scan_rows, embedded=None if a.embedded == "none" else a.embedded,
    )  # fmt: skip
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    with console.status("mbwu") as status:
        for i in range(a.repeats):
            runs.append(M.measure(plan, lambda s, i=i: status.update(f"run {i + 1}/{a.repeats}: {s}")))
    summary = {w: _summary([r["workloads"][w] for r in runs]) for w in plan.workloads}
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "wall_s": time.time() - t0,
        "machine": runs[-1]["machine"],
        "plan": runs[-1]["plan"],
        "mbwu": summary,
        "runs": runs,
        "seed_case_study": M.seed_case_study(),
    }
    if plan.embedded:
        out["this_machine_costs"] = M.this_machine_costs(runs[-1])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "mbwu.json").write_text(json.dumps(out, indent=2) + "\n")
    M.plot(runs[-1], a.out / "mbwu.png")
    for w, s in summary.items():
        emb = "" if s["embedded_mbwus"] is None else f", {plan.embedded} {s['embedded_mbwus']:.2f} MBWUs"
        console.print(f"{w}: MBWU {s['median']:,.0f} {s['unit']} (runs {s['runs']}){emb}")
    console.print(f"wrote {a.out / 'mbwu.json'} and {a.out / 'mbwu.png'}")


def _summary(xs: list[dict[str, Any]]) -> dict[str, Any]:
    """A workload over the repeats: the median MBWU, every run's, and where each plateaued."""
    emb = [x["embedded_mbwus"] for x in xs if x.get("embedded_mbwus") is not None]
    return {
        "unit": xs[0]["unit"],
        "median": statistics.median(x["mbwu"] for x in xs),
        "runs": [round(x["mbwu"]) for x in xs],
        "threads_at_mbwu": [x["host"]["threads_at_mbwu"] for x in xs],
        "plateau_reached": [x["host"]["plateau_reached"] for x in xs],
        "embedded_mbwus": statistics.median(emb) if emb else None,
    }


if __name__ == "__main__":
    main()
