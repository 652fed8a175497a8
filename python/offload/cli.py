"""The `offload` command."""

from __future__ import annotations

from typing import Annotated

import typer

from offload import __version__
from offload.clitools import fail
from offload.clitools import floats as _floats
from offload.clitools import ints as _ints
from offload.dataservices.cli import app as node_app
from offload.dataservices.flows_cli import app as flows_app
from offload.metrics.cli import app as metrics_app
from offload.plan.cli import app as plan_app
from offload.probe.cli import app as probe_app
from offload.recsys.cli import app as recsys_app
from offload.rules.cli import app as rules_app
from offload.serve.cli import ClientKeyOpt, ServerKeyOpt, curve_keys
from offload.serve.cli import app as serve_app

app = typer.Typer(
    help="offload: run data services on accelerators and near-data devices, and know when that pays.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(rules_app, name="rules")
app.add_typer(serve_app, name="serve")
app.add_typer(probe_app, name="probe")
app.add_typer(plan_app, name="plan")
app.add_typer(recsys_app, name="recsys")
app.add_typer(node_app, name="node")
app.add_typer(flows_app, name="flows")
app.add_typer(metrics_app, name="metrics")


def _version(value: bool) -> None:
    if value:
        print(f"offload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """offload: run data services on accelerators and near-data devices, and know when that pays."""


@app.command()
def demo(
    out: Annotated[
        str, typer.Option(help="Working directory for generated data and results.")
    ] = "build/demo",
    rules: Annotated[int, typer.Option(help="Rules to synthesise.")] = 100_000,
    requests: Annotated[int, typer.Option(help="User requests in the trace.")] = 2_000,
) -> None:
    """The main job: synthesise an MCT rule set and trace, compile, match with every matcher,
    print a summary with explained answers."""
    from offload.demo import run

    run(out, rules, requests)


@app.command()
def report(
    out: Annotated[str, typer.Option(help="HTML file to write (plots embedded).")] = "report.html",
    bench: Annotated[
        str | None,
        typer.Option(help="`offload rules bench` JSON. \\[default: none: the section says how to make it]"),
    ] = None,
    probe: Annotated[
        str | None, typer.Option(help="`offload probe` profile JSON (plots beside). \\[default: none]")
    ] = None,
    sweep: Annotated[
        str | None, typer.Option(help="`offload sweep` JSON (its .png next to it). \\[default: none]")
    ] = None,
    calibration: Annotated[
        str | None, typer.Option(help="`offload plan calibrate` JSON. \\[default: none]")
    ] = None,
    recommend: Annotated[
        str | None, typer.Option(help="`offload plan recommend` JSON. \\[default: none]")
    ] = None,
    cost: Annotated[
        str | None, typer.Option(help="`offload plan cost --out` JSON. \\[default: none]")
    ] = None,
    recsys: Annotated[
        str | None,
        typer.Option(
            help="`offload recsys bench --out` JSON (its --plots in the same directory). \\[default: none]"
        ),
    ] = None,
    dataservices: Annotated[
        str | None, typer.Option(help="`offload node case-study --out` JSON. \\[default: none]")
    ] = None,
    flows: Annotated[
        str | None, typer.Option(help="`offload flows partition --json` output. \\[default: none]")
    ] = None,
    rpwu: Annotated[
        str | None,
        typer.Option(help="`offload metrics rpwu --json` output (its .png beside). \\[default: none]"),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            help="`offload flows run --json` or the flows bench's nodes.json (.png beside). \\[default: none]"
        ),
    ] = None,
    mbwu: Annotated[
        str | None, typer.Option(help="`offload metrics mbwu --json` output (.png beside). \\[default: none]")
    ] = None,
    headroom: Annotated[
        str | None,
        typer.Option(help="`offload metrics headroom --json` output (.png beside). \\[default: none]"),
    ] = None,
    availability: Annotated[
        str | None,
        typer.Option(help="`offload metrics availability --json` output (.png beside). \\[default: none]"),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="`rules bench --matcher gpu,...` JSON (benches/gpu/run.sh). \\[default: none]"),
    ] = None,
    gpu_check: Annotated[
        str | None,
        typer.Option(
            help="`offload plan check` JSON: the planner's GPU what-if against the service on the GPU. "
            "\\[default: none]"
        ),
    ] = None,
) -> None:
    """One static HTML report of the benchmark, probe, sweep, calibration, recommendation, cost,
    RM-SSD, near-data, particle-flow and metrics results, with plots; opens from disk.
    Sections not given say how to produce them."""
    from pathlib import Path

    from offload import report as rep

    def path(x: str | None) -> Path | None:
        if x is not None and not Path(x).exists():
            raise typer.BadParameter(f"{x}: no such file")
        return Path(x) if x else None

    given = (bench, probe, sweep, calibration, recommend, cost, recsys, dataservices, flows, rpwu, nodes,
             mbwu, headroom, availability, gpu, gpu_check)  # fmt: skip
    inputs = [path(x) for x in given]
    try:
        written = rep.build(Path(out), *inputs)
    except rep.ReportInputError as e:  # names the option and the file
        from offload.clitools import fail

        raise fail(str(e)) from None
    print(f"wrote {written}")


@app.command()
def inject(
    endpoint: Annotated[str, typer.Option("--endpoint", "-e", help="The daemon's endpoint.")],
    ruletype: Annotated[str, typer.Option("--ruletype", help="Rule type of the served set.")],
    rules: Annotated[str, typer.Option("--rules", help="Rules CSV of the served set.")],
    trace: Annotated[str, typer.Option(help="Directory with queries.csv + requests.csv.")],
    processes: Annotated[int, typer.Option("--processes", "-p", help="Client processes (p).")] = 2,
    mode: Annotated[str, typer.Option(help="closed or open (Poisson arrivals).")] = "closed",
    rate: Annotated[float, typer.Option(help="Open loop: requests/s over all processes.")] = 1000.0,
    duration: Annotated[float, typer.Option(help="Seconds to inject (bounded by the trace too).")] = 5.0,
    early_stop: Annotated[bool, typer.Option(help="Send each request's WANTED as stop_after.")] = False,
    encoded: Annotated[bool, typer.Option(help="Send queries pre-encoded instead of raw text.")] = False,
    request_size: Annotated[
        int, typer.Option(help="Cut the trace into requests of this many queries (0 = as traced).")
    ] = 0,
    connect_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds to wait for the daemon's first reply (nothing there: fail, exit 2), and later for "
            "any owed reply before the daemon counts as gone (the run then stops)."
        ),
    ] = 5.0,
    out: Annotated[str, typer.Option(help="JSON to write (a PNG breakdown goes beside it).")] = "inject.json",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON on stdout (--out is written too).")
    ] = False,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Replay a user-request trace against `offload serve` and report throughput, latency
    percentiles and the per-stage breakdown. With --server-key and --client-key the clients
    connect with CURVE (data endpoints started with --curve-data-client). Exits 1, with one line
    on stderr, when requests failed (BadRequest, Malformed, ShuttingDown, or unanswered); Busy
    and DeadlineExceeded are counted, not failures."""
    import json
    from pathlib import Path

    from rich.console import Console

    from offload import rules as rules_api
    from offload.clitools import fail
    from offload.serve import ServeError
    from offload.serve import inject as inj

    rs = rules_api.load(ruletype, rules)
    try:
        tr = inj.load_trace(Path(trace), rs.criterion_codes)
    except inj.TraceError as e:
        raise fail(str(e)) from None
    if request_size > 0:
        tr = tr.fixed_size(request_size)
    if encoded:
        tr = tr.encoded(rules_api.compile(rs, "fast").encode(tr.columns))
    curve = curve_keys(server_key, client_key)
    try:
        result = inj.run(endpoint, tr, processes, mode, rate, duration, early_stop, curve=curve,
                         connect_timeout_s=connect_timeout)  # fmt: skip
    except ServeError as e:
        raise fail(str(e)) from None
    js, png = inj.write(result, Path(out))
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        c = Console()
        lat = result["latency_us"]
        c.print(
            f"{result['requests']:,} requests answered in {result['elapsed_s']:.1f} s "
            f"({result['mode']} loop, {processes} process(es)), {result['unanswered']:,} unanswered: "
            f"{result['requests_per_s']:,.0f} req/s, {result['queries_per_s']:,.0f} queries/s; "
            f"latency p50 {lat['p50']:.0f} µs, p90 {lat['p90']:.0f}, p99 {lat['p99']:.0f}, "
            f"max {lat['max']:.0f}; "
            f"status {result['status']}"
        )
        c.print(f"stage medians (µs): {result['stage_median_us']}")
        c.print(f"wrote {js} and {png}")
    failed = inj.failures(result)
    if failed:
        raise fail(failed, 1)


@app.command()
def sweep(
    ruletype: Annotated[str, typer.Option("--ruletype", help="Rule type to serve.")],
    rules: Annotated[str, typer.Option("--rules", help="Rules CSV to serve.")],
    trace: Annotated[str, typer.Option(help="Directory with queries.csv + requests.csv.")],
    processes: Annotated[
        str, typer.Option("--processes", "-p", help="Client processes (p), comma-separated.")
    ] = "1,2",
    p_old: Annotated[
        str | None, typer.Option("--p", hidden=True, help="Old spelling of --processes.")
    ] = None,
    w: Annotated[str, typer.Option("--w", help="Workers, comma-separated.")] = "1,2",
    k: Annotated[str, typer.Option("--k", help="Kernel executors, comma-separated.")] = "1",
    e: Annotated[str, typer.Option("--e", help="Engine threads per executor, comma-separated.")] = "1",
    rates: Annotated[
        str,
        typer.Option(
            help="Load: 0 = closed loop (each process waits for its reply); else open-loop Poisson "
            "arrival rates in requests/s, comma-separated."
        ),
    ] = "0",
    batch: Annotated[str, typer.Option(help="Batch sizes (0 = per request).")] = "0,4096",
    batch_timeout_us: Annotated[
        int, typer.Option(help="Cross-request batching wait (µs), from the first request's arrival.")
    ] = 200,
    request_size: Annotated[int, typer.Option(help="Requests of N queries (0 = as traced).")] = 0,
    duration: Annotated[float, typer.Option(help="Seconds per configuration.")] = 3.0,
    matcher: Annotated[
        str, typer.Option(help="The daemon's matcher (gpu: the kernel executors run on the CUDA device).")
    ] = "fast",
    p99_us: Annotated[float, typer.Option(help="Q1: best throughput with p99 under (µs).")] = 5000.0,
    target_qps: Annotated[float, typer.Option(help="Q2: lowest p99 with at least q/s.")] = 1e6,
    out: Annotated[str, typer.Option(help="JSON to write (+ .csv, .png).")] = "sweep.json",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout (--out is written too).")
    ] = False,
) -> None:
    """Measure a grid of service configurations (p, w, k, e, batching, load) and draw the Pareto front."""
    import json
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from offload import rules as rules_api
    from offload.serve import inject as inj
    from offload.serve import sweep as sw

    if matcher in rules_api.DEVICE_MATCHERS:
        try:
            rules_api.gpu_device()
        except RuntimeError as e:  # say why before starting daemons that cannot start
            Console(stderr=True).print(f"error: {e}", highlight=False)
            raise typer.Exit(2) from None
    rs = rules_api.load(ruletype, rules)
    try:
        tr = inj.load_trace(Path(trace), rs.criterion_codes)
    except inj.TraceError as e:
        raise fail(str(e)) from None
    if request_size > 0:
        tr = tr.fixed_size(request_size)
    p = p_old if p_old is not None else processes
    configs = sw.grid(_ints(p), _ints(w), _ints(k), _ints(e), _ints(batch), batch_timeout_us, _floats(rates))
    c = Console(stderr=as_json)  # with --json, stdout holds only the JSON
    rows = sw.sweep(
        ruletype, rules, tr, configs, duration, matcher, progress=lambda m: c.print(m, style="dim")
    )
    summary = sw.write(rows, Path(out), p99_us, target_qps)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    t = Table("configuration", "queries/s", "p50 µs", "p99 µs", "Pareto")
    front = set(summary["pareto"])
    for r in sorted(rows, key=lambda r: -r["queries_per_s"]):
        t.add_row(r["label"], f"{r['queries_per_s']:,.0f}", f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}",
                  "yes" if r["label"] in front else "")  # fmt: skip
    c.print(t)
    b1, b2 = summary["best_under_p99"]["config"], summary["lowest_latency_for"]["config"]
    c.print(f"most throughput with p99 <= {p99_us:,.0f} µs: {b1['label'] if b1 else 'none'}")
    c.print(f"lowest p99 with >= {target_qps:,.0f} queries/s: {b2['label'] if b2 else 'none'}")
    c.print(f"wrote {out} (+ .csv, .png)")


def main() -> None:
    """Runs the command; a failure nobody caught becomes one line on stderr, never a traceback
    (OFFLOAD_TRACEBACK=1 shows it): a file that could not be written or read and a bad value
    exit 2, anything else (a bug: please report it) exits 1."""
    import os
    import sys

    from offload.clitools import err
    from offload.files import WriteError

    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except Exception as e:
        if os.environ.get("OFFLOAD_TRACEBACK"):
            raise
        known = isinstance(e, (WriteError, OSError, ValueError))
        what = str(e) if isinstance(e, WriteError) else f"{type(e).__name__}: {e}"
        if not known:
            what = f"internal error, please report it ({what}); OFFLOAD_TRACEBACK=1 shows where"
        from rich.markup import escape

        err.print(f"[bold red]error:[/] {escape(what)}", highlight=False, soft_wrap=True)
        sys.exit(2 if known else 1)


if __name__ == "__main__":
    main()
