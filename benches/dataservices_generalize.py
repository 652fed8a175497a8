"""Do the offload decisions hold on schemas never trained on, and does a node that learns online
get them right after a few queries? (issue 26)

For each node profile (root: namespaces, cgroups, tc):

1. train two sets of time models on an unshaped link: the particle suite (float tables only,
   ``training.training_queries``: what `offload node train` ran before issue 26) and the suite
   over generated schemas (``training.generated_samples``, seeds 0..k-1: strings, dates, joins,
   group-bys, wide and narrow rows);
2. over each link rate (htb: 100 Mbit/s, 1 and 10 Gbit/s) a decision suite over generated
   schemas never trained on (other seeds): a node without models measures each query both ways
   (medians of --truth-repeat, alternating: a quota-held node's runs of one query spread 2-3x
   with where its CFS period falls, and a median of 3 often ranks two ways by that); a node
   with each set of models says what ``auto`` would run (its ``explain``, the decision
   ``auto`` takes), before any query reaches it;
3. the nodes with models then serve --adapt-queries other queries of the same new schemas
   (``auto``, --adapt-gap apart: a node whose quota had refilled, as the ground truth's offloads
   ran between pushbacks), learn online, and are asked again: the "after" columns.

A third node decides with "moved" models: the generated schemas' models trained on the other
profile (a whole core's on a quarter-core node, and the other way), as a node whose resources
changed since it was trained; its "after" column is what online adaptation corrected.

It reports per profile x link and overall how often each set of models took the faster way,
counting the misses whose runs overlap as ties (as benches/dataservices_bench.py does), and the
time lost: the sum over queries of the chosen way's median less the best way's, over the sum of
the best way's. The JSON also has what deciding cost on each node (its ``explain``'s thread
CPU, median and worst, and its median share of the chosen way's time).

    sudo .venv/bin/python benches/dataservices_generalize.py           # ~20 min on a 2-vCPU VM
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console(stderr=True)

PROFILES = ("bluefield2", "core")
LINKS = ("100mbit", "1000mbit", "10000mbit")
TRAINED = ("particles", "generated")
"""The training suites: the seed's particle tables, and the generated schemas."""
MODELS = (*TRAINED, "moved", "all")
"""The sets of models a node decides with: trained on its own profile by the particle suite and
by the generated schemas, and "moved": the generated schemas' trained on the other profile (a
node whose resources changed since it was trained: a whole core's models on a quarter core, and
the other way), which online adaptation is to correct; "all": both suites' samples in one file, as
`offload node train` makes it by default (``--suite all``)."""
TESTS = ("generated", "orders")
"""The decision suites: generated schemas of other seeds than training's (``workload``), or the
orders/customers/shipments schema of ``newuser_orders`` (a new user's, unlike any generated)."""
NS = "gen"
"""The namespace (``offload-gen``): this bench's own, so it never meets another's nodes."""
PORT = 9451
WORK = Path("build/dsgen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--links", default=",".join(LINKS))
    ap.add_argument("--rows", type=int, default=400_000, help="rows of a narrow fact table (wider: fewer)")
    ap.add_argument("--train-schemas", type=int, default=6, help="generated schemas trained on: seeds 0..k-1")
    ap.add_argument("--train-queries", type=int, default=30,
                    help="queries per training schema (`offload node train`'s --queries)")  # fmt: skip
    ap.add_argument("--particle-sizes", default="100000,400000,1600000", help="particle tables (`train`'s)")
    ap.add_argument("--particle-queries", type=int, default=30, help="queries per particle table (`train`'s)")
    ap.add_argument("--test-seeds", default="100,101,102,103", help="schemas of the decision suite")
    ap.add_argument(
        "--tests",
        choices=TESTS,
        default="generated",
        help="the decision suite's schemas: generated (--test-seeds) or orders (newuser_orders, "
        "--rows orders)",
    )
    ap.add_argument(
        "--models",
        default=",".join(MODELS[:3]),
        help=f"the sets of models that decide, of {', '.join(MODELS)}",
    )
    ap.add_argument(
        "--reuse-training",
        action="store_true",
        help="decide with the last run's training samples (models are fitted from them anew)",
    )
    ap.add_argument("--queries", type=int, default=16, help="queries per profile and link")
    ap.add_argument("--adapt-queries", type=int, default=50, help="queries served before 'after'")
    ap.add_argument("--adapt-wait", type=float, default=90, help="seconds to wait for a node's refit")
    ap.add_argument("--adapt-gap", type=float, default=0.02,
                    help="seconds between the queries a node adapts to (0: back to back)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=3, help="training: runs of each way per query (`train`'s)")
    ap.add_argument("--truth-repeat", type=int, default=7,
                    help="the decision suite: runs of each way per query (medians), alternating")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("benches/results/dataservices/generalize.json"))
    ap.add_argument("--worker", choices=("train", "heldout", "decide", "serve"), help=argparse.SUPPRESS)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker == "train":
        train_worker(a)
    elif a.worker == "heldout":
        (c,) = _clients(a)
        heldout(c, a, c.status().get("system", "host"))
    elif a.worker == "decide":
        decide_worker(a)
    elif a.worker == "serve":
        serve_worker(a)
    else:
        run(a)


# ------------------------------------------------------------------------- outside: the plan


def run(a: argparse.Namespace) -> None:
    from offload.host import links as L
    from offload.host.machine import describe

    why = L.unavailable_reason()
    if why:
        console.print(f"skipped: {why}")
        return
    t0 = time.monotonic()
    work = WORK.resolve()
    work.mkdir(parents=True, exist_ok=True)
    names = write_tests(work, a)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    results: dict[str, Any] = {"command": " ".join(sys.argv), "commit": commit,
                               "date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe(),
                               "args": {k: str(v) for k, v in vars(a).items() if not k.startswith("worker")},
                               "test_tables": names, "profiles": {}}  # fmt: skip
    L.ensure_namespace(NS)
    port = PORT
    profiles = a.profiles.split(",")
    try:
        for prof in profiles:  # all first: a profile's "moved" models are another's
            results["profiles"][prof] = {"model_error": train(prof, port, work, a)}
            port += 1
        for prof, other in zip(profiles, [*profiles[1:], *profiles[:1]], strict=True):
            if other != prof:
                move(work / f"models-{other}-generated.json", other, prof, work / f"models-{prof}-moved.json")
            cells = results["profiles"][prof]
            for link in filter(None, a.links.split(",")):
                console.print(f"{prof} over {link}: the decision suite")
                rows = decide(prof, link, tuple(range(port, port + 1 + len(MODELS))), work, a)
                cells[link] = {"summary": summarize(rows), "runs": rows}
                port += 1 + len(MODELS)
                report({prof: {link: cells[link]}})
    finally:
        L.remove_namespace(NS)
    runs = [
        r for p in results["profiles"].values() for k, v in p.items() if k != "model_error" for r in v["runs"]
    ]
    results["overall"] = summarize(runs) if runs else {}
    results["seconds"] = round(time.monotonic() - t0)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1))
    for prof, cells in results["profiles"].items():
        console.print(
            f"{prof}: stage errors on the decision suite",
            cells["model_error"]["stages on the decision suite"],
        )
    if runs:
        report(results["profiles"], results["overall"])
        plot(results, a.out.with_suffix(".png"))
    console.print(f"wrote {a.out} ({results['seconds']} s)")


