"""The near-data query benchmark behind BENCHMARKS.md (dataservices), part by part:

* ``cardinality``: a suite of queries over the seed's particle table (independent uniform
  columns), a correlated variant (y follows x), a skewed table (equalities on heavy, medium,
  light and absent Zipf keys) and an events table (dates, zoned timestamps, decimals, LIKE
  prefixes, string equality and IN, an IN list of 10,000 values): estimated against actual rows
  (DataFusion on the data), the median relative error (overall and by kind), the worst ratio
  (overall and of the skewed equalities), and the cost of deciding as the seed reports it:
  estimation CPU time over the query's execution CPU time.

    python benches/dataservices_bench.py --parts cardinality --rows 6177731 --out benches/results/dataservices

* ``decisions`` (root: namespaces, cgroups, tc): for two node profiles, time models trained on
  an unshaped link, then for three link rates a suite of queries (selectivities from 0.1% to all
  rows, projections, aggregates) run ``auto`` (the node's decision) and both ways (medians):
  how often the decision took the faster way, and the time lost on the others.

    python benches/dataservices_bench.py --parts decisions --decision-rows 1000000

* ``crossover`` (root; after ``decisions``, whose bluefield2 models it uses): Case II and two
  queries heavy in functions on the bluefield2 node over link rates from 250 Mbit/s to 10 Gbit/s,
  both ways measured at each: where the faster way changes, against the crossover the decision
  predicts.

    python benches/dataservices_bench.py --parts crossover --decision-rows 1000000

* ``stream``: pushing back 1 M particles (``select *``) from a node in this process, with the
  node's bounded batches (65,536 rows, 4 MiB) against one batch of everything (as before issue
  26): when the first rows arrive, the whole fetch, and the largest message.

    python benches/dataservices_bench.py --parts stream
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
from offload.host.machine import describe

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
    "select * from sk where k = {heavy}",
    "select * from sk where k = {medium}",
    "select * from sk where k = {light}",
    "select * from sk where k = {absent}",
    "select * from sk where k > {heavy}",
    "select * from sk where v < {v}",
    "select * from sk where s = '{s}'",
    "select * from sk where s = '{s}' and v > {v}",
)
"""Equalities on heavy (ranks 1-3), medium (20-100), light (500-2,000) and absent Zipf keys."""
EVENTS = (
    "select * from ev where d >= DATE '{date}'",
    "select * from ev where d between DATE '{date}' and DATE '{date2}'",
    "select * from ev where ts < TIMESTAMP '{ts}'",
    "select * from ev where name like '{prefix}%'",
    "select * from ev where name = '{name}'",
    "select * from ev where name in ('{name}', '{name2}', '{prefix}-1', '{prefix}-2')",
    "select * from ev where amount > {amount}",
    "select * from ev where d >= DATE '{date}' and name like '{prefix}%'",
    "select * from ev where user_id in ({users})",
)
"""Dates, zoned timestamps, decimals, LIKE prefixes, string equality and IN, and an IN list of
10,000 values."""
PREFIXES = ("alpha", "beta", "gamma", "delta", "omega")
IN_LIST = 10_000


def skewed(rows: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "k": np.minimum(rng.zipf(1.3, rows), 10_000).astype(np.int64),
            "v": rng.lognormal(0.0, 1.5, rows),
            "s": pa.array(rng.choice(["red", "green", "blue", "cyan"], rows, p=[0.7, 0.2, 0.09, 0.01])),
        }
    )


def events(rows: int, seed: int = 6) -> pa.Table:
    """Dates over six years, zoned timestamps (minutes) over one, names of five prefixes with
    Zipf suffixes, users uniform over rows / 2, amounts as decimals."""
    rng = np.random.default_rng(seed)
    prefix = rng.choice(np.array(PREFIXES), rows, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    suffix = np.minimum(rng.zipf(1.4, rows), 50_000).astype(str)
    minutes = rng.integers(0, 525_600, rows)
    cents = np.round(rng.lognormal(6, 1.2, rows)).astype(np.int64)
    return pa.table({
        "d": pa.array(rng.integers(18_262, 20_454, rows).astype(np.int32), pa.date32()),
        "ts": pa.array(1_735_689_600_000_000 + minutes * 60_000_000, pa.timestamp("us", tz="Europe/Zurich")),
        "name": pa.array(np.char.add(np.char.add(prefix, "-"), suffix)),
        "user_id": rng.integers(0, max(1, rows // 2), rows),
        "amount": pa.array(cents, pa.int64()).cast(pa.decimal128(19, 0)).cast(pa.decimal128(21, 2)),
    })  # fmt: skip


def suite(n: int, rows: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (kind, sql) queries: particle shapes on the independent (``u``) and correlated
    (``c``) tables (two in five), skewed shapes on ``sk`` (one in five), dates, timestamps,
    strings and an IN list on ``ev`` (two in five); thresholds and keys drawn at random (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a, b, c = (round(float(v), 3) for v in rng.uniform(0.05, 0.95, 3))
        b2 = round(min(0.99, a + float(rng.uniform(0.02, 0.5))), 3)
        slot = i % 5
        if slot == 2:
            shape = SKEWED[(i // 5) % len(SKEWED)]
            kind = "skewed equality" if "k = " in shape else "skewed"
            out.append(
                (
                    kind,
                    shape.format(
                        heavy=int(rng.integers(1, 4)),
                        medium=int(rng.integers(20, 101)),
                        light=int(rng.integers(500, 2001)),
                        absent=int(rng.integers(20_000, 10**6)),
                        v=round(float(rng.uniform(0.2, 4)), 2),
                        s=str(rng.choice(["red", "green", "blue", "cyan"])),
                    ),
                )
            )
            continue
        if slot in (3, 4):
            shape = EVENTS[(i // 5 * 2 + slot - 3) % len(EVENTS)]
            out.append(_event_query(shape, rng, rows))
            continue
        table = "u" if slot == 0 else "c"
        shape = SHAPES[(i // 5) % len(SHAPES)]
        out.append(
            (
                "particles",
                shape.format(
                    t=table,
                    a=a,
                    b=b,
                    c=c,
                    b2=b2,
                    d=round(float(rng.uniform(0.5, 5)), 2),
                    i=int(rng.integers(1, rows)),
                ),
            )
        )
    return out


def _event_query(shape: str, rng: np.random.Generator, rows: int) -> tuple[str, str]:
    import datetime as dt

    day = dt.date(2020, 1, 1) + dt.timedelta(days=int(rng.integers(0, 2190)))
    day2 = day + dt.timedelta(days=int(rng.integers(1, 400)))
    ts = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=int(rng.integers(0, 525_600)))
    prefix = str(rng.choice(np.array(PREFIXES)))
    names = [f"{rng.choice(np.array(PREFIXES))}-{int(x)}" for x in (rng.integers(1, 4), rng.integers(5, 400))]
    users = ", ".join(
        str(int(u)) for u in rng.choice(max(2, rows // 2), min(IN_LIST, max(1, rows // 2)), replace=False)
    )
    kind = "in list" if "user_id in" in shape else "strings" if "name" in shape else "dates"
    return kind, shape.format(
        date=day,
        date2=day2,
        ts=ts.isoformat(sep=" "),
        prefix=prefix,
        name=names[0],
        name2=names[1],
        amount=round(float(rng.lognormal(6, 1.2)), 2),
        users=users,
    )


def cardinality(rows: int, queries: int) -> dict[str, Any]:
    console.print(f"tables of {rows:,} rows and their statistics")
    tables = {
        "u": P.generate(rows, seed=1),
        "c": P.generate(rows, seed=2, correlation=0.9),
        "sk": skewed(rows),
        "ev": events(rows),
    }
    t0 = time.process_time()
    stats = {n: S.TableStats.of(t) for n, t in tables.items()}
    stats_cpu = time.process_time() - t0
    counted = [c.count for st in stats.values() for c in st.columns.values() if c.count is not None]
    schemas = {n: t.schema for n, t in tables.items()}
    results = []
    with Progress(console=console) as bar:
        task = bar.add_task("queries", total=queries)
        for kind, sql in suite(queries, rows):
            c0 = time.perf_counter()
            plan = plans.to_substrait(sql, schemas)
            plan_s = time.perf_counter() - c0
            c0 = time.process_time()
            est = E.estimate(plan, stats)
            est_cpu = time.process_time() - c0
            c1 = time.process_time()
            true = plans.execute(plan, tables, threads=1).num_rows
            exec_cpu = time.process_time() - c1
            results.append(
                {
                    "kind": kind,
                    "sql": sql if len(sql) < 400 else sql[:200] + f"... ({len(sql):,} characters)",
                    "estimated": est.rows,
                    "actual": true,
                    "rel_error": abs(est.rows - true) / max(true, 1),
                    "ratio": (max(est.rows, 1) / max(true, 1)),
                    "estimate_cpu_s": est_cpu,
                    "execute_cpu_s": exec_cpu,
                    "to_substrait_s": plan_s,
                    "steps": est.steps,
                }
            )
            bar.advance(task)
    return _cardinality_summary(results, rows, stats_cpu, counted)


def _cardinality_summary(
    results: list[dict[str, Any]], rows: int, stats_cpu: float, counted: list[Any]
) -> dict[str, Any]:
    def either(r: dict[str, Any]) -> float:
        return max(r["ratio"], 1 / r["ratio"])

    errs = [r["rel_error"] for r in results]
    worst = max(results, key=either)
    big = [r["rel_error"] for r in results if r["actual"] >= 1000]
    kinds = sorted({r["kind"] for r in results})
    eq = [r for r in results if r["kind"] == "skewed equality"]
    worst_eq = max(eq, key=either) if eq else None
    in_lists = [r for r in results if r["kind"] == "in list"]
    return {
        "rows": rows,
        "queries": len(results),
        "median_rel_error": statistics.median(errs),
        "median_rel_error_1000_rows_or_more": statistics.median(big) if big else None,
        "median_rel_error_by_kind": {
            k: statistics.median(r["rel_error"] for r in results if r["kind"] == k) for k in kinds
        },
        "worst_ratio": either(worst),
        "worst_query": worst["sql"],
        "skewed_equality_worst_ratio": either(worst_eq) if worst_eq else None,
        "skewed_equality_worst_query": worst_eq["sql"] if worst_eq else None,
        "decide_cost_median": statistics.median(
            r["estimate_cpu_s"] / max(r["execute_cpu_s"], 1e-9) for r in results
        ),
        "estimate_cpu_ms_median": 1e3 * statistics.median(r["estimate_cpu_s"] for r in results),
        "in_list_estimate_cpu_ms_median": 1e3 * statistics.median(r["estimate_cpu_s"] for r in in_lists)
        if in_lists
        else None,
        "in_list_to_substrait_s_median": statistics.median(r["to_substrait_s"] for r in in_lists)
        if in_lists
        else None,
        "stats_cpu_s": stats_cpu,
        "count_sketch_s_per_million_rows": 1e6
        * sum(c.seconds for c in counted)
        / max(1, rows * len(counted)),
        "count_sketch_mib": sum(c.nbytes for c in counted) / len(counted) / 2**20 if counted else None,
        "results": results,
    }


DECISION_SQL = (
    "select * from particles where x < {a}",
    "select id, x, y from particles where x < {a} and y < {b}",
    "select * from particles where vx * vx + vy * vy > {d}",
    "select t, count(*) as n, avg(x) as m from particles where y < {a} group by t",
    "select id from particles where x >= {a} and y < {b} and z <= {c}",
    # heavy in functions (none of these shapes is in the training suite)
    "select t, avg(sin(x) + sin(2 * x) + cos(x) + cos(2 * x)) as s, max(sqrt(y)) as r from particles "
    "where x < {a} group by t",
    "select id, atan2(vy, vx) as heading, sqrt(vx * vx + vy * vy) as speed from particles where z < {a}",
)
CROSSOVER_SQL = (
    "select * from particles where x >= 0.5 and y < 0.55 and z <= 0.67",  # Case II
    "select t, avg(sin(x) + sin(2 * x) + cos(x) + cos(2 * x)) as s, max(sqrt(y)) as r from particles "
    "where x < 0.9 group by t",
    "select id, atan2(vy, vx) as heading, sqrt(vx * vx + vy * vy) as speed from particles where z < 0.5",
)
CROSSOVER_LINKS = ("250mbit", "500mbit", "1000mbit", "2500mbit", "5000mbit", "10000mbit")
PROFILES = {
    "bluefield2": ["--profile", "bluefield2"],
    "core": ["--profile", "core"],
}
LINKS = ("100mbit", "1000mbit", "10000mbit")


def decision_suite(n: int, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a, b, c = (round(float(v), 4) for v in 10 ** rng.uniform(-3, 0, 3))  # 0.1% .. 100%
        out.append(
            DECISION_SQL[i % len(DECISION_SQL)].format(a=a, b=b, c=c, d=round(float(rng.uniform(0.1, 8)), 2))
        )
    return out


def worker(node: str, token_file: Path, out: Path, sqls: list[str], repeat: int) -> None:
    """Runs inside the namespace: the queries against one node, auto and both ways."""
    from offload.dataservices.client import NodeClient

    token = token_file.read_text().strip()
    rows = []
    with NodeClient(node, token, timeout_s=600) as c:
        if "particles" not in c.schemas():
            c.register("particles", "particles.parquet")
        for sql in sqls:
            plan = c.plan(sql)
            _, auto = c.query(plan, "auto")
            times = {
                way: [c.query(plan, way)[1].total for _ in range(repeat)] for way in ("offload", "pushback")
            }
            med = {way: statistics.median(ts) for way, ts in times.items()}
            best = min(med, key=lambda w: med[w])
            other = "pushback" if best == "offload" else "offload"
            rows.append({"sql": sql, "decision": auto.way, "measured_s": med, "runs_s": times, "best": best,
                         "right": auto.way == best, "lost_s": med[auto.way] - med[best],
                         # the runs overlap: these repeats cannot tell which way is cheaper
                         "tie": max(times[best]) >= min(times[other]),
                         "predicted": (auto.decision or {}).get("decision")})  # fmt: skip
    out.write_text(json.dumps(rows, indent=2))


WORK = Path("build/dsbench")


def decisions(rows: int, queries: int, repeat: int) -> dict[str, Any]:
    import subprocess

    from offload.dataservices import timemodel as TM
    from offload.host import links as L

    why = L.unavailable_reason()
    if why:
        return {"skipped": why}
    work = WORK.resolve()
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "particles.parquet").exists():
        P.write(P.generate(rows, seed=7), work / "particles.parquet")
    inside, env = _inside(work)
    results: dict[str, Any] = {"rows": rows, "queries": queries, "repeat": repeat, "profiles": {},
                               "model_error": {}}  # fmt: skip
    port = 9301
    for prof, args in PROFILES.items():
        models = work / f"models-{prof}.json"
        models.unlink(missing_ok=True)
        with _node(inside, env, port, [*args, "--link", "none"], work, []):
            console.print(f"{prof}: training on an unshaped link")
            subprocess.run([*inside, "-m", "offload.cli", "node", "train", "-o", str(models), "--node",
                            f"127.0.0.1:{port}", "--token-file", str(work / f"t{port}"),
                            "--sizes", "300000,1000000", "--queries", "48", "--repeat", "5"],
                           env=env, check=True)  # fmt: skip
        port += 1
        samples = TM.Models.load(models).samples
        results["model_error"][prof] = TM.held_out_error(samples)  # the stages, on a random quarter
        results["profiles"][prof] = {}
        for link in LINKS:
            console.print(f"{prof} over {link}: {queries} queries, auto and both ways x {repeat}")
            with _node(inside, env, port, [*args, "--link", link], work, ["--models", str(models)]):
                runs = _worker(inside, env, port, work / f"decisions-{prof}-{link}.json", repeat,
                               "--decision-queries", str(queries))  # fmt: skip
            best = sum(r["measured_s"][r["best"]] for r in runs)
            results["profiles"][prof][link] = {
                "right": sum(r["right"] for r in runs) / len(runs),
                "right_or_tie": sum(r["right"] or r["tie"] for r in runs) / len(runs),
                "time_lost_share": sum(r["lost_s"] for r in runs) / best,
                "offloaded_share": sum(r["decision"] == "offload" for r in runs) / len(runs),
                "prediction_error": prediction_error(runs),
                "runs": runs,
            }
            port += 1
    all_runs = [r for p in results["profiles"].values() for v in p.values() for r in v["runs"]]
    results["right"] = sum(r["right"] for r in all_runs) / len(all_runs)
    results["right_or_tie"] = sum(r["right"] or r["tie"] for r in all_runs) / len(all_runs)
    results["error_by_size"] = error_by_size(results)
    results["reproducibility"] = reproducibility(results)
    return results


def prediction_error(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median relative error of the decision's predicted time each way against the measured
    median (these queries are held out: none of their shapes is trained on)."""
    errs: dict[str, list[float]] = {"offload": [], "pushback": []}
    for r in runs:
        if r["predicted"]:
            for w, e in errs.items():
                e.append(abs(r["predicted"][f"{w}_s"] - r["measured_s"][w]) / r["measured_s"][w])
    return {w: float(np.median(e)) for w, e in errs.items() if e}


