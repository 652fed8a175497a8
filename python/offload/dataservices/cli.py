"""`offload node ...`: near-data query nodes (seed 003) — serve a node, load data, query it.

serve a node → make particles → load them → query with SQL, offloaded or pushed back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from offload.clitools import (
    JsonOpt,
    OutOpt,
    compact_table,
    console,
    emit,
    enter_netns,
    err,
    fail,
    failing,
    oneline,
    progress,
    size_bytes,
)

app = typer.Typer(
    help="Near-data query nodes (Arrow Flight + Substrait): serve, particles, load, list, query, "
    "explain, train, case-study, cluster-load, cluster-query.",
    no_args_is_help=True,
)

DEFAULT_PORT = 8815
SERVICES: dict[str, Any] = {}
"""What every node that `serve` starts hosts beside its data sets, by name (node.Service): the
`offload` command adds the particle flows (offload/cli.py), as this package imports no part
above it."""
NodeOpt = Annotated[str, typer.Option("--node", "-n", help="The node's host:port.")]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="File holding the node's token. \\[default: $OFFLOAD_NODE_TOKEN, else "
        "~/.offload/node-PORT.token, which `serve` writes]",
    ),
]


def _token(node: str, token_file: Path | None) -> tuple[str, str]:
    """The node's token and where it came from (named when the node refuses it)."""
    from offload.dataservices.serving import default_token_file

    if token_file is None and os.environ.get("OFFLOAD_NODE_TOKEN"):
        return os.environ["OFFLOAD_NODE_TOKEN"], "from $OFFLOAD_NODE_TOKEN"
    path = (token_file or default_token_file(_port(node))).expanduser().absolute()
    try:
        return path.read_text().strip(), f"from {path}"
    except OSError as e:
        raise fail(f"cannot read the node token from {path}: {e.strerror}; pass --token-file") from None


def _port(node: str) -> int:
    try:
        return int(node.rsplit(":", 1)[-1])
    except ValueError:
        raise fail(f"--node {node!r}: give host:port") from None


def _client(node: str, token_file: Path | None, netns: str | None = None, timeout_s: float = 60.0) -> Any:
    from offload.dataservices.client import NodeClient

    enter_netns(netns)

    token, source = _token(node, token_file)
    return NodeClient(node, token, timeout_s, token_source=source)


NetnsOpt = Annotated[
    str | None,
    typer.Option(
        help="Run inside this network namespace (made if missing; `offload-` is prefixed), over its "
        "loopback: nodes and their clients must share it. \\[default: the host's loopback]"
    ),
]


@app.command()
def serve(
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free one).")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(help="Address to bind; off loopback needs --allow-remote.")] = (
        "127.0.0.1"
    ),
    profile: Annotated[
        str, typer.Option(help="Resource budget: host (no limits), core (one core) or bluefield2 (seed 003).")
    ] = "host",
    threads: Annotated[
        int | None, typer.Option(help="Query engine threads. \\[default: the profile's]")
    ] = None,
    cpu_per_thread: Annotated[
        float | None, typer.Option(help="Share of a core per thread, 0-1. \\[default: the profile's]")
    ] = None,
    memory: Annotated[
        str | None, typer.Option(help="Memory limit, e.g. 2G (none: no limit). \\[default: the profile's]")
    ] = None,
    link: Annotated[
        str | None,
        typer.Option(
            help="Link RATE[,DELAY], e.g. 1000mbit,0.5ms (needs --netns). \\[default: the profile's]"
        ),
    ] = None,
    netns: NetnsOpt = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Directory whose files `load --path` may register. \\[default: none]")
    ] = None,
    token_file: TokenFileOpt = None,
    models: Annotated[
        Path | None,
        typer.Option(
            help="Time models from `offload node train` for `auto` queries. \\[default: none: auto offloads]"
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="The node's name in answers and errors.")] = "node",
    allow_remote: Annotated[
        bool, typer.Option(help="Allow a non-loopback --host (the token then travels in clear text).")
    ] = False,
    max_seconds: Annotated[
        float, typer.Option(help="Stop after this many seconds (0: run until Ctrl-C / SIGTERM).")
    ] = 0.0,
    batch_rows: Annotated[
        int, typer.Option(min=1, help="The most rows in one record batch the node sends.")
    ] = 65_536,
    batch_size: Annotated[
        str, typer.Option(help="The most Arrow bytes in one record batch the node sends, e.g. 4M.")
    ] = "4M",
) -> None:
    """Serve a node: an Arrow Flight server that owns data sets and runs Substrait plans sent to
    it, or ships the columns they read back to the host, under a resource budget (CPU quota,
    memory limit, shaped link). Every call needs the node's token, written (mode 0600) to
    --token-file unless $OFFLOAD_NODE_TOKEN gives it."""
    from offload.dataservices import serving as S
    from offload.host import budgets as B

    with failing(ValueError):
        prof = S.with_overrides(B.profile(profile), threads, cpu_per_thread, memory, link)
    if prof.link.shaped and netns is None:
        if link is not None:
            raise fail("a shaped link needs --netns (tc shapes that namespace's loopback, never the host's)")
        console.print(f"the {prof.name} profile's link is not shaped: give --netns to shape it")
    data_dir = data_dir.absolute() if data_dir is not None else None
    enter_netns(netns)
    os.environ["TOKIO_WORKER_THREADS"] = str(prof.threads)  # before DataFusion starts its runtime
    with failing(ValueError):
        cfg = S.config(prof, B.profile(profile), host, port, data_dir, allow_remote, name, models)
        cfg.batch_rows, cfg.batch_bytes = batch_rows, size_bytes(batch_size)
    with failing(S.CannotServe):
        served = S.start(cfg, prof, netns, token_file, list(SERVICES.values()))
    if served.token_file is not None:
        console.print(f"token in {served.token_file}")
    console.print(f"{name} serving on {served.where}")
    console.print(S.budget_line(served.applied))
    S.wait(max_seconds)
    served.stop()
    console.print(f"{name} stopped")


