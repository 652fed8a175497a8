"""`make demo`: the main job end to end on generated data.

Synthesises a realistic MCT rule set and a search-engine trace, compiles it with every matcher,
matches the trace, checks that the matchers agree, and prints throughput plus a few explained
answers. Then it starts the service (`offload serve`), replays the trace through it with the
injector, prints throughput, latency and the per-stage breakdown, shows its control socket
refusing a peer without CURVE keys and answering the operator's, runs a small sweep with its
Pareto plot, runs the quick probe of the channels (memory, IPC, ZeroMQ, io_uring), calibrates
the pipeline simulator on the sweep, recommends a configuration, prices the seed's deployments,
runs the seed's near-data case studies on a Flight node, partitions particle flows under node
budgets and profiles them with stress-ng, and ends by writing the HTML report.
Results go to ``<out>/demo.json`` and the plots next to it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from offload import rules
from offload.clitools import console
from offload.datafiles import data_path
from offload.files import write_text
from offload.rules import bench
from offload.rules.cli import print_explanation
from offload.rules.synth import synth


def _pick_examples(rs: rules.RuleSet, result: rules.MatchResult) -> list[int]:
    """Query indices worth explaining: a carrier-level answer, an airport default, a miss."""
    codes = rs.criterion_codes
    mandatory = {c for c, _, m, _ in rs.criteria if m}
    picks: list[int] = []
    specific_rule = default_rule = miss = None
    for q in range(min(len(result), 20_000)):
        r = int(result.rule[q])
        if r < 0:
            miss = miss if miss is not None else q
            continue
        cells = rs.rule_cells(r)
        optional = [cells[i] for i, c in enumerate(codes) if c not in mandatory]
        if any(optional):
            specific_rule = specific_rule if specific_rule is not None else q
        else:
            default_rule = default_rule if default_rule is not None else q
        if None not in (specific_rule, default_rule, miss):
            break
    for q in (specific_rule, default_rule, miss):
        if q is not None:
            picks.append(q)
    return picks


def _serve_section(out: Path, paths: dict[str, str], rs: rules.RuleSet) -> dict[str, Any]:
    """The rule set as a service: replay the trace through a real daemon, then a small sweep."""
    from offload.serve import daemon, inject

    console.rule("the rule engine as a service (offload serve + offload serve inject)")
    trace = inject.load_trace(Path(paths["queries"]).parent, rs.criterion_codes)
    endpoint = f"ipc://{out.resolve()}/demo-serve.sock"
    keys, control = _demo_keys(out), f"tcp://127.0.0.1:{_free_port()}"
    with console.status("starting offload serve (2w 1k 1e) and replaying the trace over 2 connections"):
        proc = daemon.start(
            *daemon.rule_flags(paths["ruletype"], paths["rules"]), "-e", endpoint, "-c", control,
            "--curve-secret-key", str(keys / "server.key_secret"),
            "--curve-client", str(keys / "operator.key"),
        )  # fmt: skip
        try:
            replay = inject.run(endpoint, trace, processes=2, mode="closed", duration=3.0)
            opened = inject.run(endpoint, trace, processes=2, mode="open", rate=1000, duration=3.0)
            security = _control_with_keys(control, keys)
        finally:
            daemon.stop(proc)
    t = Table(title="trace replay (user requests as traced: raw values, encoded by the service)")
    for col in ("load", "req/s", "q/s", "p50", "p90", "p99", "max", "statuses"):
        t.add_column(col, justify="right")
    for name, r in (("closed 2p", replay), ("open 1k/s", opened)):
        lat = r["latency_us"]
        t.add_row(
            name, f"{r['requests_per_s']:,.0f}", bench.rate(r["queries_per_s"]),
            *("none" if lat[k] is None else f"{lat[k] / 1e3:.2f} ms" for k in ("p50", "p90", "p99", "max")),
            ", ".join(f"{k} {v}" for k, v in r["status"].items()),
        )  # fmt: skip
    console.print(t)
    stages = replay["stage_median_us"]
    console.print(
        "median per request inside the server: "
        + ", ".join(f"{k} {stages.get(k, 0):.0f} µs" for k in inject.STAGES)
        + "; round trip "
        + ("none" if replay["latency_us"]["p50"] is None else f"{replay['latency_us']['p50']:.0f} µs")
    )
    _, breakdown = inject.write(replay, out / "serve-inject.json")
    summary = _knee_sweep(out, paths, trace)
    console.print(f"wrote {breakdown} (stage breakdown by size) and {out / 'serve-sweep.png'} (Pareto)")
    host_path = _host_path_section(out, paths)
    return {
        "replay": replay,
        "open_loop": opened,
        "sweep": summary,
        "security": security,
        "host_path": host_path,
    }


# The demo's grid, each point to its knee: the fast matcher inline or behind one or two executors
# (self-filling batches), raw text or 16-bit codes, over ZeroMQ ipc and shared memory, 2 and 4
# connections (two knees or more of each kind, so that each kind's prediction is checked), 256
# queries. Two executors are measured, not only simulated: the answer is often one of them, and
# two matches at once on two cores cost more per query than one (BENCHMARKS.md, issue 44).
DEMO_GRID = {
    "p": [2, 4], "shapes": [(1, 0, 1), (1, 1, 1), (1, 2, 1)], "policies": [(4096, 0)],
    "encodings": ["raw", "codes16"],
    "request_queries": [256], "transports": ["ipc", "shm"],
}  # fmt: skip


def _knee_sweep(out: Path, paths: dict[str, str], trace: Any) -> dict[str, Any]:
    """`offload serve sweep --knee` over DEMO_GRID: short searches (3 bisections of 0.5 s)."""
    from offload.serve import grid, sweep

    g = DEMO_GRID
    points = grid.product(g["p"], g["shapes"], [grid.Policy(*x) for x in g["policies"]], g["encodings"],
                          g["request_queries"], g["transports"])  # fmt: skip
    setup = sweep.Setup(paths["ruletype"], paths["rules"], trace, duration_s=0.5, knee_steps=3)
    with console.status(f"the grid, {len(points)} points, each to its knee (p99 <= 5 ms)") as status:
        failed: list[dict[str, str]] = []
        rows = sweep.sweep(setup, sweep.grid(points, knee=True), lambda m: status.update(m), failed)
    summary = sweep.write(rows, out / "serve-sweep.json", p99_us=5_000, qps=1e6, failed=failed)
    for f in failed:
        console.print(f"[yellow]no knee:[/] {f['why']}", highlight=False)
    best = summary["best_under_p99"]["config"]
    console.print(
        "sweep: Pareto front " + "; ".join(summary["pareto"])
        + f". Most throughput with p99 <= 5 ms: {best['label'] if best else 'none'}"
    )  # fmt: skip
    return summary


def _recommend(
    out: Path, paths: dict[str, str], cal: dict[str, Any], rows: list[dict[str, Any]], sizes: list[int]
) -> dict[str, Any]:
    """`offload plan recommend` on the knees: every kind measured, over more connections and
    shapes than were measured, and the seed's FPGA as a what-if device beside them (never the
    answer: it is not on this machine); a simulated answer not measured yet is measured at its
    knee, so that its measured figure stands beside the simulated one."""
    from offload.plan import knees, recommend, simulate
    from offload.serve import grid, inject, sweep

    shapes, fill = [(1, 0, 1), (1, 1, 1), (2, 1, 1), (1, 2, 1)], [grid.Policy(4096)]
    points = knees.points(cal, [1, 2, 4, 8], shapes, fill, [256])
    fpga = knees.points(cal, [4], [(1, 1, 1), (1, 2, 1)], fill, [256], ["erbium-fpga"])
    points += [d for d in fpga if d.matcher == "erbium-fpga"]  # the seed's FPGA, a few points
    devices = {"erbium-fpga": simulate.load_preset("erbium-fpga")[1]}
    with console.status(f"predicting the knee of {len(points)} points of the grid") as status:
        simulated = recommend.knee_rows(cal, sizes, points, progress=status.update, devices=devices)
    measured = recommend.tag(rows, "measured")
    rec = recommend.recommend(measured + simulated, p99_us=5_000, target_qps=1e6)
    if rec["answer"] and rec["answer"]["measured"] is None:
        d = grid.Deployment.of_row(recommend.chosen(rec) or {})
        with console.status(f"measuring the answer, {d.label()}, at its knee"):
            rs = rules.load(paths["ruletype"], paths["rules"])
            trace = inject.load_trace(Path(paths["queries"]).parent, rs.criterion_codes)
            setup = sweep.Setup(paths["ruletype"], paths["rules"], trace, duration_s=0.5, knee_steps=3)
            failed: list[dict[str, str]] = []
            measured += recommend.tag(
                sweep.sweep(setup, sweep.grid([d], knee=True), failed=failed), "measured"
            )
        for f in failed:
            console.print(f"[yellow]the answer measured no knee:[/] {f['why']}", highlight=False)
        rec = recommend.recommend(measured + simulated, p99_us=5_000, target_qps=1e6)
    all_rows = measured + simulated
    png = recommend.plot(
        all_rows, recommend.chosen(rec), out / "recommend.png", "offload plan recommend (demo)"
    )
    rec |= {"rows": all_rows, "plot": str(png), "preset": None}
    write_text((out / "recommend.json"), json.dumps(rec, indent=2))
    return rec


def _host_path_section(out: Path, paths: dict[str, str]) -> dict[str, Any]:
    """The service's own cost: the knee of the daemon with the null matcher (the host path
    alone), with fast, and with the emulated H200 (no matching on the host), inline, requests of
    256 queries encoded by the client with the daemon's dictionary; the host path at each knee.
    A short search (2 bisections of 0.5 s): benches/serve_hostpath.py runs the full one."""
    from offload.serve import hostpath

    console.rule("the service's host path (offload serve bench --control; docs/serve-protocol.md)")
    profile = data_path("plans", "whatif", "gpu-h200.toml")
    setup = hostpath.Setup(
        paths["ruletype"], paths["rules"], Path(paths["queries"]), profile, duration_s=0.5, steps=2
    )
    with console.status("each configuration's knee (p99 <= 5 ms) and its host path"):
        result = hostpath.run(setup, hostpath.DEMO_CONFIGS, log=console.print)
    write_text(out / "serve-hostpath.json", json.dumps(result, indent=1))
    hostpath.plot(result, out / "serve-hostpath.png")
    console.print(f"wrote {out / 'serve-hostpath.json'} and {out / 'serve-hostpath.png'}")
    return result


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _demo_keys(out: Path) -> Path:
    """CURVE key pairs for the daemon and an operator (`offload serve keys`)."""
    from offload import _native

    keys = out / "keys"
    for name in ("server", "operator"):
        _native.curve_key_pair(str(keys), name, True)
    return keys


def _control_with_keys(control: str, keys: Path) -> dict[str, Any]:
    """The control socket requires CURVE: a peer without keys gets nothing, the operator's key
    gets the counters."""
    from offload.serve import CurveKeys
    from offload.serve.control import control_request

    try:
        control_request(control, "stats", 0.5)
        refused = False
    except TimeoutError:
        refused = True
    stats = control_request(
        control, "stats", 10, CurveKeys(keys / "server.key", keys / "operator.key_secret")
    )
    console.print(
        f"control socket {control} requires CURVE: without keys {'no answer' if refused else 'ANSWERED'}; "
        f"with the operator's key: version {stats['version']}, {stats['requests']:,} requests served, "
        f"{stats['auth']['control_ok']} handshake(s) admitted (keys in {keys}; "
        "docs/serve-protocol.md#security)"
    )
    return {"keyless_refused": refused, "auth": stats["auth"]}


def _gpu_section(rs: rules.RuleSet, cols: list[list[str]]) -> dict[str, Any]:
    """The gpu matcher: the device if there is one, else the reason; the kernel compiled by NVRTC
    (no device needed); with a device, gpu beside fast on the trace, answers compared."""
    console.rule("the gpu matcher (docs/rules.md; benches/gpu/run.sh runs the whole GPU section)")
    section: dict[str, Any] = {}
    try:
        ptx = rules.gpu_kernel_ptx("compute_90")
        section["kernel_ptx_bytes"] = len(ptx)
        console.print(f"kernel compiled by NVRTC for sm_90: {len(ptx):,} bytes of PTX")
    except RuntimeError as e:
        section["kernel_ptx"] = str(e)
        console.print(f"kernel not compiled: {e}")
    console.print("its logic, built for this CPU (gpu-host), is among the matchers compared above")
    try:
        section["device"] = rules.gpu_device()
    except RuntimeError as e:
        section["device"] = str(e)
        console.print(f"[yellow]{e}[/]: the device run is skipped")
        return section
    gpu, fast = rules.compile(rs, "gpu"), rules.compile(rs, "fast")
    codes = fast.encode(cols)
    t0 = time.perf_counter()
    got = gpu.match(codes).rule
    wall = time.perf_counter() - t0
    section["agrees_with_fast"] = bool(np.array_equal(got, fast.match(codes).rule))
    section["stages"] = gpu.stats()["last_batch"]
    console.print(
        f"{section['device']['name']}: {len(codes):,} queries in {wall * 1e3:.1f} ms with transfers, "
        f"agree with fast: {section['agrees_with_fast']}; device stages {section['stages']}"
    )
    return section


def _probe_section(out: Path) -> dict[str, Any]:
    """The quick probe: the channels the service's requests cross, with their orderings."""
    from offload import probe
    from offload.probe import plot
    from offload.probe.cli import print_profile

    console.rule("the channels on this machine (offload probe --quick)")
    with console.status("probing memory, IPC, ZeroMQ and io_uring (quick mode)"):
        profile = probe.run(quick=True, directory=out)
    print_profile(profile)
    write_text((out / "probe-quick.json"), json.dumps(profile, indent=2))
    written = plot.all_plots(profile, out / "probe-quick.json")
    console.print("wrote " + ", ".join(str(p) for p in [out / "probe-quick.json", *written]))
    return profile