def error_by_size(results: dict[str, Any], cut_s: float = 0.1) -> dict[str, dict[str, float | int]]:
    """The predicted whole-query time's median relative error each way, over every profile and
    link, apart for queries that measured at least ``cut_s`` and for quicker ones (where round
    trips and the CPU quota's period weigh most)."""
    errs: dict[str, list[float]] = {}
    for links in results["profiles"].values():
        for v in links.values():
            for r in v["runs"]:
                for w in ("offload", "pushback"):
                    m = r["measured_s"][w]
                    key = f"{w} {'>=' if m >= cut_s else '<'} {cut_s * 1e3:g} ms"
                    errs.setdefault(key, []).append(abs(r["predicted"][f"{w}_s"] - m) / m)
    return {k: {"median": float(np.median(e)), "queries": len(e)} for k, e in sorted(errs.items())}


def reproducibility(results: dict[str, Any]) -> dict[str, float | int]:
    """How far the same offloaded query measures apart in two runs of the suite minutes apart:
    the 100 Mbit/s and 1 Gbit/s runs of the queries whose result the link does not slow at either
    rate (the decision says so). No model can predict these closer than they reproduce."""
    diffs = []
    for links in results["profiles"].values():
        for a, b in zip(links["100mbit"]["runs"], links["1000mbit"]["runs"], strict=True):
            if all(r["predicted"]["offload"]["link beyond the node"] == 0 for r in (a, b)):
                ma, mb = a["measured_s"]["offload"], b["measured_s"]["offload"]
                diffs.append(abs(ma - mb) / min(ma, mb))
    return {"median_difference": float(np.median(diffs)), "queries": len(diffs)}


