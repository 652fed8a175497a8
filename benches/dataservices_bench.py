"""The near-data query benchmark behind BENCHMARKS.md (dataservices), part by part:

* ``cardinality``: a suite of queries over the seed's particle table (independent uniform
  columns), a correlated variant (y follows x) and a skewed table: estimated against actual rows
  (DataFusion on the data), the median relative error and the worst ratio, and the cost of
  deciding as the seed reports it: estimation CPU time over the query's execution CPU time.

    python benches/dataservices_bench.py --parts cardinality --rows 6177731 --out benches/results/dataservices

The decision suite (two node profiles x three links) and the case studies run against live
nodes: `offload node case-study` (see docs/dataservices.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.progress import Progress

from offload.dataservices import estimate as E
from offload.dataservices import particles as P
from offload.dataservices import plans
from offload.dataservices import stats as S

console = Console(stderr=True)

SHAPES = (
    "select * from {t} where x >= {a} and y < {b} and z <= {c}",
    "select * from {t} where x >= {a} and y < {b}",
    "select * from {t} where x between {a} and {b2}",
    "select id, vx from {t} where x < {a} or y < {b}",
    "select * from {t} where not (x < {a}) and z > {c}",
    "select * from {t} where (x < {a} or x > {b2}) and y < {c}",
    "select * from {t} where vx * vx + vy * vy > {d}",
    "select t, count(*) as n from {t} where x < {a} group by t",
    "select * from {t} where x between {a} and {b2} and y between {a} and {b2}",
    "select * from {t} where id < {i}",
)
SKEWED = (
    "select * from sk where k = {k}",
    "select * from sk where k > {k}",
    "select * from sk where v < {v}",
    "select * from sk where s = '{s}'",
    "select * from sk where s = '{s}' and v > {v}",
)


def skewed(rows: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "k": np.minimum(rng.zipf(1.3, rows), 10_000).astype(np.int64),
            "v": rng.lognormal(0.0, 1.5, rows),
            "s": pa.array(rng.choice(["red", "green", "blue", "cyan"], rows, p=[0.7, 0.2, 0.09, 0.01])),
        }
    )


def suite(n: int, rows: int, seed: int = 0) -> list[str]:
    """``n`` queries: particle shapes on the independent (``u``) and correlated (``c``) tables,
    skewed shapes on ``sk``; thresholds drawn at random (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a, b, c = (round(float(v), 3) for v in rng.uniform(0.05, 0.95, 3))
        b2 = round(min(0.99, a + float(rng.uniform(0.02, 0.5))), 3)
        if i % 4 == 3:
            shape = SKEWED[(i // 4) % len(SKEWED)]
            out.append(shape.format(k=int(rng.integers(1, 6)), v=round(float(rng.uniform(0.2, 4)), 2),
                                    s=str(rng.choice(["red", "green", "blue", "cyan"]))))  # fmt: skip
            continue
        table = "u" if i % 2 == 0 else "c"
        shape = SHAPES[(i // 2) % len(SHAPES)]
        out.append(shape.format(t=table, a=a, b=b, c=c, b2=b2, d=round(float(rng.uniform(0.5, 5)), 2),
                                i=int(rng.integers(1, rows))))  # fmt: skip
    return out


def cardinality(rows: int, queries: int) -> dict[str, Any]:
    console.print(f"tables of {rows:,} rows and their statistics")
    tables = {
        "u": P.generate(rows, seed=1),
        "c": P.generate(rows, seed=2, correlation=0.9),
        "sk": skewed(rows),
    }
    t0 = time.process_time()
    stats = {n: S.TableStats.of(t) for n, t in tables.items()}
    stats_cpu = time.process_time() - t0
    schemas = {n: t.schema for n, t in tables.items()}
    results = []
    with Progress(console=console) as bar:
        task = bar.add_task("queries", total=queries)
        for sql in suite(queries, rows):
            plan = plans.to_substrait(sql, schemas)
            c0 = time.process_time()
            est = E.estimate(plan, stats)
            est_cpu = time.process_time() - c0
            c1 = time.process_time()
            true = plans.execute(plan, tables, threads=1).num_rows
            exec_cpu = time.process_time() - c1
            results.append({
                "sql": sql, "estimated": est.rows, "actual": true,
                "rel_error": abs(est.rows - true) / max(true, 1),
                "ratio": (max(est.rows, 1) / max(true, 1)),
                "estimate_cpu_s": est_cpu, "execute_cpu_s": exec_cpu, "steps": est.steps,
            })  # fmt: skip
            bar.advance(task)
    errs = [r["rel_error"] for r in results]
    worst = max(results, key=lambda r: max(r["ratio"], 1 / r["ratio"]))
    big = [r["rel_error"] for r in results if r["actual"] >= 1000]
    return {
        "rows": rows,
        "queries": len(results),
        "median_rel_error": statistics.median(errs),
        "median_rel_error_1000_rows_or_more": statistics.median(big) if big else None,
        "worst_ratio": max(worst["ratio"], 1 / worst["ratio"]),
        "worst_query": worst["sql"],
        "decide_cost_median": statistics.median(
            r["estimate_cpu_s"] / max(r["execute_cpu_s"], 1e-9) for r in results
        ),
        "estimate_cpu_ms_median": 1e3 * statistics.median(r["estimate_cpu_s"] for r in results),
        "stats_cpu_s": stats_cpu,
        "results": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="cardinality", help="cardinality (default)")
    ap.add_argument("--rows", type=int, default=P.SEED_ROWS, help="rows per table (default 6,177,731)")
    ap.add_argument("--queries", type=int, default=60, help="queries in the cardinality suite (default 60)")
    ap.add_argument("--out", type=Path, default=Path("benches/results/dataservices"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if "cardinality" in a.parts.split(","):
        r = cardinality(a.rows, a.queries)
        r |= {"date": time.strftime("%Y-%m-%d"), "machine": _machine()}
        (a.out / "cardinality.json").write_text(json.dumps(r, indent=2))
        console.print(
            f"cardinality: {r['queries']} queries, median error {100 * r['median_rel_error']:.2f}% "
            f"({100 * (r['median_rel_error_1000_rows_or_more'] or 0):.2f}% on results of >= 1000 rows), "
            f"worst {r['worst_ratio']:.2f}x ({r['worst_query']}); estimating costs "
            f"{100 * r['decide_cost_median']:.2f}% of executing (median), "
            f"{r['estimate_cpu_ms_median']:.2f} ms"
        )


def _machine() -> str:
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


if __name__ == "__main__":
    main()