def _plan_section(out: Path, paths: dict[str, str]) -> dict[str, Any]:
    """The planner on the demo's own measurements: calibrate the simulator on the sweep,
    recommend a configuration (measured and simulated), a what-if FPGA kernel, the seed's cost
    table; then the HTML report of everything."""
    from offload import report
    from offload.plan import calibrate, cost, knees, recommend, simulate

    console.rule("the planner (offload plan calibrate / recommend / cost) and the report")
    sizes = calibrate.trace_sizes(Path(paths["queries"]).parent)
    rows = json.loads((out / "serve-sweep.json").read_text())["rows"]
    channel = calibrate.profile_channel(json.loads((out / "probe-quick.json").read_text()))
    base = simulate.Costs(channel_latency_s=channel[0], channel_bps=channel[1])
    with console.status("calibrating the model on the knees: each kind's costs from its host path by role"):
        cal = knees.calibrate(rows, sizes, base, len(os.sched_getaffinity(0)))
    write_text((out / "calibration.json"), json.dumps(cal, indent=2))
    mae = cal["median_abs_error"]
    console.print(
        f"model calibrated on {sum(cal['knees'].values())} knees of {len(cal['knees'])} kinds (fitted: the "
        f"knee at {cal['knee_utilisation']:.2f} of its capacity); leave-one-out: knee throughput error "
        f"{mae['queries_per_s']:.0%}, p99 {mae['p99']:.0%} (median)"
    )
    rec = _recommend(out, paths, cal, rows, sizes)
    console.print(f"[bold]{recommend.answer_line(rec['answer'])}[/]")
    fpga = (rec.get("what_if") or {}).get("config")
    if fpga:
        console.print(
            f"what-if, {simulate.load_preset('erbium-fpga')[0]['name']}, on these {cal['cpus']} cores: "
            f"{fpga['label'].removesuffix(' knee')} → knee {fpga['queries_per_s'] / 1e6:.2f} M queries/s "
            f"at p99 {fpga['p99_us'] / 1e3:.1f} ms (simulated: host roles as measured, the seed's kernel)"
        )
    scenario = cost.load_scenario(data_path("plans", "seed-table1.toml"))
    lines = cost.cost(scenario)
    write_text((out / "cost.json"), json.dumps(cost.report(scenario, lines), indent=2))
    console.print(
        "the seed's Table 1 from its inputs: "
        + "; ".join(
            f"{ln.group} {ln.item.name} {ln.units:,} units {float(ln.total_usd) / 1e6:.2f} M"
            + ("/year" if ln.per_year else "")
            for ln in lines
        )
    )
    html = report.build(out / "report.html", out / "rules-bench.json", out / "probe-quick.json",
                        out / "serve-sweep.json", out / "calibration.json", out / "recommend.json",
                        out / "cost.json", out / "recsys-bench.json",
                        out / "dataservices-cases.json", out / "flows-partition.json",
                        _if_made(out / "rpwu.json"), _if_made(out / "flows-nodes.json"),
                        availability=_if_made(out / "availability.json"),
                        host_path=_if_made(out / "serve-hostpath.json"))  # fmt: skip
    console.print(f"wrote {html} (open it in a browser)")
    return {"calibration": cal, "recommend": rec}