def crossover(rows: int, repeat: int) -> dict[str, Any]:
    """CROSSOVER_SQL on a bluefield2 node at each of CROSSOVER_LINKS: the measured winner per
    rate, the measured crossover (interpolated in 1/rate, where times are linear) and the
    predicted one."""
    from offload.host import links as L

    why = L.unavailable_reason()
    work = WORK.resolve()
    models = work / "models-bluefield2.json"
    if why or not models.exists():
        return {"skipped": why or f"{models} missing: run --parts decisions first"}
    inside, env = _inside(work)
    per_rate: dict[str, list[dict[str, Any]]] = {}
    for i, link in enumerate(CROSSOVER_LINKS):
        port = 9401 + i
        console.print(f"crossover: bluefield2 over {link}")
        with _node(
            inside, env, port, ["--profile", "bluefield2", "--link", link], work, ["--models", str(models)]
        ):
            per_rate[link] = _worker(inside, env, port, work / f"crossover-{link}.json", repeat,
                                     "--worker-crossover")  # fmt: skip
    out = []
    mbit = [float(link.removesuffix("mbit")) for link in CROSSOVER_LINKS]
    for q, sql in enumerate(CROSSOVER_SQL):
        runs = [per_rate[link][q] for link in CROSSOVER_LINKS]
        diff = [r["measured_s"]["offload"] - r["measured_s"]["pushback"] for r in runs]
        measured = None
        for k in range(len(runs) - 1, 0, -1):  # the fastest change, as the decision reports it
            if (diff[k] > 0) != (diff[k - 1] > 0):
                x0, x1 = 1 / mbit[k - 1], 1 / mbit[k]  # times are linear in 1/rate
                x = x0 + (x1 - x0) * diff[k - 1] / (diff[k - 1] - diff[k])
                measured = 1 / x
                break
        out.append({
            "sql": sql,
            "measured_s": {link: r["measured_s"] for link, r in zip(CROSSOVER_LINKS, runs, strict=True)},
            "decision": {link: r["decision"] for link, r in zip(CROSSOVER_LINKS, runs, strict=True)},
            "right": {link: r["right"] for link, r in zip(CROSSOVER_LINKS, runs, strict=True)},
            "measured_crossover_mbit": measured,
            "predicted_crossover_mbit": (runs[0]["predicted"] or {}).get("crossover_mbit"),
            "above_crossover": (runs[0]["predicted"] or {}).get("above_crossover"),
        })  # fmt: skip
    return {
        "rows": rows,
        "repeat": repeat,
        "profile": "bluefield2",
        "links": list(CROSSOVER_LINKS),
        "queries": out,
    }