@app.command()
def particles(
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write.")],
    rows: Annotated[int, typer.Option(help="Particles (the seed's case studies: 6,177,731).")] = 6_177_731,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    correlation: Annotated[float, typer.Option(help="How much y follows x, 0 (independent) to 1.")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Generate a particle table (id, x, y, z, vx, vy, vz, t; positions uniform in [0, 1)),
    written as Parquet with page checksums, whole or not at all."""
    from offload.dataservices import particles as P

    try:
        t = P.generate(rows, seed=seed, correlation=correlation)
        path = P.write(t, out).absolute()
    except (ValueError, OSError) as e:
        raise fail(oneline(e)) from None
    res = {"path": str(path), "rows": t.num_rows, "bytes": path.stat().st_size}
    if emit(res, as_json):  # its --out is the Parquet file
        return
    console.print(f"wrote {path}: {t.num_rows:,} particles, {t.nbytes / 2**20:.1f} MiB in memory")


@app.command()
def load(
    name: Annotated[str, typer.Argument(help="Data set name on the node.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    file: Annotated[
        Path | None, typer.Option(help="Local Parquet/Arrow file to upload. \\[default: none]")
    ] = None,
    path: Annotated[
        str | None, typer.Option(help="File in the node's --data-dir to register. \\[default: none]")
    ] = None,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Give a node a data set: upload a local file (--file) or register one of its own (--path:
    relative to the node's --data-dir; a relative path that exists here is sent absolute, and the
    node takes it if it lies inside its data directory)."""
    from offload.dataservices import tablefiles
    from offload.dataservices.client import NodeError

    if (file is None) == (path is None):
        raise fail("give exactly one of --file (upload) or --path (a file on the node)")
    table = None
    if file is not None:
        with failing(tablefiles.DamagedFile):
            table = tablefiles.read(file.absolute())
    elif not Path(path).is_absolute() and Path(path).exists():  # type: ignore[arg-type]
        path = str(Path(path).absolute())  # type: ignore[arg-type]
    with _client(node, token_file, netns, timeout_s=900) as c:  # loading sketches every column
        with failing(NodeError):
            d = c.upload(name, table) if table is not None else c.register(name, str(path))
    if emit(d, as_json, out):
        return
    console.print(
        f"{d['name']}: {d['rows']:,} rows, {d['bytes'] / 2**20:.1f} MiB, columns {', '.join(d['columns'])}"
    )


@app.command(name="list")
def list_(
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """The node's data sets."""
    from offload.dataservices.client import NodeError
    from offload.dataservices.serving import budget_line

    with _client(node, token_file, netns) as c:
        with failing(NodeError):
            st = c.status()
    if emit(st, as_json, out):
        return
    console.print(f"{st['name']}: {budget_line(st.get('budget') or {}, st['threads'])}")
    t = compact_table(f"{st['name']}: data sets")
    for col in ("data set", "rows", "MiB", "columns", "source"):
        t.add_column(col, justify="right" if col in ("rows", "MiB") else "left")
    for d in st["datasets"]:
        t.add_row(
            d["name"], f"{d['rows']:,}", f"{d['bytes'] / 2**20:.1f}", ", ".join(d["columns"]), d["source"]
        )
    console.print(t)


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL over the node's data sets.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    way: Annotated[
        str,
        typer.Option(
            help="offload (run on the node), pushback (run here), both, or auto (the node decides, "
            "and says what and why)."
        ),
    ] = "both",
    compression: Annotated[str, typer.Option(help="IPC compression on the wire: none, lz4, zstd.")] = "none",
    show: Annotated[int, typer.Option(help="Result rows to print.")] = 5,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run a query on a node: offloaded (the node runs the plan and ships the result), pushed
    back (the node ships the columns it reads and this host runs the plan), or both, side by
    side, with where the time went."""
    from offload.dataservices import plans
    from offload.dataservices.client import NodeError
    from offload.dataservices.plans import PlanError

    ways = ("offload", "pushback") if way == "both" else (way,)
    if any(w not in ("offload", "pushback", "auto") for w in ways):
        raise fail(f"--way must be offload, pushback, both or auto, got {way!r}")
    comp = None if compression == "none" else compression
    runs = {}
    with _client(node, token_file, netns) as c:
        with failing(NodeError, PlanError, ValueError):
            plan = c.plan(sql)
            for w in ways:
                runs[w] = c.query(plan, w, comp)
    same = plans.same_answer(*(r[0] for r in runs.values())) if len(runs) == 2 else None
    doc = {"sql": sql, "runs": {w: t.as_dict() for w, (_, t) in runs.items()}, "same_answer": same}
    if emit(doc, as_json, out):
        return
    result = next(iter(runs.values()))[0]
    console.print(result.slice(0, show).to_pandas().to_string(index=False) if show else "")
    if "auto" in runs:
        tm = runs["auto"][1]
        why = (tm.decision or {}).get("why", "the node gave no reason")
        console.print(f"auto: the node chose {tm.way}: {why}")
        runs = {f"auto ({tm.way})": runs["auto"]}
    _timing_table(runs, same)


def _timing_table(runs: dict[str, Any], same: bool | None) -> None:
    """Stages as rows, ways as columns (ms), so the table fits a terminal."""
    t = compact_table("where the time went (ms)" + ("" if same is None else f"; same answer: {same}"))
    t.add_column("stage")
    for w in runs:
        t.add_column(w, justify="right")
    stages = (
        ("check (get_flight_info)", "info"),
        ("node: engine", "node_engine"),
        ("node: whole stream", "node"),
        ("fetch (host side)", "fetch"),
        ("host: run the plan", "host"),
        ("total", "total"),
    )
    for label, key in stages:
        t.add_row(label, *(f"{1e3 * getattr(tm, key):.1f}" for _, tm in runs.values()))
    t.add_row("rows", *(f"{tm.rows:,}" for _, tm in runs.values()))
    t.add_row("Arrow MiB received", *(f"{tm.arrow_bytes / 2**20:.2f}" for _, tm in runs.values()))
    console.print(t)


@app.command()
def explain(
    sql: Annotated[str, typer.Argument(help="SQL over the node's data sets.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    run: Annotated[bool, typer.Option(help="Also run the query both ways and show what happened.")] = True,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """What the node expects of a query before running it: the estimated result rows and bytes,
    and the steps that led there (sketches, sample corrections, joins); with --run, the measured
    rows and both ways' times beside them."""
    from offload.dataservices.client import NodeError
    from offload.dataservices.plans import PlanError

    with _client(node, token_file, netns) as c:
        with failing(NodeError, PlanError):
            plan = c.plan(sql)
            est = c.estimate(plan)
            runs = {w: c.query(plan, w)[1] for w in ("offload", "pushback")} if run else {}
    doc = {"sql": sql, "estimate": est, "runs": {w: t.as_dict() for w, t in runs.items()}}
    if emit(doc, as_json, out):
        return
    console.print(f"[bold]estimate[/]: {est['rows']:,.1f} rows, {est['bytes'] / 2**20:.2f} MiB "
                  f"({1e3 * est['seconds']:.2f} ms to estimate)")  # fmt: skip
    for step in est["steps"]:
        console.print(f"  {step}")
    if runs:
        rows = runs["offload"].rows
        err = abs(est["rows"] - rows) / max(rows, 1)
        console.print(f"[bold]measured[/]: {rows:,} rows (estimate off by {100 * err:.2f}%)")
        _timing_table({w: (None, t) for w, t in runs.items()}, None)
        faster = min(runs, key=lambda w: runs[w].total)
        other = max(runs, key=lambda w: runs[w].total)
        gain = 1 - runs[faster].total / runs[other].total
        console.print(f"{faster} was faster by {100 * gain:.1f}%")


@app.command()
def train(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Training file to write (samples are added to it).")
    ],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    sizes: Annotated[str, typer.Option(help="Particle table sizes to train on, comma-separated.")] = (
        "100000,400000,1600000"
    ),
    queries: Annotated[int, typer.Option(help="Queries per table size (random thresholds).")] = 30,
    repeat: Annotated[
        int,
        typer.Option(help="Runs of each query each way; the medians are kept (a quota-held node jitters)."),
    ] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the tables and thresholds.")] = 0,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train the time models on a running node: upload particle tables of a few sizes, run a
    suite of queries both ways, and keep the node's engine and stream seconds (its profile's
    system type) and the host's receive and engine seconds. Train on an unshaped link (the
    transfer is modelled from the node's link at decision time). Prints the held-out errors."""
    from offload.dataservices import particles as P
    from offload.dataservices import timemodel as TM
    from offload.dataservices import training as TR
    from offload.dataservices.client import NodeError

    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise fail(f"--sizes {sizes!r}: give row counts like 100000,400000") from None
    if repeat < 1:
        raise fail(f"--repeat {repeat}: give at least 1 run")
    samples = []
    with _client(node, token_file, netns, timeout_s=900) as c:
        with failing(NodeError):
            st = c.status()
            system = st.get("system", "host")
            if (st.get("budget") or {}).get("link", {}).get("rate_mbit"):
                err.print("[yellow]the node's link is shaped: its stream times will include the link[/]")
            with progress(f"training on {system}", total=len(counts) * queries) as steps:
                for i, n in enumerate(counts):
                    name = f"train_{n}"
                    steps(f"training on {system}: {n:,} rows")
                    c.upload(name, P.generate(n, seed=seed + i))
                    sqls = TR.training_queries(queries, seed + i)
                    samples += TR.measure(c, name, sqls, system, lambda _: steps.advance(), repeat)
                    c.drop(name)
    with failing(OSError, ValueError):
        old = TM.Models.load(out).samples if out.exists() else []
        TM.Models(old + samples).save(out)
    errors = TM.held_out_error(old + samples)
    doc = {"path": str(out.absolute()), "system": system, "samples_added": len(samples),
           "samples": len(old) + len(samples), "held_out_median_error": errors}  # fmt: skip
    if emit(doc, as_json):  # its --out is the training file
        return
    console.print(
        f"{len(samples)} samples from {system} and host added to {out} ({len(old) + len(samples)} in all)"
    )
    for k, v in sorted(errors.items()):
        console.print(f"  {k}: median error {100 * v:.1f}% on held-out queries")


@app.command(name="case-study")
def case_study(
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    rows: Annotated[int, typer.Option(help="Particles to load when the node has none.")] = 6_177_731,
    repeat: Annotated[int, typer.Option(help="Runs of each way (medians are shown).")] = 3,
    out: OutOpt = None,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The seed's Case I (0.9% selective) and Case II (18.4%, the crossover) on a node: its
    estimate and decision, both ways measured, the transfer sizes, beside the seed's figures.
    Loads `particles` (--rows) first if the node has no such data set."""
    from offload.dataservices import cases as C
    from offload.dataservices import particles as P
    from offload.dataservices.client import NodeError

    with _client(node, token_file, netns, timeout_s=900) as c:
        with failing(NodeError):
            if "particles" not in c.schemas():
                err.print(f"loading {rows:,} particles into the node")
                c.upload("particles", P.generate(rows))
            results = [C.run_case(c, name, repeat) for name in C.CASES]
    if emit(results, as_json, out):
        return
    print_cases(results)


ClusterOpt = Annotated[
    Path, typer.Option("--cluster", "-c", help="Cluster file (TOML: [nodes.NAME] endpoint, token_file).")
]


def _cluster(path: Path, netns: str | None) -> Any:
    from offload.dataservices.cluster import ClusterClient, load_cluster

    enter_netns(netns)
    with failing(ValueError):
        return ClusterClient(load_cluster(path), timeout_s=900)


@app.command(name="cluster-load")
def cluster_load(
    name: Annotated[str, typer.Argument(help="Data set name on every node.")],
    cluster: ClusterOpt,
    file: Annotated[
        Path | None, typer.Option(help="Parquet/Arrow file to partition. \\[default: particles]")
    ] = None,
    rows: Annotated[int, typer.Option(help="Particles to generate when no --file is given.")] = 6_177_731,
    by: Annotated[
        str | None,
        typer.Option(help="Integer column to partition by (modulo); a missing one: contiguous slices."),
    ] = "id",
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Partition a data set over the nodes of a cluster file."""
    from offload.dataservices import particles as P
    from offload.dataservices import tablefiles
    from offload.dataservices.client import NodeError

    with failing(ValueError):
        table = tablefiles.read(file.absolute()) if file else P.generate(rows)
    with _cluster(cluster, netns) as cc:
        with failing(NodeError, ValueError):
            parts = cc.upload_partitioned(name, table, by if by in table.schema.names else None)
    if emit({"name": name, "rows": parts}, as_json, out):
        return
    console.print(f"{name}: " + ", ".join(f"{n} {r:,} rows" for n, r in parts.items()))


@app.command(name="cluster-query")
def cluster_query(
    sql: Annotated[str, typer.Argument(help="SQL over the cluster's partitioned data sets.")],
    cluster: ClusterOpt,
    way: Annotated[str, typer.Option(help="offload, pushback, or auto (each node decides).")] = "auto",
    show: Annotated[int, typer.Option(help="Result rows to print.")] = 5,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run a query over a cluster: every node gets the partition-local part of the plan (below
    its first aggregate, sort or limit) and decides for its partition; this host finishes."""
    from offload.dataservices.client import NodeError
    from offload.dataservices.plans import PlanError

    with _cluster(cluster, netns) as cc:
        with failing(NodeError, PlanError, ValueError):
            result, timing = cc.query(sql, way)
    if emit({"sql": sql, "timing": timing.as_dict()}, as_json, out):
        return
    if show:
        console.print(result.slice(0, show).to_pandas().to_string(index=False))
    total, final = 1e3 * timing.total, 1e3 * timing.host_final
    t = compact_table(f"{timing.rows:,} rows in {total:.1f} ms (host final step {final:.1f} ms)")
    for col in ("node", "way", "rows", "node engine ms", "fetch ms", "host ms", "Arrow MiB"):
        t.add_column(col, justify="left" if col in ("node", "way") else "right")
    for n, d in timing.nodes.items():
        t.add_row(n, d["way"], f"{d['rows']:,}", f"{1e3 * d['node_engine']:.1f}", f"{1e3 * d['fetch']:.1f}",
                  f"{1e3 * d['host']:.1f}", f"{d['arrow_bytes'] / 2**20:.2f}")  # fmt: skip
    console.print(t)


def print_cases(results: list[dict[str, Any]]) -> None:
    """The case studies side by side, the seed's figures in brackets."""
    t = compact_table(escape("the seed's case studies: ours [seed]"))
    t.add_column("")
    for r in results:
        t.add_column(f"Case {r['case']}", justify="right")

    def seed(r: dict[str, Any], key: str, fmt: str) -> str:
        v = r["seed"].get(key)
        return escape(f" [{fmt.format(v)}]") if v is not None else ""

    lines = [
        ("estimated rows", lambda r: f"{r['estimated_rows']:,.1f}" + seed(r, "estimated_rows", "{:,.1f}")),
        ("actual rows", lambda r: f"{r['actual_rows']:,}" + seed(r, "actual_rows", "{:,}")),
        (
            "estimate off by",
            lambda r: f"{100 * r['estimate_error']:.2f}%" + seed(r, "estimate_error", "{:.2%}"),
        ),
        ("decision", lambda r: r["decision"] + seed(r, "decision", "{}")),
        ("offload (ms)", lambda r: f"{1e3 * r['measured_s']['offload']:.1f}"),
        ("pushback (ms)", lambda r: f"{1e3 * r['measured_s']['pushback']:.1f}"),
        (
            "offload faster by",
            lambda r: f"{100 * r['offload_faster_by']:.1f}%" + seed(r, "offload_faster_by", "{:.1%}"),
        ),
        ("decision right", lambda r: "yes" if r["decision_right"] else "no"),
        ("offload MiB", lambda r: f"{r['transfer_mib']['offload']:.2f}"),
        ("pushback MiB", lambda r: f"{r['transfer_mib']['pushback']:.1f}"),
    ]
    for label, f in lines:
        t.add_row(label, *(f(r) for r in results))
    console.print(t)
    for r in results:
        console.print(f"Case {r['case']}: {r['why']}")