def _recsys_section(out: Path) -> dict[str, Any]:
    """RM-SSD in small: an RMC1 model with 32 MiB of tables, every strategy over one short trace in
    `flash` mode (the seed's Table II media), side by side; the figures beside the JSON."""
    from offload.recsys import bench as rbench
    from offload.recsys import engine as E
    from offload.recsys import plots
    from offload.recsys import traces as T
    from offload.recsys.cli import print_bench
    from offload.recsys.models import SPECS

    console.rule("recommendation inference with embeddings on SSD (offload recsys create / bench)")
    spec = SPECS["rmc1"]
    d = E.create(out / "recsys-rmc1", spec, E.rows_for_bytes(spec, 32 << 20), seed=0)
    cfg = T.TraceConfig(rows=d.rows, batch_size=8, lookups=spec.lookups, dense_width=spec.dense_width)
    with console.status("every RM-SSD strategy over 4 batches of 8 inferences (flash mode)"):
        res = rbench.run(
            d, T.generate_trace(cfg, 4), list(E.STRATEGIES), "flash", rbench.RunOptions(warmup=1)
        )
    write_text((out / "recsys-bench.json"), json.dumps(res, indent=2))
    res["plots"] = [str(p) for p in plots.per_bench(res, out)]
    print_bench(res)
    dev = res["strategies"]["rm-ssd"]["device"]
    console.print(
        f"the device ran as process {dev.get('pid')} on CPU {dev.get('cpu')}, behind a shared-memory channel"
    )
    return res