def _inside(work: Path) -> tuple[list[str], dict[str, str]]:
    """The command prefix that runs Python in the benchmark's namespace, and its environment
    (HOME in the work dir, where the nodes write their tokens)."""
    import os
    import sys

    from offload.host import links as L

    ns = L.ensure_namespace("dsbench")
    return ["nsenter", f"--net=/run/netns/{ns}", sys.executable], {**os.environ, "HOME": str(work)}


def _worker(inside: list[str], env: dict[str, str], port: int, out: Path, repeat: int, *args: str
            ) -> list[dict[str, Any]]:  # fmt: skip
    """Runs this script's worker against the node on ``port`` inside the namespace; its rows."""
    import subprocess

    subprocess.run([*inside, __file__, "--worker", f"127.0.0.1:{port}", "--token-file",
                    str(out.parent / f"t{port}"), "--worker-out", str(out), "--repeat", str(repeat), *args],
                   env=env, check=True)  # fmt: skip
    return list(json.loads(out.read_text()))


class _node:
    """A node process in the benchmark's namespace, stopped on exit."""

    def __init__(self, inside: list[str], env: dict[str, str], port: int, args: list[str], work: Path,
                 extra: list[str]) -> None:  # fmt: skip
        import subprocess

        cmd = [*inside, "-m", "offload.cli", "node", "serve", "--port", str(port), "--netns", "dsbench",
               "--data-dir", str(work), "--token-file", str(work / f"t{port}"), "--max-seconds", "3000",
               *args, *extra]  # fmt: skip
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.p.stdout is not None
        for _ in range(50):
            line = self.p.stdout.readline()
            if "profile" in line or not line:
                break

    def __enter__(self) -> _node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.p.terminate()
        self.p.wait(30)


