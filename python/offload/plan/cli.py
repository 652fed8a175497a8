"""`offload plan ...`: the planner's commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    help="Plan a deployment: what it costs (cost, arithmetic shown) and how a pipeline configuration "
    "performs (simulate, a discrete-event model).",
    no_args_is_help=True,
)
console = Console()
if not console.is_terminal:  # a pipe or a log: wide enough for the tables, not 80 columns
    console = Console(width=150)
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def cost(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario TOML: workload, accelerator, deployments (see docs/plan.md).")
    ],
    catalog: Annotated[
        Path | None, typer.Option(help="Price catalog TOML (default: the scenario's, else the bundled one).")
    ] = None,
    offload_share: Annotated[
        float | None, typer.Option(help="Override the share of CPU time the accelerator takes over (0-1).")
    ] = None,
    cpu_servers: Annotated[
        float | None, typer.Option(help="Override the CPU-only servers that carry the load.")
    ] = None,
    rounding: Annotated[str | None, typer.Option(help="Override unit rounding: up or nearest.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON here (for `offload report`).")] = None,
    explain: Annotated[bool, typer.Option(help="Show each deployment's arithmetic under the table.")] = True,
) -> None:
    """Servers or instances each deployment needs and their cost, side by side.

    Example (the seed's Table 1, reproduced exactly):

        offload plan cost data/plans/seed-table1.toml
    """
    import dataclasses
    from fractions import Fraction

    from offload.plan import cost as c

    try:
        s = c.load_scenario(scenario, catalog)
    except c.InputError as e:
        raise _fail(str(e)) from None
    w = s.workload
    if offload_share is not None:
        if not 0 <= offload_share < 1:
            raise _fail(f"--offload-share must be in [0, 1), not {offload_share}")
        w = dataclasses.replace(w, offload_share=c.exact(offload_share))
    if cpu_servers is not None:
        if cpu_servers <= 0:
            raise _fail(f"--cpu-servers must be positive, not {cpu_servers}")
        cs = c.exact(cpu_servers)
        w = dataclasses.replace(w, cpu_servers=cs, cpu_servers_text=f"{c.fmt(cs)} (--cpu-servers)")
    if rounding is not None:
        if rounding not in ("up", "nearest"):
            raise _fail(f"--rounding must be up or nearest, not {rounding!r}")
        w = dataclasses.replace(w, rounding=rounding)
    s = dataclasses.replace(s, workload=w)
    lines = c.cost(s)
    result = c.report(s, lines)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
    if as_json:
        print(json.dumps(result, indent=2))
        return

    t = Table(title=f"Deployment cost: {scenario}", title_justify="left")
    for col, just in (("deployment", "left"), ("element", "left"), ("units", "right"), ("unit cost", "right"),
                      ("total (USD)", "right"), ("million USD", "right"), ("× original", "right"),
                      ("queries/USD", "right")):  # fmt: skip
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    group = None
    for ln in lines:
        if ln.group != group and group is not None:
            t.add_section()
        group = ln.group
        units = f"{ln.units:,}" + (f" (+{ln.pool_units:,} pool)" if ln.pool_units else "")
        if ln.units != ln.units_exact:
            units += f"  [dim]({c.fmt(ln.units_exact, 2)})[/]"
        per = "/year" if ln.per_year else ""
        t.add_row(
            f"{ln.group}: {ln.name}" if ln.group else ln.name,
            ln.item.name,
            units,
            ln.item.price_text(),
            f"{float(ln.total_usd):,.0f}{per}",
            f"{float(ln.total_usd / Fraction(1_000_000)):.2f}{per}",
            "-" if ln.relative is None else f"{float(ln.relative):.2f}×",
            "-" if ln.queries_per_usd is None else f"{ln.queries_per_usd / 1e9:,.1f} billion",
        )
    console.print(t)
    prices = sorted({f"{ln.item.name}: {ln.item.region}, {ln.item.plan}, {ln.item.date}" for ln in lines})
    console.print(f"[dim]prices: {escape('; '.join(prices))}[/]")
    if explain:
        for ln in lines:
            console.print(f"[bold]{escape(ln.group + ': ' if ln.group else '')}{escape(ln.name)}[/]")
            for step in ln.steps:
                console.print(f"  {escape(step)}", highlight=False)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


@app.command()
def simulate(
    costs: Annotated[
        Path | None, typer.Option(help="TOML with a [costs] table of stage costs (see docs/plan.md).")
    ] = None,
    calibration: Annotated[
        Path | None, typer.Option(help="Costs from `offload plan calibrate` (predictions quote its error).")
    ] = None,
    p: Annotated[int, typer.Option("--p", help="Client processes (closed loop).")] = 1,
    w: Annotated[int, typer.Option("--w", help="Workers.")] = 1,
    k: Annotated[int, typer.Option("--k", help="Kernel executors.")] = 1,
    e: Annotated[int, typer.Option("--e", help="Engines per executor.")] = 1,
    batch: Annotated[int, typer.Option(help="Cross-request batch size in queries (0 = per request).")] = 0,
    timeout_us: Annotated[float, typer.Option(help="Batching timeout from the first request, µs.")] = 1000.0,
    queue: Annotated[int, typer.Option(help="Request queue bound (beyond it: busy).")] = 64,
    cpus: Annotated[int, typer.Option(help="Host cores the stages share (0 = no contention).")] = 0,
    mode: Annotated[str, typer.Option(help="closed (p clients) or open (Poisson arrivals).")] = "closed",
    rate: Annotated[float, typer.Option(help="Open loop: requests/s.")] = 1000.0,
    sizes: Annotated[str, typer.Option(help="Queries per request to draw from, comma-separated.")] = "1",
    trace: Annotated[
        Path | None, typer.Option(help="Draw request sizes from a trace directory's requests.csv instead.")
    ] = None,
    duration: Annotated[float, typer.Option(help="Simulated seconds measured.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed (the result is deterministic per seed).")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of the summary.")] = False,
) -> None:
    """Simulate the serving pipeline (p/w/k/e, batching) with given or calibrated stage costs:
    throughput and latency percentiles.

    Examples:

        offload plan simulate --calibration calibration.json --p 8 --w 2 --k 2 --trace build/s100k

        offload plan simulate --costs costs.toml --p 4 --w 2 --k 1 --e 2 --cpus 2 --trace build/s100k
    """
    import csv

    from offload.plan import simulate as sim
    from offload.plan.tomlfile import InputError

    validation = None
    if calibration is not None and costs is not None:
        raise _fail("give --costs or --calibration, not both")
    try:
        if calibration is not None:
            from offload.plan import calibrate as cal

            calib = cal.load(calibration)
            c = sim.Costs(**calib["costs"])
            validation = calib["median_abs_error"]
            cpus = cpus or calib["cpus"]
        else:
            c = sim.load_costs(str(costs)) if costs else sim.Costs()
    except InputError as ex:
        raise _fail(str(ex)) from None
    except (OSError, ValueError, TypeError) as ex:
        raise _fail(f"{calibration}: {ex}") from None
    if trace is not None:
        try:
            with open(trace / "requests.csv", newline="") as f:
                qpr = tuple(int(r["N_QUERIES"]) for r in csv.DictReader(f))
        except (OSError, KeyError, ValueError) as ex:
            raise _fail(f"{trace / 'requests.csv'}: {ex}") from None
    else:
        try:
            qpr = _ints(sizes)
        except ValueError:
            raise _fail(f"--sizes: expected comma-separated integers, got {sizes!r}") from None
    pipe = sim.Pipeline(p, w, k, e, batch, timeout_us * 1e-6, queue, cpus or None)
    try:
        r = sim.simulate(pipe, c, sim.Load(qpr, mode, rate, duration, min(0.1, duration / 10), seed))
    except ValueError as ex:
        raise _fail(str(ex)) from None
    j = r.to_json()
    j["validation_median_abs_error"] = validation
    if as_json:
        print(json.dumps(j, indent=2))
        return
    lat = j["latency_s"]
    console.print(
        f"[bold]{pipe.label()}[/] ({mode} loop): {r.throughput_qps:,.0f} queries/s, "
        f"{r.throughput_rps:,.0f} requests/s; latency p50 {lat['p50'] * 1e6:,.0f} µs, "
        f"p99 {lat['p99'] * 1e6:,.0f} µs; busy {r.busy:,}"
    )
    if r.utilisation:
        console.print("utilisation: " + ", ".join(f"{s} {u:.0%}" for s, u in r.utilisation.items()))
    if validation is None:
        console.print("[dim]uncalibrated: an estimate from the given costs, with no measured error[/]")
    else:
        console.print(
            f"validation error of this calibration (median over its validation runs): throughput "
            f"±{validation['queries_per_s']:.0%}, p50 ±{validation['p50']:.0%}, p99 ±{validation['p99']:.0%}"
        )


@app.command()
def calibrate(
    sweep: Annotated[Path, typer.Option(help="`offload sweep` JSON with a 1p 1w 1k 1e per-request row.")],
    trace: Annotated[Path, typer.Option(help="The trace directory the sweep replayed (requests.csv).")],
    out: Annotated[Path, typer.Option(help="Calibration JSON to write.")] = Path("calibration.json"),
    fit_on: Annotated[
        str | None,
        typer.Option(
            help="Labels of the rows to fit on, comma-separated (default: the base and every fourth row); "
            "the others validate."
        ),
    ] = None,
    cpus: Annotated[int, typer.Option(help="Cores of the measured machine (0: this machine's).")] = 0,
) -> None:
    """Fit the simulator's stage costs to measured runs and report predicted vs measured
    throughput and p50/p99 for every configuration of the sweep.

        offload plan calibrate --sweep benches/results/sweep-calibration-100k.json --trace build/s100k
    """
    from rich.progress import Progress

    from offload.plan import calibrate as cal

    try:
        rows = json.loads(sweep.read_text())["rows"]
        sizes = cal.trace_sizes(trace)
    except (OSError, KeyError, ValueError) as ex:
        raise _fail(f"{ex}") from None
    labels = [x.strip() for x in fit_on.split(",")] if fit_on else None
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("calibrating", total=None)

        def say(message: str) -> None:
            bar.update(task, description=message)

        try:
            result = cal.calibrate(rows, sizes, cpus or None, labels, say)
        except ValueError as ex:
            raise _fail(str(ex)) from None
    result["sweep"] = str(sweep)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    t = Table(title=f"Predicted vs measured ({result['cpus']} cores; φ = {result['cpu_share_outside']:.1f})")
    for col in ("configuration", "role", "queries/s meas.", "pred.", "err", "p50 µs meas.", "pred.", "err",
                "p99 µs meas.", "pred.", "err"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("configuration", "role") else "right")
    for row in result["table"]:
        m, pr, e = row["measured"], row["predicted"], row["error"]
        t.add_row(
            row["config"], row["role"],
            f"{m['queries_per_s']:,.0f}", f"{pr['queries_per_s']:,.0f}", f"{e['queries_per_s']:+.0%}",
            f"{m['p50_us']:,.0f}", f"{pr['p50_us']:,.0f}", f"{e['p50_us']:+.0%}",
            f"{m['p99_us']:,.0f}", f"{pr['p99_us']:,.0f}", f"{e['p99_us']:+.0%}",
        )  # fmt: skip
    console.print(t)
    mae = result["median_abs_error"]
    console.print(
        f"median absolute error over {len(result['validation_configs'])} validation configurations: "
        f"throughput {mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}"
    )
    console.print(f"wrote {out}")