def _flows_section(out: Path) -> dict[str, Any]:
    """Particle data flows in small: the partition service over 200,000 rows of each data set in a
    process held to one core and to a quarter core (bluefield2), without and with zstd; then the
    node budgets' stress-ng profile on two stressors where stress-ng is installed. The gigabyte
    version: `python benches/flows_bench.py --parts partition --gb 1` (docs/flows.md)."""
    from offload.flows import datasets as D
    from offload.flows import partition as F
    from offload.flows.cli import print_partition
    from offload.metrics import rpwu as R

    console.rule("particle data flows: partition by id on a quarter-core node (offload flows)")
    runs = []
    with console.status("partitioning 200,000 rows of particles, airplanes and ships under two budgets"):
        for name in D.DATASETS:
            for prof in ("core", "bluefield2"):
                for codec in (None, "zstd"):
                    runs.append(F.partition_under(prof, name, 200_000, 8, codec, out / "flows"))
    print_partition(runs)
    write_text((out / "flows-partition.json"), json.dumps(runs, indent=2))
    F.plot_partition(runs, out / "flows-partition.png")
    res: dict[str, Any] = {"partition": runs, "nodes": _flows_over_nodes(out), "metrics": _metrics(out)}
    why = R.unavailable_reason()
    if why:
        console.print(f"node profile (offload metrics rpwu) skipped: {why}")
        return res
    with console.status("stress-ng: matrix and pipe on one core and on a quarter core"):
        prof = R.profile(["bluefield2"], ["matrix", "pipe"], seconds=1)
    write_text((out / "rpwu.json"), json.dumps(prof, indent=2))
    rel = prof["relative"]["bluefield2"]
    console.print(
        f"bluefield2 against one core (the seed's RPWU): matrix {rel['matrix']:.2f}, pipe {rel['pipe']:.2f}"
    )
    return res | {"rpwu": prof}