def stream(rows: int, repeat: int = 5) -> dict[str, Any]:
    from offload.dataservices.client import NodeClient
    from offload.dataservices.node import Node, NodeConfig

    t = P.generate(rows, seed=1)
    out: dict[str, Any] = {"rows": rows, "table_mib": t.nbytes / 2**20, "repeat": repeat, "runs": {}}
    for label, max_rows, max_bytes in (("bounded", 65_536, 4 << 20), ("one batch", 1 << 62, 1 << 62)):
        node = Node(NodeConfig("bench", batch_rows=max_rows, batch_bytes=max_bytes, adapt=False))
        try:
            node.add("p", t)
            with NodeClient(f"127.0.0.1:{node.port}", "bench", timeout_s=120) as c:
                runs = [c.query("select * from p", "pushback")[1] for _ in range(repeat)]
        finally:
            node.shutdown()
        out["runs"][label] = {
            "first_batch_ms": 1e3 * statistics.median(r.first_batch for r in runs),
            "fetch_ms": 1e3 * statistics.median(r.fetch for r in runs),
            "batches": runs[0].batches,
            "largest_batch_mib": t.nbytes / 2**20 / runs[0].batches,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parts = "cardinality (default), decisions, crossover, stream"
    ap.add_argument("--parts", default="cardinality", help=parts)
    ap.add_argument("--rows", type=int, default=P.SEED_ROWS, help="rows per table (default 6,177,731)")
    ap.add_argument("--queries", type=int, default=60, help="queries in the cardinality suite (default 60)")
    ap.add_argument("--out", type=Path, default=Path("benches/results/dataservices"))
    ap.add_argument("--decision-rows", type=int, default=1_000_000, help="particles for the decisions")
    ap.add_argument("--decision-queries", type=int, default=21, help="queries per profile and link")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each way per query (medians)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--token-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker-crossover", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        sqls = list(CROSSOVER_SQL) if a.worker_crossover else decision_suite(a.decision_queries)
        worker(a.worker, a.token_file, a.worker_out, sqls, a.repeat)
        return
    a.out.mkdir(parents=True, exist_ok=True)
    if "cardinality" in a.parts.split(","):
        r = cardinality(a.rows, a.queries)
        r |= {"date": time.strftime("%Y-%m-%d"), "machine": describe()}
        (a.out / "cardinality.json").write_text(json.dumps(r, indent=2))
        console.print(
            f"cardinality: {r['queries']} queries, median error {100 * r['median_rel_error']:.2f}% "
            f"({100 * (r['median_rel_error_1000_rows_or_more'] or 0):.2f}% on results of >= 1000 rows), "
            f"worst {r['worst_ratio']:.2f}x ({r['worst_query'][:100]}); by kind: "
            + ", ".join(f"{k} {100 * v:.2f}%" for k, v in r["median_rel_error_by_kind"].items())
            + f"; skewed equalities worst {r['skewed_equality_worst_ratio'] or 0:.2f}x "
            f"({r['skewed_equality_worst_query']}); estimating costs {100 * r['decide_cost_median']:.2f}% of "
            f"executing (median), {r['estimate_cpu_ms_median']:.2f} ms ({IN_LIST:,}-value IN lists: "
            f"{r['in_list_estimate_cpu_ms_median'] or 0:.2f} ms); count sketches "
            f"{r['count_sketch_s_per_million_rows']:.3f} s per million rows and column"
        )
    if "decisions" in a.parts.split(","):
        r = decisions(a.decision_rows, a.decision_queries, a.repeat)
        r |= {"date": time.strftime("%Y-%m-%d"), "machine": describe()}
        (a.out / "decisions.json").write_text(json.dumps(r, indent=2))
        for prof, links in r.get("profiles", {}).items():
            for link, v in links.items():
                right, lost, off = v["right"], v["time_lost_share"], v["offloaded_share"]
                err = ", ".join(f"{w} {100 * e:.0f}%" for w, e in v["prediction_error"].items())
                console.print(
                    f"{prof} over {link}: right {100 * right:.0f}% ({100 * v['right_or_tie']:.0f}% counting "
                    f"the misses whose runs overlap), time lost {100 * lost:.1f}%, "
                    f"offloaded {100 * off:.0f}%; predicted time off by {err} (median)"
                )
    if "stream" in a.parts.split(","):
        r = stream(a.decision_rows)
        r |= {"date": time.strftime("%Y-%m-%d"), "machine": describe()}
        (a.out / "stream.json").write_text(json.dumps(r, indent=2))
        for label, v in r["runs"].items():
            console.print(
                f"pushback of {r['rows']:,} rows, {label}: first rows after {v['first_batch_ms']:.1f} ms, "
                f"all after {v['fetch_ms']:.1f} ms, {v['batches']} batches "
                f"of <= {v['largest_batch_mib']:.1f} MiB"
            )
    if "crossover" in a.parts.split(","):
        r = crossover(a.decision_rows, a.repeat)
        r |= {"date": time.strftime("%Y-%m-%d"), "machine": describe()}
        (a.out / "crossover.json").write_text(json.dumps(r, indent=2))
        for q in r.get("queries", []):
            console.print(
                f"{q['sql'][:60]}: crossover measured {q['measured_crossover_mbit']} Mbit/s, predicted "
                f"{q['predicted_crossover_mbit']} Mbit/s ({q['above_crossover']} above)"
            )


if __name__ == "__main__":
    main()