def test_specs(a: argparse.Namespace) -> list[Any]:
    from offload.dataservices import workload as W

    specs = []
    for seed in (int(s) for s in a.test_seeds.split(",")):
        shape = W.SHAPES[seed % len(W.SHAPES)]
        specs.append(W.schema(seed, W.rows_of(shape, a.rows), shape))
    return specs


def test_tables(a: argparse.Namespace) -> dict[str, Any]:
    """The decision suite's tables by name."""
    if a.tests == "orders":
        import newuser_orders

        return newuser_orders.tables(a.rows)
    return {name: t for spec in test_specs(a) for name, t in spec.tables().items()}


def test_queries(a: argparse.Namespace) -> tuple[list[tuple[str, str]], list[str]]:
    """The decision suite's queries as (kind, sql), and the other queries of the same schemas a
    node adapts to."""
    if a.tests == "orders":
        import newuser_orders

        return newuser_orders.queries(a.queries, 0), [
            q for _, q in newuser_orders.queries(a.adapt_queries, 1)
        ]
    from offload.dataservices import workload as W

    specs = test_specs(a)
    per = -(-a.queries // len(specs))
    suite = [(q.kind, q.sql) for s in specs for q in W.queries(s, per, 0)][: a.queries]
    adapt = [q.sql for s in specs for q in W.queries(s, -(-a.adapt_queries // len(specs)), 1)]
    return suite, adapt[: a.adapt_queries]


def write_tests(work: Path, a: argparse.Namespace) -> dict[str, int]:
    """The decision suite's tables as Parquet files in the nodes' data directory (each node
    registers them itself: no upload over the shaped link); their rows by name."""
    from offload.dataservices import tablefiles

    out = {}
    for name, t in test_tables(a).items():
        tablefiles.write_parquet(t, work / f"{name}.parquet")  # always: --rows may have changed
        out[name] = t.num_rows
    return out


def test_names(a: argparse.Namespace) -> list[str]:
    """The decision suite's table names (without making their data)."""
    if a.tests == "orders":
        return ["customers", "orders", "shipments"]
    return [n for s in test_specs(a) for n in (s.fact, s.dim)]


def _model_sets(a: argparse.Namespace) -> list[str]:
    """The sets of models that decide (--models), in MODELS' order."""
    asked = set(a.models.split(","))
    unknown = asked - set(MODELS)
    if unknown:
        raise SystemExit(f"--models: {', '.join(sorted(unknown))}: give some of {', '.join(MODELS)}")
    return [m for m in MODELS if m in asked]


def train(prof: str, port: int, work: Path, a: argparse.Namespace) -> dict[str, Any]:
    """Both training suites against a node of ``prof`` on an unshaped link: a models file each."""
    from offload.dataservices import timemodel as TM

    files = {m: work / f"models-{prof}-{m}.json" for m in (*TRAINED, "heldout")}
    if a.reuse_training and all(files[m].exists() for m in TRAINED):
        console.print(f"{prof}: the training files of the last run")
        if not files["heldout"].exists():
            with _node(prof, "none", port, work, None):
                _worker(a, "heldout", [port], work / f"models-{prof}")
    else:
        console.print(f"{prof}: training both suites on an unshaped link")
        with _node(prof, "none", port, work, None):
            _worker(a, "train", [port], work / f"models-{prof}")
    both = [s for m in TRAINED for s in TM.Models.read_samples(files[m])]
    TM.Models(both).save(work / f"models-{prof}-all.json")  # `offload node train --suite all`'s file
    held = TM.Models.read_samples(files["heldout"])
    stages = {
        m: TM.stage_errors(TM.Models.load(work / f"models-{prof}-{m}.json"), held) for m in (*TRAINED, "all")
    }
    errors = {m: TM.held_out_error(TM.Models.read_samples(files[m])) for m in TRAINED}
    return errors | {"stages on the decision suite": stages}


def move(src: Path, trained: str, served: str, dst: Path) -> None:
    """Models trained on a ``trained`` node, for a ``served`` one: its samples relabelled."""
    from offload.dataservices import timemodel as TM

    samples = [TM.QuerySample(served if s.system == trained else s.system, s.features, s.times)
               for s in TM.Models.read_samples(src)]  # fmt: skip
    TM.Models(samples).save(dst)


def decide(
    prof: str, link: str, ports: Sequence[int], work: Path, a: argparse.Namespace
) -> list[dict[str, Any]]:
    """Nodes of ``prof`` over ``link``: one without models measures, one per models file decides."""
    files = {m: work / f"models-{prof}-{m}.json" for m in _model_sets(a)}
    files = {m: f for m, f in files.items() if m != "moved" or f.exists()}  # one profile: none moved
    deciding = argparse.Namespace(**{**vars(a), "models": ",".join(files)})
    with ExitStack() as stack:
        stack.enter_context(_node(prof, link, ports[0], work, None, learn=False))
        for p, f in zip(ports[1:], files.values(), strict=False):
            stack.enter_context(_node(prof, link, p, work, f))
        return _worker(deciding, "decide", ports[: 1 + len(files)], work / f"runs-{prof}-{link}.json")


def _inside() -> list[str]:
    return ["nsenter", f"--net=/run/netns/offload-{NS}", sys.executable]


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(work)}  # the nodes' tokens go there


def _worker(a: argparse.Namespace, kind: str, ports: Sequence[int], out: Path) -> Any:
    """This script as a worker inside the namespace, against the nodes on ``ports``."""
    args = [
        f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
        for k, v in vars(a).items()
        if not k.startswith("worker") and k not in ("ports", "serve") and v is not False
    ]
    cmd = [
        *_inside(),
        __file__,
        *args,
        "--worker",
        kind,
        "--ports",
        ",".join(map(str, ports)),
        "--worker-out",
        str(out),
    ]
    subprocess.run(cmd, env=_env(WORK.resolve()), check=True)
    return json.loads(out.read_text()) if kind == "decide" else None


@contextmanager
def _node(
    prof: str, link: str, port: int, work: Path, models: Path | None, learn: bool = True
) -> Iterator[subprocess.Popen[str]]:
    """A node process of ``prof`` in the namespace, stopped (and waited for) on exit; one that
    does not ``learn`` is served by this script (``offload node serve`` has no switch for it)."""
    cmd = [*_inside(), "-m", "offload.cli", "node", "serve", "--port", str(port), "--netns", NS,
           "--profile", prof, "--link", link, "--data-dir", str(work), "--token-file", str(work / f"t{port}"),
           "--max-seconds", "3000", "--name", f"gen{port}"]  # fmt: skip
    if models is not None:
        cmd += ["--models", str(models)]
    if not learn:
        cmd = [*_inside(), __file__, "--worker", "serve", "--ports", str(port), "--serve", f"{prof},{link}"]
    p = subprocess.Popen(cmd, env=_env(work), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert p.stdout is not None
        seen = []
        for _ in range(50):  # bounded: the node prints a few lines, its budget last
            line = p.stdout.readline()
            seen.append(line)
            if "profile" in line or not line:
                break
        if p.poll() is not None:
            raise RuntimeError(f"node on port {port} exited: {''.join(seen).strip()}")
        yield p
    finally:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


# -------------------------------------------------------------------- inside: the workers


def _clients(a: argparse.Namespace) -> list[Any]:
    from offload.dataservices.client import NodeClient

    work = WORK.resolve()
    ports = [int(p) for p in a.ports.split(",")]
    return [NodeClient(f"127.0.0.1:{p}", (work / f"t{p}").read_text().strip(), timeout_s=600) for p in ports]


def train_worker(a: argparse.Namespace) -> None:
    from offload.dataservices import particles as P
    from offload.dataservices import timemodel as TM
    from offload.dataservices import training as TR

    (c,) = _clients(a)
    system = c.status().get("system", "host")
    sizes = [int(s) for s in a.particle_sizes.split(",")]
    samples = []
    for i, n in enumerate(sizes):
        console.print(f"  particles: {n:,} rows, {a.particle_queries} queries")
        c.upload(f"train_{n}", P.generate(n, seed=i))
        samples += TR.measure(
            c, f"train_{n}", TR.training_queries(a.particle_queries, i), system, None, a.repeat
        )
        c.drop(f"train_{n}")
    TM.Models(samples).save(f"{a.worker_out}-particles.json")
    seeds = range(a.train_schemas)
    console.print(f"  generated: {a.train_schemas} schemas, {a.train_queries} queries each")
    sizes = (a.rows // 4, a.rows // 2, a.rows, 2 * a.rows)  # 4 against 3 shapes: each shape in several sizes
    gen = TR.generated_samples(c, system, seeds, sizes, a.train_queries, a.repeat)
    TM.Models(gen).save(f"{a.worker_out}-generated.json")
    heldout(c, a, system)


def heldout(c: Any, a: argparse.Namespace, system: str) -> None:
    """The decision suite measured stage by stage as training measures (unshaped, ``--repeat``
    runs each way): the held-out samples each set of models' stage errors are taken on."""
    from offload.dataservices import timemodel as TM
    from offload.dataservices import training as TR

    names = test_names(a)
    console.print(f"  held out: the decision suite's {a.queries} queries over {', '.join(names)}")
    for n in names:
        c.register(n, f"{n}.parquet")
    suite, _ = test_queries(a)
    TM.Models(TR.measure(c, None, [sql for _, sql in suite], system, None, a.repeat)).save(
        f"{a.worker_out}-heldout.json"
    )
    for n in names:
        c.drop(n)


def decide_worker(a: argparse.Namespace) -> None:

    measurer, *deciders = _clients(a)
    suite, adapt = test_queries(a)
    names = test_names(a)
    with ThreadPoolExecutor(len(deciders) + 1) as pool:  # each node sketches its own tables
        list(pool.map(lambda c: [c.register(n, f"{n}.parquet") for n in names], [measurer, *deciders]))
    plan_of = [measurer.plan(sql) for _, sql in suite]
    rows: list[dict[str, Any]] = [{"sql": sql, "kind": kind, "decisions": {}} for kind, sql in suite]
    models = _model_sets(a)[: len(deciders)]
    for m, c in zip(models, deciders, strict=True):  # before any query reaches the deciders
        for r, plan in zip(rows, plan_of, strict=True):
            r["decisions"][m] = _decision(c.explain(plan))
    for r, plan in zip(rows, plan_of, strict=True):
        times: dict[str, list[float]] = {"offload": [], "pushback": []}
        for _ in range(a.truth_repeat):
            for way in times:
                table, timing = measurer.query(plan, way)
                times[way].append(timing.total)
                r["result_rows"] = table.num_rows
        r["runs_s"] = times
    # one node serves its queries at a time (its online samples must not share the CPU with
    # another's), then every node's refit is waited for together
    started = [_serve(c, adapt, a.adapt_gap) for c in deciders]
    deadline = time.monotonic() + a.adapt_wait
    for m, c, (before, served) in zip(models, deciders, started, strict=True):
        learned = _refit(c, before, len(served), deadline)
        after = {"adaptation": learned, "served_offload": served.count("offload")}
        for r, plan in zip(rows, plan_of, strict=True):
            r["decisions"][f"{m}, adapted"] = _decision(c.explain(plan)) | after
    Path(a.worker_out).write_text(json.dumps(rows, indent=1))


def serve_worker(a: argparse.Namespace) -> None:
    """The node that measures both ways, as `offload node serve` runs one but without learning:
    its refits would take its CPU quota from the queries it measures."""
    from offload.dataservices import serving as S
    from offload.host import budgets as B

    prof, link = a.serve.split(",")
    port, work = int(a.ports), WORK.resolve()
    profile = S.with_overrides(B.profile(prof), None, None, None, link)
    os.environ["TOKIO_WORKER_THREADS"] = str(profile.threads)  # before DataFusion starts its runtime
    cfg = S.config(profile, B.profile(prof), "127.0.0.1", port, work, False, f"gen{port}", None)
    cfg.adapt = False
    served = S.start(cfg, profile, NS, work / f"t{port}")
    print(S.budget_line(served.applied), flush=True)
    S.wait(3000)
    served.stop()


def _decision(explained: dict[str, Any]) -> dict[str, Any]:
    d = explained.get("decision") or {}
    return {"way": explained["way"], "offload_s": d.get("offload_s"), "pushback_s": d.get("pushback_s"),
            "why": explained.get("why"), "decision_cpu_s": explained.get("decision_cpu_s"),
            "reused": bool(explained.get("reused")),
            "estimated_rows": (explained.get("estimate") or {}).get("rows")}  # fmt: skip


def _serve(c: Any, sqls: Sequence[str], gap_s: float) -> tuple[dict[str, Any], list[str]]:
    """Serves ``sqls`` (auto, planned first) for the node to learn from, ``gap_s`` apart: its
    adaptation's status before, the ways it chose. The ground truth runs each query's offload
    between pushbacks, on a node whose quota the pushback's host work let refill; queries
    served back to back find it spent (2-3.6x the request, ~2x the query: the deciding
    bench's regimes), and a node that adapted to that regime is scored in the other."""
    plans = [c.plan(sql) for sql in sqls]
    before = c.status().get("adaptation") or {}
    ways = []
    for plan in plans:
        time.sleep(gap_s)
        ways.append(c.query(plan, "auto")[1].way)
    return before, ways


def _refit(c: Any, before: dict[str, Any], served: int, deadline: float) -> dict[str, Any]:
    """Waits, up to ``deadline`` (time.monotonic), for the node to learn on its own: its
    learner has taken in the ``served`` queries and refitted since (nothing is asked of it: an
    idle node refits unpaced), with fewer new samples than a refit needs left over. What its
    status says of the adaptation then, and the wait."""
    t0 = time.monotonic()
    while time.monotonic() < deadline and before:
        now = c.status().get("adaptation") or {}
        taken = _taken(now) >= _taken(before) + served
        settled = not now.get("queued") and not now.get("pending") and now.get("samples_since_refit", 0) < 25
        if taken and settled and now.get("refits", 0) > before.get("refits", 0):
            break
        time.sleep(0.5)
    return (c.status().get("adaptation") or {}) | {"waited_s": round(time.monotonic() - t0, 1)}


def _taken(adaptation: dict[str, Any]) -> int:
    """The queries a learner has taken in: made samples, skipped (its CPU share) or failed."""
    return sum(int(adaptation.get(k, 0)) for k in ("queries", "skipped", "failed"))


# ------------------------------------------------------------------------------ the figures


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per set of models: the share of queries where its decision took the faster way (and
    counting the misses whose runs overlap as ties), the time lost over the best way's, how
    many it offloaded, the median error of its predicted times, and what deciding cost: the
    decision's thread CPU on the node (median, worst; decisions made, not reused) and its median
    share of the time the chosen way took (the query's wall time: its CPU is not measured)."""
    out = {}
    for key in rows[0]["decisions"]:
        right = tie = 0
        lost = best_s = 0.0
        off = 0
        errs: list[float] = []
        cpu: list[float] = []
        share: list[float] = []
        for r in rows:
            med = {w: statistics.median(ts) for w, ts in r["runs_s"].items()}
            best = min(med, key=lambda w: med[w])
            other = "pushback" if best == "offload" else "offload"
            d = r["decisions"][key]
            right += d["way"] == best
            tie += d["way"] == best or max(r["runs_s"][best]) >= min(r["runs_s"][other])
            lost += med[d["way"]] - med[best]
            best_s += med[best]
            off += d["way"] == "offload"
            errs += [abs(d[f"{w}_s"] - med[w]) / med[w] for w in med if d.get(f"{w}_s") is not None]
            if d.get("decision_cpu_s") is not None and not d.get("reused"):  # a decision made
                cpu.append(d["decision_cpu_s"])
                share.append(d["decision_cpu_s"] / med[d["way"]])
        out[key] = {"right": right / len(rows), "right_or_tie": tie / len(rows),
                    "time_lost_share": lost / best_s, "offloaded": off / len(rows), "queries": len(rows),
                    "prediction_error": statistics.median(errs) if errs else None,
                    "decision_cpu_median_s": statistics.median(cpu) if cpu else None,
                    "decision_cpu_max_s": max(cpu) if cpu else None,
                    "decision_share_median": statistics.median(share) if share else None}  # fmt: skip
    return out


def report(profiles: dict[str, Any], overall: dict[str, Any] | None = None) -> None:
    t = Table("profile", "link", *(f"{m}\nright (tie) / lost" for m in profiles_keys(profiles, overall)))
    for prof, links in profiles.items():
        for link, v in links.items():
            if link != "model_error":
                t.add_row(prof, link, *(_cell(s) for s in v["summary"].values()))
    if overall:
        t.add_row("all", "", *(_cell(s) for s in overall.values()))
    console.print(t)


def profiles_keys(profiles: dict[str, Any], overall: dict[str, Any] | None) -> list[str]:
    if overall:
        return list(overall)
    for links in profiles.values():
        for link, v in links.items():
            if link != "model_error":
                return list(v["summary"])
    return []


def plot(results: dict[str, Any], path: Path) -> None:
    """Right share and time lost per profile x link, one bar per set of models."""
    import numpy as np

    from offload.files import save_figure
    from offload.host.plots import pyplot

    cells = [(p, k, v["summary"]) for p, links in results["profiles"].items() for k, v in links.items()
             if k != "model_error"]  # fmt: skip
    keys = list(results["overall"])
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(cells))
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        for ax, what in zip(axes, ("right", "time_lost_share"), strict=True):
            at = x + (i - (len(keys) - 1) / 2) * width
            ax.bar(at, [100 * s[key][what] for _, _, s in cells], width, label=key)
    for ax, title in zip(axes, ("decisions right (%)", "time lost over the best way's (%)"), strict=True):
        ax.set_xticks(x, [f"{p}\n{k}" for p, k, _ in cells], fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y")
    axes[0].axhline(95, color="k", lw=0.8, ls="--")
    axes[1].axhline(3, color="k", lw=0.8, ls="--")
    axes[0].set_ylim(0, 105)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=min(len(keys), 4), fontsize=7)
    fig.suptitle(f"decisions on generated schemas never trained on ({results['date']})", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save_figure(fig, path)


def _cell(s: dict[str, Any]) -> str:
    return f"{100 * s['right']:.0f}% ({100 * s['right_or_tie']:.0f}%) / {100 * s['time_lost_share']:.1f}%"


if __name__ == "__main__":
    main()