def _if_made(path: Path) -> Path | None:
    return path if path.exists() else None


def _metrics(out: Path) -> dict[str, Any]:
    """The metrics that need no long measurement: relative data availability for the seed's
    three cases, and the MBWU case study's $/kWh/m³ reductions recomputed from the catalog.
    Measuring this disk's MBWU takes minutes (`offload metrics mbwu`), the network headroom a
    shaped namespace (`offload metrics headroom`): docs/metrics.md."""
    from offload.metrics import availability as A
    from offload.metrics import mbwu as M

    console.rule("metrics (offload metrics availability / mbwu --no-measure)")
    avail = A.report()
    write_text((out / "availability.json"), json.dumps(avail, indent=2))
    for c in avail["cases"]:
        console.print(
            f"availability, {c['case']} (n={c['n']}, c={c['c']}, f={c['f']:g}): embedded storage loses data "
            f"{c['benefit_rare_limit']:.1f}x less often than servers (the seed: {c['published']:g})"
        )
    study = M.seed_case_study()
    for t in study["tests"]:
        red, rep = t["reduction"], t["reported"]
        console.print(
            f"MBWU case study, {t['test']}: $/MBWU {100 * red['usd_per_mbwu']:.1f}% lower on the embedded "
            f"nodes (the seed: {100 * rep['usd_per_mbwu']:.1f}%), kWh/MBWU {100 * red['kwh_per_mbwu']:.1f}% "
            f"(the seed: {100 * rep['kwh_per_mbwu']:.1f}%)"
        )
    return {"availability": avail, "mbwu_case_study": study}


