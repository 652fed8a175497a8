"""What deciding costs beside the query it decides about (issue 26: the decision's CPU at most 2%
of the query's on the quarter-core node, at most 10 ms worst).

One bluefield2 node (one engine thread held to a quarter core: root, for its cgroup) in a process
of its own, on loopback. It is first trained on itself (the particle suite, ``--train`` queries,
one run each way), then restarted with those models and without online learning, so that nothing
but the queries runs on it. For each table size (``--sizes``: the default is 200,000 rows and the
seed's 6,177,731), ``--queries`` ``auto`` queries of the particle shapes run, each one new (random
thresholds). Per size it reports the decision's thread CPU on the node (explain's
``decision_cpu_s``: median, worst) and its share (median) of the query's execution CPU: the
node process's CPU during the query (its threads' schedstat, in ns) less the decision's, plus
this process's (the host: receiving, and running pushed-back plans). Its share of the query's
wall time is beside it.

Then, at the first size, the same node in four regimes over the same new queries (blocks of 8,
the regimes' order turned each block, so that the machine's drift is shared): offloaded back to
back, offloaded each between pushbacks, ``auto`` back to back, and the ways ``auto`` chose asked
directly back to back. Medians of the request (net of the decision), the node's stream and the
whole query, and the ratios of the pairs: what a quota-held node's recent work costs the next
query, and what deciding costs it beyond the decision's own time.

    sudo .venv/bin/python benches/dataservices_deciding.py     # ~5 min on a 2-vCPU VM
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(stderr=True)
PORT = 9471
TOKEN = "deciding"
SEED_ROWS = 6_177_731
"""The seed's particle table (seed 003, Case I)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=f"200000,{SEED_ROWS}", help="table rows, comma-separated")
    ap.add_argument("--queries", type=int, default=24, help="auto queries per size (every one new)")
    ap.add_argument("--train", type=int, default=36, help="training queries (one run each way)")
    ap.add_argument("--train-rows", type=int, default=200_000, help="the training table's rows")
    ap.add_argument("--regime-queries", type=int, default=32, help="regimes: queries (blocks of 8; 0: none)")
    ap.add_argument("--out", type=Path, default=Path("benches/results/dataservices"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("error: run as root: the node's quarter core is a cgroup")
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    work = Path("build/dsdeciding")
    work.mkdir(parents=True, exist_ok=True)
    models = train(work, a)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()}: {os.cpu_count()} vCPUs",
        "profile": "bluefield2 (1 engine thread, 0.25 core)",
        "models": f"particle suite, {a.train} queries over {a.train_rows:,} rows, trained on this node",
        "sizes": {},
    }
    with _node(work, models) as (c, pid):
        results["budget"] = c.status().get("budget")
        for rows in sizes:
            results["sizes"][str(rows)] = measure(c, pid, rows, a.queries)
        if a.regime_queries > 0:  # 0: the decision's cost alone
            results["regimes"] = regimes(c, sizes[0], a.regime_queries)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "deciding.json"
    path.write_text(json.dumps(results, indent=1))
    for rows, r in results["sizes"].items():
        ms = {k: f"{v * 1e3:.2f}" for k, v in r.items() if k.endswith("_s")}
        pct = {k: f"{100 * v:.2f}%" for k, v in r.items() if "share" in k}
        console.print(
            f"{int(rows):>10,} rows: decision {ms['decision_cpu_median_s']} ms median, "
            f"{ms['decision_cpu_max_s']} ms worst; {pct['cpu_share_median']} of the query's CPU "
            f"({ms['execution_cpu_median_s']} ms median), {pct['wall_share_median']} of its time "
            f"({ms['query_median_s']} ms median)"
        )
    if "regimes" in results:
        for name, r in results["regimes"]["medians_ms"].items():
            console.print(f"{name:>26}: " + ", ".join(f"{k[:-2]} {v:.1f} ms" for k, v in r.items()))
        console.print("ratios (paired, medians): " + ", ".join(
            f"{k} {v:.2f}" for k, v in results["regimes"]["ratios"].items()))  # fmt: skip
    console.print(f"wrote {path}")


def train(work: Path, a: argparse.Namespace) -> Path:
    """Models trained on a node of the same profile: the particle suite, one run each way."""
    from offload.dataservices import particles as P
    from offload.dataservices import timemodel as TM
    from offload.dataservices import training as TR

    path = work / "models.json"
    with _node(work, None) as (c, _):
        c.upload("train", P.generate(a.train_rows, seed=1))
        console.print(f"training: {a.train} queries over {a.train_rows:,} rows, both ways")
        samples = TR.measure(c, "train", TR.training_queries(a.train, 7), "bluefield2", repeat=1)
        c.drop("train")
    TM.Models(samples).save(path)
    return path


