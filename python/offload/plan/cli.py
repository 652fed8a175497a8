"""`offload plan ...`: the planner's commands."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offload.clitools import JsonOpt, console, err, failing
from offload.clitools import fail as _fail
from offload.clitools import ints as _ints
from offload.files import write_text

app = typer.Typer(
    help="Plan a deployment: what it costs (cost, arithmetic shown), how a pipeline configuration "
    "performs (simulate, calibrate against measured runs), which one to pick (recommend), and what a "
    "fleet of them costs (fleet). See docs/plan.md.",
    no_args_is_help=True,
)
if not console.is_terminal:  # a pipe or a log: wide enough for the plan tables, not 80 columns
    console = Console(width=150)

# -p/--processes as in `offload serve inject`; the old spelling stays, hidden, for one release.
OLD_P = "The old spelling of -p/--processes (hidden; kept for one release)."


@contextmanager
def _progress(first: str) -> Iterator[Callable[[str], None]]:
    """Progress on stderr while something takes more than a moment: on a terminal a spinner with
    the elapsed time; in a pipe or a log, after 2 s (OFFLOAD_PROGRESS_AFTER_S), a line when the
    message changes (looked at every 0.5 s) or every 10 s."""
    if err.is_terminal:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task(escape(first), total=None)
            yield lambda message: bar.update(task, description=escape(message))
        return
    import os
    import threading

    current, stop, start = [first], threading.Event(), time.monotonic()
    try:
        quiet = float(os.environ.get("OFFLOAD_PROGRESS_AFTER_S", "2"))
    except ValueError:
        quiet = 2.0

    def log() -> None:  # quiet at first; then what it is doing, when that changes or every 10 s
        shown, at = "", 0.0
        while not stop.wait(0.1 if quiet <= 0 else 0.5):
            now = time.monotonic()
            if now - start >= quiet and (current[0] != shown or now - at >= 10.0):
                shown, at = current[0], now
                err.print(f"{shown} ({now - start:.0f} s)", markup=False, highlight=False, soft_wrap=True)

    thread = threading.Thread(target=log, daemon=True)
    thread.start()
    try:
        yield lambda message: current.__setitem__(0, message)
    finally:
        stop.set()
        thread.join()


def _json_out(result: object) -> None:
    """The machine-readable result on stdout (--json)."""
    print(json.dumps(result, indent=2))


@app.command()
def cost(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario TOML: workload, accelerator, deployments (see docs/plan.md).")
    ],
    catalog: Annotated[
        Path | None,
        typer.Option(help="Price catalog TOML. \\[default: the scenario's, else the bundled one]"),
    ] = None,
    offload_share: Annotated[
        float | None,
        typer.Option(
            help="Override the share of CPU time the accelerator takes over (0-1). "
            "\\[default: the scenario's]"
        ),
    ] = None,
    cpu_servers: Annotated[
        float | None,
        typer.Option(help="Override the CPU-only servers that carry the load. \\[default: the scenario's]"),
    ] = None,
    rounding: Annotated[
        str | None, typer.Option(help="Override unit rounding: up or nearest. \\[default: the scenario's]")
    ] = None,
    as_json: JsonOpt = False,
    out: Annotated[
        Path | None, typer.Option(help="Also write the JSON here (for `offload report`). \\[default: none]")
    ] = None,
    explain: Annotated[bool, typer.Option(help="Show each deployment's arithmetic under the table.")] = True,
) -> None:
    """Servers or instances each deployment needs and their cost, side by side.

    Example (the seed's Table 1, reproduced exactly):

        offload plan cost data/plans/seed-table1.toml
    """
    import dataclasses
    from fractions import Fraction

    from offload.plan import cost as c

    with failing(c.InputError):
        s = c.load_scenario(scenario, catalog)
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
        write_text(out, json.dumps(result, indent=2))
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


@app.command()
def simulate(
    costs: Annotated[
        Path | None,
        typer.Option(
            help="A [costs] table of stage costs, TOML (docs/plan.md). \\[default: none: give --calibration]"
        ),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option(
            help="Costs from `offload plan calibrate` (predictions quote its error). \\[default: none]"
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="What-if kernel: a bundled preset (erbium-fpga, gpu-estimate, cxl-like, network-attached) "
            "or a TOML file; replaces the kernel side of the costs. \\[default: none: the CPU kernel]"
        ),
    ] = None,
    processes: Annotated[int, typer.Option("--processes", "-p", help="Client processes (closed loop).")] = 1,
    p_old: Annotated[int | None, typer.Option("--p", hidden=True, help=OLD_P)] = None,
    w: Annotated[int, typer.Option("--w", help="Workers.")] = 1,
    k: Annotated[int, typer.Option("--k", help="Kernel executors.")] = 1,
    e: Annotated[int, typer.Option("--e", help="Engines per executor.")] = 1,
    batch: Annotated[int, typer.Option(help="Cross-request batch size in queries (0 = per request).")] = 0,
    timeout_us: Annotated[
        float, typer.Option(help="Batching timeout from the first request, µs (the daemon's default).")
    ] = 200.0,
    queue: Annotated[int, typer.Option(help="Request queue bound (beyond it: busy).")] = 64,
    cpus: Annotated[int, typer.Option(help="Host cores the stages share (0 = no contention).")] = 0,
    mode: Annotated[str, typer.Option(help="closed (p clients) or open (Poisson arrivals).")] = "closed",
    rate: Annotated[float, typer.Option(help="Open loop: requests/s.")] = 1000.0,
    sizes: Annotated[str, typer.Option(help="Queries per request to draw from, comma-separated.")] = "1",
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Draw request sizes from a trace directory's requests.csv instead. \\[default: none]"
        ),
    ] = None,
    duration: Annotated[float, typer.Option(help="Simulated seconds measured.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed (the result is deterministic per seed).")] = 1,
    max_requests: Annotated[
        int,
        typer.Option(
            help="Stop with an error after simulating this many requests (about 20-50 s of this "
            "machine's time at the default)."
        ),
    ] = 500_000,
    as_json: JsonOpt = False,
) -> None:
    """Simulate the serving pipeline (p/w/k/e, batching) with given or calibrated stage costs:
    throughput and latency percentiles.

    Examples:

        offload plan simulate --calibration calibration.json -p 8 --w 2 --k 2 --trace build/s100k

        offload plan simulate --costs costs.toml -p 4 --w 2 --k 1 --e 2 --cpus 2 --trace build/s100k
    """
    import csv

    from offload.plan import simulate as sim
    from offload.plan.tomlfile import InputError

    p = p_old if p_old is not None else processes
    validation = None
    if calibration is not None and costs is not None:
        raise _fail("give --costs or --calibration, not both")
    if calibration is None and costs is None and preset is None:
        raise _fail(
            "nothing to simulate: give the stage costs, measured (--calibration from `offload plan "
            "calibrate`), written (--costs costs.toml) or a what-if kernel (--preset, e.g. erbium-fpga)"
        )
    try:
        if calibration is not None:
            from offload.plan import calibrate as cal

            calib = cal.load(calibration)
            c = sim.Costs(**calib["costs"])
            validation = calib["median_abs_error"]
            cpus = cpus or calib["cpus"]
        else:
            c = sim.load_costs(str(costs)) if costs else sim.Costs()
        about: dict[str, str] = {}
        if preset is not None:
            about, kernel = sim.load_preset(preset)
            c = sim.with_preset(c, kernel)
    except InputError as ex:
        raise _fail(str(ex)) from None
    except (OSError, ValueError, TypeError) as ex:
        raise _fail(f"{calibration or preset}: {ex}") from None
    if trace is not None:
        try:
            with open(trace / "requests.csv", newline="") as f:
                qpr = tuple(int(r["N_QUERIES"]) for r in csv.DictReader(f))
        except (OSError, KeyError, ValueError) as ex:
            raise _fail(f"{trace / 'requests.csv'}: {ex}") from None
    else:
        try:
            qpr = tuple(_ints(sizes))
        except ValueError:
            raise _fail(f"--sizes: expected comma-separated integers, got {sizes!r}") from None
    pipe = sim.Pipeline(p, w, k, e, batch, timeout_us * 1e-6, queue, cpus or None)
    load = sim.Load(qpr, mode, rate, duration, min(0.1, duration / 10), seed, max_requests)
    try:
        with _progress(f"simulating {pipe.label()} for {duration:g} s") as _say:
            r = sim.simulate(pipe, c, load)
    except sim.SimulationLimit as ex:
        raise _fail(f"{ex}; shorten --duration or raise --max-requests") from None
    except ValueError as ex:
        raise _fail(str(ex)) from None
    j = r.to_json()
    j["validation_median_abs_error"] = validation
    j["preset"] = about or None
    if as_json:
        print(json.dumps(j, indent=2))
        return
    lat = j["latency_s"]

    def us(q: str) -> str:
        x = lat[q]
        return f"{q} n/a" if x is None else f"{q} {x * 1e6:,.{0 if x >= 1e-4 else 2}f} µs"

    console.print(
        f"[bold]{pipe.label()}[/] ({mode} loop): {r.throughput_qps:,.0f} queries/s, "
        f"{r.throughput_rps:,.0f} requests/s ({r.requests:,} answered); latency {us('p50')}, "
        f"{us('p99')}; busy {r.busy:,}"
    )
    for warning in j["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if r.utilisation:
        console.print("utilisation: " + ", ".join(f"{s} {u:.0%}" for s, u in r.utilisation.items()))
    if about:
        name, status = about.get("name", preset or ""), about.get("status", "?")
        console.print(f"kernel: {escape(name)} ({escape(status)})")
    if validation is None:
        console.print("[dim]uncalibrated: an estimate from the given costs, with no measured error[/]")
    else:
        console.print(
            f"validation error of this calibration (median over its validation runs): throughput "
            f"±{validation['queries_per_s']:.0%}, p50 ±{validation['p50']:.0%}, p99 ±{validation['p99']:.0%}"
            + (" (measured with this machine's kernel; the what-if kernel is not validated)" if about else "")
        )


@app.command()
def calibrate(
    sweep: Annotated[
        Path, typer.Option(help="`offload serve sweep` JSON with a 1p 1w 1k 1e per-request row.")
    ],
    trace: Annotated[Path, typer.Option(help="The trace directory the sweep replayed (requests.csv).")],
    out: Annotated[Path, typer.Option(help="Calibration JSON to write (with --json too).")] = Path(
        "calibration.json"
    ),
    cpus: Annotated[int, typer.Option(help="Cores of the measured machine (0: this machine's).")] = 0,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="`offload probe` profile: its ZeroMQ ipc round trip is time that only waits. "
            "\\[default: none]"
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit the simulator's stage costs to measured runs and report predicted vs measured
    throughput and p50/p99 for every configuration of the sweep, each predicted by a model
    fitted without it (leave-one-out).

        offload plan calibrate --sweep benches/results/sweep-calibration-100k.json --trace build/s100k
    """
    from offload.plan import calibrate as cal

    try:
        rows = json.loads(sweep.read_text())["rows"]
        sizes = cal.trace_sizes(trace)
        channel = cal.profile_channel(json.loads(profile.read_text())) if profile else None
    except (OSError, KeyError, ValueError) as ex:
        raise _fail(f"{ex}") from None
    with _progress("calibrating") as say:
        try:
            result = cal.calibrate(rows, sizes, cpus or None, say, channel)
        except ValueError as ex:
            raise _fail(str(ex)) from None
    result["sweep"] = str(sweep)
    result["profile"] = str(profile) if profile else None
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(result, indent=2))
    if as_json:
        return _json_out(result)
    t = Table(title=f"Predicted vs measured ({result['cpus']} cores; φ = {result['cpu_share_outside']:.1f})")
    cols = ["configuration", "role", "queries/s meas.", "held-out pred.", "err"]
    for col in [*cols, "p50 µs meas.", "pred.", "err", "p99 µs meas.", "pred.", "err"]:
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
        f"median absolute error, leave-one-out over {len(result['validation_configs'])} configurations: "
        f"throughput {mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}"
    )
    console.print(f"wrote {out}")