def _flows_over_nodes(out: Path) -> list[dict[str, Any]]:
    """The whole pipeline over 1 and 2 quarter-core node processes (offload flows run), and the
    pipeline model fitted on them, predicting 100 nodes (no node count is held out here: the
    benchmark's nodes part holds out 4 and 8)."""
    from offload.flows import pipeline as fm
    from offload.flows import run as R
    from offload.flows.cli import print_run

    runs = []
    with console.status("the pipeline over 1 and 2 quarter-core nodes: 1,000,000 particles"):
        for n in (1, 2):
            with R.start_nodes(n, "bluefield2", out / "flows") as procs:
                r = R.run(procs.specs, "particles", 1_000_000, out / "flows", queries=False)
            r.pop("sorted")
            runs.append(
                r | {"profile": "bluefield2", "cores": os.cpu_count(), "share": R.share("bluefield2")}
            )
    print_run(runs)
    write_text((out / "flows-nodes.json"), json.dumps(runs, indent=2))
    R.plot_nodes(runs, out / "flows-nodes.png")
    model = fm.fit(runs, R.share("bluefield2"), float(os.cpu_count() or 1))
    p = model.predict(100, 4.1, 100, None, 10.0)  # one dump per rank, as the seed's producers put them
    console.print(
        f"pipeline model (offload flows model): {model.a:.1f} CPU s per GB, {1e3 * model.b:.2f} ms per "
        f"east-west batch; 100 such nodes, each rank putting one 41 MB dump, would take the seed's 64M "
        f"particles (4.1 GB) at {p['gb_per_s']:.2f} GB/s (the seed: 1.32 GB/s; fitted on these two short "
        "runs, nothing held out: the benchmark's nodes part validates it)"
    )
    return runs


def _dataservices_section(out: Path) -> dict[str, Any]:
    """A near-data node in small: a Flight node in this process with 500,000 particles, time
    models from a small training suite, the seed's two case studies on it (estimate, decision,
    both ways measured) and one explained query. The budgeted, shaped version needs root:
    `offload node serve --profile bluefield2 --netns NAME` (docs/dataservices.md)."""
    import secrets

    from offload.dataservices import cases as C
    from offload.dataservices import particles as P
    from offload.dataservices import timemodel as TM
    from offload.dataservices import training as TR
    from offload.dataservices.cli import print_cases
    from offload.dataservices.client import NodeClient
    from offload.dataservices.node import Node, NodeConfig

    console.rule("near-data queries: a Flight node decides offload or push back (offload node)")
    token = secrets.token_urlsafe(16)
    node = Node(NodeConfig(token, name="demo-node"))
    try:
        with console.status("a node with 500,000 particles, its sketches, a small training suite, the cases"):
            node.add("particles", P.generate(500_000, seed=0))
            with NodeClient(f"127.0.0.1:{node.port}", token) as c:
                samples = []
                for i, n in enumerate((20_000, 100_000)):  # `offload node train` in small
                    c.upload(f"train_{n}", P.generate(n, seed=10 + i))
                    samples += TR.measure(c, f"train_{n}", TR.training_queries(9, i), "host", repeat=1)
                    c.drop(f"train_{n}")
                node.config.models = TM.Models.fit(samples)
                results = [C.run_case(c, name, repeat=1) for name in C.CASES]
                explain = c.explain(
                    "select t, count(*) as n from particles where x < 0.3 and y > 0.6 group by t"
                )
    finally:
        node.shutdown()
    print_cases(results)
    console.print(f"explain: {explain['estimate']['rows']:,.1f} groups expected; {explain['why']}")
    res = {"cases": results, "explain": explain}
    write_text((out / "dataservices-cases.json"), json.dumps(res, indent=2))
    return res