def measure(c: Any, pid: int, rows: int, n: int) -> dict[str, Any]:
    """``n`` new auto queries over a ``rows``-row particle table: each one's decision CPU (on
    the node), the CPU of running it (the node's, process ``pid``, and this one's) and its
    whole time."""
    from offload.dataservices import particles as P
    from offload.dataservices import training as TR

    console.print(f"{rows:,} rows: uploading")
    c.upload("particles", P.generate(rows, seed=2))
    sqls = [q.format(t="particles") for q in TR.training_queries(n + 2, seed=rows % 1000)]
    for sql in sqls[:2]:  # the first of a size: the node's first look at the new table
        c.query(sql, "auto")
    runs, reused = [], 0
    for sql in sqls[2:]:
        node0, host0 = _cpu_s(pid), time.process_time()
        _, t = c.query(sql, "auto")
        node_s, host_s = _cpu_s(pid) - node0, time.process_time() - host0
        cpu = (t.decision or {}).get("decision_cpu_s") or 0.0
        if (t.decision or {}).get("reused"):  # a plan asked before (equal thresholds): not a decision made
            reused += 1
            continue
        run = {"sql": sql, "way": t.way, "decision_cpu_s": cpu, "total_s": t.total, "node_cpu_s": node_s}
        runs.append(run | {"host_cpu_s": host_s, "execution_cpu_s": node_s - cpu + host_s})
    c.drop("particles")
    cpu = [r["decision_cpu_s"] for r in runs]
    return {
        "rows": rows,
        "reused": reused,
        "decision_cpu_median_s": statistics.median(cpu),
        "decision_cpu_max_s": max(cpu),
        "cpu_share_median": statistics.median(r["decision_cpu_s"] / r["execution_cpu_s"] for r in runs),
        "cpu_share_max": max(r["decision_cpu_s"] / r["execution_cpu_s"] for r in runs),
        "wall_share_median": statistics.median(r["decision_cpu_s"] / r["total_s"] for r in runs),
        "query_median_s": statistics.median(r["total_s"] for r in runs),
        "execution_cpu_median_s": statistics.median(r["execution_cpu_s"] for r in runs),
        "runs": runs,
    }


REGIMES = ("offload back to back", "offload between pushbacks", "auto back to back", "direct back to back")
ASKED = {REGIMES[0]: "offload", REGIMES[1]: "offload", REGIMES[2]: "auto"}
"""The way each regime asks for; the direct one asks for the ways auto chose on the block."""
BLOCK = 8


def regimes(c: Any, rows: int, n: int) -> dict[str, Any]:
    """The node in :data:`REGIMES` over ``n`` new queries of a ``rows``-row particle table, in
    blocks of :data:`BLOCK` that each regime runs in turn (the order turned each block; the
    direct one right after ``auto``, whose choices it asks for). Per regime the medians of the
    request (less the decision), the node's stream and the whole query (the offloaded ones for
    the first two), and the paired ratios."""
    from offload.dataservices import particles as P
    from offload.dataservices import training as TR

    c.upload("particles", P.generate(rows, seed=3))
    plans = [c.plan(q.format(t="particles")) for q in TR.training_queries(n, seed=rows % 997)]
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in REGIMES}
    units = [REGIMES[:1], REGIMES[1:2], REGIMES[2:]]
    for b in range(0, len(plans), BLOCK):
        turn, chosen = (b // BLOCK) % len(units), []
        for regime in [r for u in units[turn:] + units[:turn] for r in u]:
            for i, plan in enumerate(plans[b : b + BLOCK]):
                _, t = c.query(plan, ASKED.get(regime) or chosen[i])
                decided = float((t.decision or {}).get("decision_wall_s") or 0.0)
                runs[regime].append({"q": b + i, "way": t.way, "request_s": t.info - decided,
                                     "node_s": t.node, "total_s": t.total - decided})  # fmt: skip
                if regime == REGIMES[2]:
                    chosen.append(t.way)
                if regime == REGIMES[1]:
                    c.query(plan, "pushback")
    c.drop("particles")
    med = {r: {k: statistics.median(x[k] for x in v) * 1e3 for k in ("request_s", "node_s", "total_s")}
           for r, v in runs.items()}  # fmt: skip
    return {"rows": rows, "queries": len(plans), "medians_ms": med, "ratios": _ratios(runs), "runs": runs}


def _ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Medians over queries of one regime's time over another's, the same query."""

    def paired(a: str, b: str, k: str) -> float:
        other = {x["q"]: x[k] for x in runs[b]}
        return statistics.median(x[k] / other[x["q"]] for x in runs[a] if other.get(x["q"], 0) > 0)

    out = {}
    for k in ("request_s", "node_s", "total_s"):
        out[f"offload back to back / between pushbacks, {k[:-2]}"] = paired(REGIMES[0], REGIMES[1], k)
        out[f"auto / direct, {k[:-2]}"] = paired(REGIMES[2], REGIMES[3], k)
    return out


def _cpu_s(pid: int) -> float:
    """CPU seconds a process's live threads have run (/proc/PID/task/*/schedstat: ns, exact)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


@contextmanager
def _node(work: Path, models: Path | None) -> Iterator[tuple[Any, int]]:
    """A bluefield2 node in its own process (no online learning): a client of it, its pid."""
    from offload.dataservices.client import NodeClient

    cmd = [sys.executable, "-m", "offload.cli", "node", "serve", "--profile", "bluefield2",
           "--port", str(PORT), "--no-learn", "--max-seconds", "900"]  # fmt: skip
    cmd += ["--models", str(models)] if models is not None else []
    env = dict(os.environ, OFFLOAD_NODE_TOKEN=TOKEN)
    log = (work / "node.log").open("a")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the node did not start: see {work / 'node.log'}")
            time.sleep(0.5)
        with NodeClient(f"127.0.0.1:{PORT}", TOKEN) as c:
            yield c, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _answers() -> bool:
    from offload.dataservices.client import NodeClient

    try:
        with NodeClient(f"127.0.0.1:{PORT}", TOKEN) as c:
            return bool(c.status().get("budget"))  # a node listens a moment before its budget holds
    except Exception:  # not listening yet
        return False


if __name__ == "__main__":
    main()