@app.command()
def preset(
    probe: Annotated[
        Path, typer.Option(help="`offload probe` JSON from the GPU machine (its GPU channels).")
    ],
    bench: Annotated[
        Path,
        typer.Option(help="`offload rules bench --matcher gpu` JSON from that machine (device profile)."),
    ],
    out: Annotated[
        Path, typer.Option(help="Preset TOML to write (with --json too; the JSON is {about, costs}).")
    ] = Path("gpu-measured.toml"),
    batch: Annotated[
        int,
        typer.Option(help="Queries per kernel batch where the kernel's floor is fitted (a typical request)."),
    ] = 256,
    as_json: JsonOpt = False,
) -> None:
    """Make a what-if kernel preset from a GPU machine's measurements: the launch and the pinned
    copies from the probe, the kernel's floor and rate from the bench's device profile.

        offload plan preset --probe probe.json --bench rules-gpu.json --out gpu-h200.toml
        offload plan simulate --calibration calibration.json --preset gpu-h200.toml --p 16 --w 4 --k 2
    """
    from offload.plan import measured

    try:
        about, costs = measured.gpu_preset(
            json.loads(probe.read_text()), json.loads(bench.read_text()), batch
        )
    except (OSError, KeyError, ValueError) as ex:
        raise _fail(f"{ex}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, measured.to_toml(about, costs))
    if as_json:
        return _json_out({"about": about, "costs": costs, "out": str(out)})
    t = Table(title=escape(about["name"]))
    t.add_column("cost")
    t.add_column("value", justify="right")
    for key, v in costs.items():
        t.add_row(key, f"{v:.4g}" if isinstance(v, float) else str(v))
    console.print(t)
    console.print(f"wrote {out}")


@app.command()
def check(
    sweep: Annotated[Path, typer.Option(help="`offload serve sweep` JSON of the runs to predict.")],
    calibration: Annotated[Path, typer.Option(help="Host-side costs from `offload plan calibrate`.")],
    trace: Annotated[Path, typer.Option(help="The trace directory the sweep replayed (requests.csv).")],
    preset: Annotated[
        str | None,
        typer.Option(help="What-if kernel (bundled name or TOML) the sweep ran with. \\[default: none]"),
    ] = None,
    out: Annotated[Path, typer.Option(help="Check JSON to write (with --json too).")] = Path("check.json"),
    cpus: Annotated[int, typer.Option(help="Cores of the measured machine (0: the calibration's).")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Predict every configuration of a measured sweep that the model was not fitted on, and
    say how far off each prediction is: a what-if (a --preset kernel) checked against the
    service actually running with that kernel.

        offload plan check --sweep sweep-gpu.json --calibration calibration.json --preset gpu-h200.toml \\
            --trace build/demo
    """
    from offload.plan import calibrate as cal
    from offload.plan import measured
    from offload.plan import simulate as sim
    from offload.plan.tomlfile import InputError

    try:
        rows = json.loads(sweep.read_text())["rows"]
        calib = cal.load(calibration)
        costs = sim.Costs(**calib["costs"])
        about = {}
        if preset is not None:
            about, kernel = sim.load_preset(preset)
            costs = sim.with_preset(costs, kernel)
        with _progress("predicting the sweep's rows") as say:
            result = measured.check(rows, costs, cal.trace_sizes(trace), cpus or calib["cpus"], say)
    except InputError as ex:
        raise _fail(str(ex)) from None
    except (OSError, KeyError, ValueError, TypeError) as ex:
        raise _fail(f"{ex}") from None
    result.update(sweep=str(sweep), calibration=str(calibration), preset=about or None)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(result, indent=2))
    if as_json:
        return _json_out(result)
    t = Table(title=f"Predicted vs measured ({result['cpus']} cores{'; ' + about['name'] if about else ''})")
    for col in ["configuration", "queries/s meas.", "pred.", "err", "p50 µs meas.", "pred.", "err"]:
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for row in result["table"]:
        m, pr, e = row["measured"], row["predicted"], row["error"]
        t.add_row(
            row["config"],
            f"{m['queries_per_s']:,.0f}", f"{pr['queries_per_s']:,.0f}", f"{e['queries_per_s']:+.0%}",
            f"{m['p50_us']:,.0f}", f"{pr['p50_us']:,.0f}", f"{e['p50_us']:+.0%}",
        )  # fmt: skip
    console.print(t)
    mae = result["median_abs_error"]
    console.print(
        f"median absolute error over {len(result['table'])} configurations: throughput "
        f"{mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}"
    )
    console.print(f"wrote {out}")


@app.command()
def recommend(
    sweep: Annotated[
        list[Path] | None,
        typer.Option(help="Measured `offload serve sweep` JSON (repeats). \\[default: none]"),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option(
            help="Also simulate a grid with these calibrated costs. \\[default: none: measured rows only]"
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="What-if kernel preset for the simulated grid. \\[default: the calibrated CPU kernel]"
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Trace directory (requests.csv) whose request sizes the grid replays. \\[default: none]"
        ),
    ] = None,
    processes: Annotated[
        str, typer.Option("--processes", "-p", help="Simulated grid: client processes.")
    ] = "1,2,4,8",
    p_old: Annotated[str | None, typer.Option("--p", hidden=True, help=OLD_P)] = None,
    w: Annotated[str, typer.Option("--w", help="Simulated grid: workers.")] = "1,2,4",
    k: Annotated[str, typer.Option("--k", help="Simulated grid: kernel executors.")] = "1,2",
    e: Annotated[str, typer.Option("--e", help="Simulated grid: engines per executor.")] = "1",
    batch: Annotated[str, typer.Option(help="Simulated grid: batch sizes (0 = per request).")] = "0",
    cpus: Annotated[int, typer.Option(help="Simulated host cores (0: the calibration's).")] = 0,
    p99_us: Annotated[
        float | None, typer.Option(help="Q1: most throughput with p99 under (µs). \\[default: not asked]")
    ] = None,
    target_qps: Annotated[
        float | None, typer.Option(help="Q2: lowest p99 with at least this (q/s). \\[default: not asked]")
    ] = None,
    out: Annotated[
        Path, typer.Option(help="JSON to write, with --json too (the Pareto plot goes next to it, .png).")
    ] = Path("recommend.json"),
    as_json: JsonOpt = False,
) -> None:
    """Recommend a configuration: the most throughput under a p99 SLA, and/or the lowest p99
    for a throughput target, from measured sweeps and/or a simulated grid; a Pareto plot marks it.

        offload plan recommend --sweep sweep.json --p99-us 5000 --target-qps 1e6

        offload plan recommend --calibration calibration.json --preset erbium-fpga --trace build/s100k \\
            -p 1,2,4,8,16 --w 1,2,4 --k 1 --e 4 --cpus 16 --p99-us 2000
    """
    from offload.plan import calibrate as cal
    from offload.plan import recommend as rec
    from offload.plan import simulate as sim

    if p99_us is None and target_qps is None:
        raise _fail("give --p99-us and/or --target-qps")
    if not sweep and calibration is None:
        raise _fail("give measured rows (--sweep) and/or a calibration to simulate (--calibration)")
    p = p_old if p_old is not None else processes
    rows: list[dict] = []
    for path in sweep or []:
        try:
            rows += rec.tag(json.loads(path.read_text())["rows"], "measured")
        except (OSError, KeyError, ValueError) as ex:
            raise _fail(f"{path}: {ex}") from None
    about: dict[str, str] = {}
    error = None
    if calibration is not None:
        if trace is None:
            raise _fail("simulating needs --trace (the request sizes to replay)")
        try:
            calib = cal.load(calibration)
            costs = sim.Costs(**calib["costs"])
            error = calib["median_abs_error"]
            if preset is not None:
                about, kernel = sim.load_preset(preset)
                costs = sim.with_preset(costs, kernel)
            sizes = cal.trace_sizes(trace)
            grid = [_ints(x) for x in (p, w, k, e, batch)]
        except (OSError, KeyError, ValueError, TypeError) as ex:
            raise _fail(str(ex)) from None
        with _progress("simulating") as say:
            n_cpus = cpus or calib["cpus"]
            try:
                rows += rec.simulated_rows(costs, sizes, *grid, cpus=n_cpus, error=error, progress=say)
            except ValueError as ex:
                raise _fail(str(ex)) from None
    result = rec.recommend(rows, p99_us, target_qps)
    q1, q2 = result["best_under_p99"] or {}, result["lowest_latency_for"] or {}
    chosen = q1.get("config") or q2.get("config")
    title = "offload plan recommend" + (f" — kernel: {about.get('name', preset)}" if about else "")
    out.parent.mkdir(parents=True, exist_ok=True)
    with _progress("plotting"):
        png = rec.plot(rows, chosen, out.with_suffix(".png"), title[:110])
    result |= {"rows": rows, "preset": about or None, "plot": str(png)}
    write_text(out, json.dumps(result, indent=2))
    if as_json:
        return _json_out(result)

    t = Table(title="Pareto front (throughput vs p99)")
    for col in ("configuration", "source", "queries/s", "p50 µs", "p99 µs"):
        t.add_column(col, justify="left" if col in ("configuration", "source") else "right")
    for r in rec.on_front(rows, result["pareto"]):
        qps, p50, p99 = f"{r['queries_per_s']:,.0f}", f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}"
        t.add_row(r["label"], r["source"], qps, p50, p99)
    console.print(t)

    def show(question: str, answer: dict | None) -> None:
        if answer is None:
            return
        c = answer["config"]
        if c is None:
            console.print(f"{question}: [bold red]none qualifies[/]")
            return
        note = ""
        if c["source"] == "simulated" and c.get("validation_error"):
            v = c["validation_error"]
            note = f" (simulated; validation error ±{v['queries_per_s']:.0%} throughput, ±{v['p50']:.0%} p50)"
        console.print(
            f"{question}: [bold]{c['label']}[/] — {c['queries_per_s']:,.0f} queries/s, "
            f"p99 {c['p99_us']:,.0f} µs{note}"
        )

    if p99_us is not None:
        show(f"most throughput with p99 <= {p99_us:,.0f} µs", result["best_under_p99"])
    if target_qps is not None:
        show(f"lowest p99 with >= {target_qps:,.0f} queries/s", result["lowest_latency_for"])
    console.print(f"wrote {out} and {png}")


@app.command()
def fleet(
    calibration: Annotated[Path, typer.Option(help="Stage costs from `offload plan calibrate`.")],
    trace: Annotated[Path, typer.Option(help="Trace directory (requests.csv): the request sizes.")],
    requests_per_s: Annotated[float, typer.Option(help="The fleet's workload, user requests/s.")],
    item: Annotated[str, typer.Option(help="Catalog item one node is (e.g. aws-c5.12xlarge).")],
    processes: Annotated[int, typer.Option("--processes", "-p", help="Client processes per node.")] = 48,
    p_old: Annotated[int | None, typer.Option("--p", hidden=True, help=OLD_P)] = None,
    w: Annotated[int, typer.Option("--w", help="Workers per node.")] = 8,
    k: Annotated[int, typer.Option("--k", help="Kernel executors per node.")] = 4,
    e: Annotated[int, typer.Option("--e", help="Engines per executor.")] = 1,
    cpus: Annotated[int, typer.Option(help="Cores per node (0: the item's vCPUs).")] = 0,
    preset: Annotated[
        str | None,
        typer.Option(help="What-if kernel preset per node. \\[default: the calibrated CPU kernel]"),
    ] = None,
    catalog: Annotated[
        Path | None, typer.Option(help="Price catalog TOML. \\[default: the bundled one]")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate one node, then size and price the fleet that carries a workload — fleet scale
    fed into the cost model (e.g. the seed's 400 nodes × 48 processes).

        offload plan fleet --calibration calibration.json --trace build/s100k --item aws-c5.12xlarge \\
            --requests-per-s 2e6 -p 48 --w 8 --k 4
    """
    from offload.plan import calibrate as cal
    from offload.plan import cost as c
    from offload.plan import fleet as fl
    from offload.plan import simulate as sim

    p = p_old if p_old is not None else processes
    try:
        calib = cal.load(calibration)
        costs = sim.Costs(**calib["costs"])
        about: dict[str, str] = {}
        if preset is not None:
            about, kernel = sim.load_preset(preset)
            costs = sim.with_preset(costs, kernel)
        items = c.load_catalog(catalog or c.CATALOG)
        if item not in items:
            raise ValueError(f"no item {item!r} in the price catalog; known: {', '.join(items)}")
        node_item = items[item]
        pipe = sim.Pipeline(p, w, k, e, cpus=cpus or node_item.vcpus)
        sizes = cal.trace_sizes(trace)
        with _progress(f"simulating one node ({pipe.label()} on {pipe.cpus} cores)"):
            result = fl.size(pipe, costs, sizes, node_item, requests_per_s)
    except (OSError, KeyError, ValueError, TypeError, c.InputError) as ex:
        raise _fail(str(ex)) from None
    j = result.to_json() | {"preset": about or None, "validation_median_abs_error": calib["median_abs_error"]}
    if as_json:
        print(json.dumps(j, indent=2))
        return
    n = result.node
    console.print(
        f"one node ({pipe.label()} on {pipe.cpus} cores{', kernel: ' + about['name'] if about else ''}): "
        f"{n.throughput_rps:,.0f} requests/s, {n.throughput_qps:,.0f} queries/s, "
        f"p99 {n.percentile(99) * 1e6:,.0f} µs"
    )
    ln = result.line
    per = "/year" if ln.per_year else ""
    console.print(
        f"fleet for {requests_per_s:,.0f} requests/s: [bold]{ln.units:,} × {ln.item.name}[/], "
        f"{float(ln.total_usd):,.0f} USD{per}"
    )
    for step in ln.steps:
        console.print(f"  {escape(step)}", highlight=False)
    v = calib["median_abs_error"]
    console.print(
        f"[dim]node capacity from the calibrated model (validation error ±{v['queries_per_s']:.0%} "
        f"throughput on {calib['cpus']} measured cores; extrapolated to {pipe.cpus} cores)[/]"
    )


def _moved_flows() -> None:
    """`offload plan flows` kept, hidden, for one release after it became `offload flows model`
    (the pipeline model lives with the flows it models)."""
    import functools
    from typing import Any

    from offload.flows.cli import model

    @functools.wraps(model)
    def alias(*args: Any, **kwargs: Any) -> None:
        err.print("offload plan flows is now offload flows model (the old name goes in the next release)",
                  highlight=False, soft_wrap=True)  # fmt: skip
        model(*args, **kwargs)

    app.command("flows", hidden=True)(alias)


_moved_flows()