def run(out: str | Path, n_rules: int = 100_000, n_requests: int = 2_000) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]offload demo: the MCT rule engine")
    with console.status(f"synthesising {n_rules:,} MCT rules and a {n_requests:,}-request trace"):
        summary = synth(out, n_rules, n_requests, seed=0)
    paths = summary["paths"]
    console.print(
        f"synthesised {summary['n_rules']:,} rules over {summary['n_airports']:,} airports "
        f"({summary['n_distinct_contents']} distinct connecting times) and {summary['n_queries']:,} "
        f"queries from {summary['n_requests']:,} user requests in {summary['timings']['total_s']:.1f} s"
    )
    t0 = time.perf_counter()
    rs = rules.load(paths["ruletype"], paths["rules"])
    load_s = time.perf_counter() - t0
    console.print(f"loaded and validated the ERBIUM files in {load_s:.2f} s")
    ids, cols = bench.load_query_columns(rs, Path(paths["queries"]))

    with console.status("benchmarking linear, nfa and fast"):
        report = bench.run(rs, cols, threads=(1, 2), batch_sizes=(4096,), repeats=3)
    # Agreement: every matcher gives the same answer (linear on a sample: it is slow).
    answers: dict[str, np.ndarray] = {}
    sample = min(len(ids), 3_000)
    for name in rules.MATCHERS:
        eng = rules.compile(rs, name)
        codes = eng.encode(cols) if name != "linear" else eng.encode([c[:sample] for c in cols])
        answers[name] = eng.match(codes, threads=2).rule
    agree = all(np.array_equal(answers[m][:sample], answers["fast"][:sample]) for m in rules.MATCHERS)
    agree = agree and np.array_equal(answers["nfa"], answers["fast"])
    fast_result = rules.compile(rs, "fast").match(cols)

    t = Table(title=f"{len(rs):,} rules, {len(ids):,} queries (pre-encoded, batch 4096)")
    for col in ("matcher", "compile", "memory", "1 thread", "2 threads", "incl. encoding"):
        t.add_column(col, justify="right")
    for name, m in report["matchers"].items():
        runs = {r["threads"]: r["queries_per_s"] for r in m["runs"]}
        t.add_row(
            name,
            f"{m['compile_s'] * 1e3:.0f} ms",
            f"{m['memory_bytes'] / 1e6:.1f} MB",
            bench.rate(runs.get(1, 0)),
            bench.rate(runs.get(2, 0)),
            bench.rate(m["queries_per_s_1t_with_encode"]),
        )
    console.print(t)
    matched = float(np.mean(fast_result.matched)) if len(fast_result) else 0.0
    console.print(
        f"matchers agree on every compared answer: {'[green]yes' if agree else '[red]NO'}[/]; "
        f"{100 * matched:.1f}% of queries matched a rule; "
        f"fast is {report.get('fast_over_nfa', 0):.0f}x nfa "
        f"and {report.get('fast_over_linear', 0):,.0f}x linear"
    )
    console.rule("explained answers")
    fast = rules.compile(rs, "fast")
    for q in _pick_examples(rs, fast_result):
        console.print(f"[dim]query {ids[q]}[/]")
        print_explanation(fast.explain([c[q] for c in cols]))
    write_text((out / "rules-bench.json"), json.dumps(report, indent=2))
    png = bench.plot(report, out / "rules-bench.png")
    gpu = _gpu_section(rs, cols)
    service = _serve_section(out, paths, rs)
    probe = _probe_section(out)
    recsys = _recsys_section(out)
    dataservices = _dataservices_section(out)
    flows = _flows_section(out)
    plan = _plan_section(out, paths)
    result = {
        "synth": summary, "load_s": load_s, "bench": report, "matchers_agree": agree, "serve": service,
        "probe": probe, "plan": plan, "recsys": recsys, "dataservices": dataservices, "flows": flows,
        "gpu": gpu,
    }  # fmt: skip
    write_text((out / "demo.json"), json.dumps(result, indent=2, default=str))
    console.print(f"wrote {out / 'demo.json'}, {png} and the service plots in {out}")
    if not agree:
        raise SystemExit("matchers disagree")
    if not all(c["ok"] for c in probe["checks"]):
        raise SystemExit("a probe ordering check failed")
    return result
