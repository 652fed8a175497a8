"""`offload plan ...`: the planner's commands."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from offload.clitools import JsonOpt, OutOpt, console, emit, err, failing, progress
from offload.clitools import fail as _fail
from offload.clitools import ints as _ints
from offload.datafiles import named
from offload.files import write_text
from offload.plan import tables

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


def _show(renderables: list[Any]) -> None:
    """A command's text result on stdout, each table and line on its own."""
    for x in renderables:
        console.print(x)


@app.command()
def cost(
    scenario: Annotated[
        Path,
        typer.Argument(
            help="Scenario TOML: workload, accelerator, deployments (see docs/plan.md); a shipped one by "
            "its name too (seed-table1)."
        ),
    ],
    catalog: Annotated[
        Path | None,
        typer.Option(help="Price catalog TOML. \\[default: the scenario's, else the bundled one]"),
    ] = None,
    offload_share: Annotated[
        float | None,
        typer.Option(
            help="Override the share of CPU time the accelerator takes over (0-1). "
            "\\[default: the scenario's]",
            min=0,
            max=1,
        ),
    ] = None,
    cpu_servers: Annotated[
        float | None,
        typer.Option(
            help="Override the CPU-only servers that carry the load. \\[default: the scenario's]", min=0
        ),
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
    """Servers or instances each deployment needs and their cost, side by side; with the
    scenario's variants and published figures, each variant beside them with the differences.

    Example (the seed's Table 1 from its stated inputs, and the fitted variant beside it):

        offload plan cost data/plans/seed-table1.toml
    """
    import dataclasses

    from offload.plan import cost as c

    scenario = named(scenario, "plans")
    catalog = None if catalog is None else named(catalog, "prices")
    with failing(c.InputError, ValueError):
        s = c.load_scenario(scenario, catalog)
        given = {"--offload-share": offload_share, "--cpu-servers": cpu_servers, "--rounding": rounding}
        overridden = {k: v for k, v in given.items() if v is not None}
        if overridden:  # the variants are other figures for the scenario as written, not for these
            changed = ", ".join(f"{k} {v}" for k, v in overridden.items())
            s = dataclasses.replace(
                c.with_overrides(s, offload_share, cpu_servers, rounding), name=f"{s.name}, with {changed}",
                about=f"{s.about} (then {changed} from the command line)" if s.about else "", variants=(),
            )  # fmt: skip
    if emit(c.report_all(s), as_json, out):
        return
    _show(tables.cost(scenario, [(v, c.cost(v)) for v in c.every_variant(s)], explain))


# Over 80 lines: the declarations of its 24 options; the logic below them is 30 lines.
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
    processes: Annotated[
        int, typer.Option("--processes", "-p", help="Client processes (closed loop).", min=1, max=100_000)
    ] = 1,
    p_old: Annotated[int | None, typer.Option("--p", hidden=True, help=OLD_P, min=1, max=100_000)] = None,
    w: Annotated[int, typer.Option("--w", help="Workers.", min=1, max=4096)] = 1,
    k: Annotated[
        int,
        typer.Option(
            "--k",
            help="Kernel executors (0 = inline: the broker matches pre-encoded requests itself).",
            min=0,
            max=4096,
        ),
    ] = 1,
    e: Annotated[int, typer.Option("--e", help="Engines per executor.", min=1, max=1024)] = 1,
    batch: Annotated[
        int,
        typer.Option(
            help="Cross-request batch size in queries, taken by the executors (0 = per request).",
            min=0,
            max=1_048_576,
        ),
    ] = 0,
    timeout_us: Annotated[
        float,
        typer.Option(
            help="Batching timeout from the first request, µs (the daemon's default; 0 = self-filling: "
            "an executor takes what is queued, never waits).",
            min=0,
            max=1_000_000,
        ),
    ] = 200.0,
    queue: Annotated[
        int, typer.Option(help="Request and kernel queue bound (beyond it: busy).", min=1, max=65_536)
    ] = 64,
    cpus: Annotated[
        int, typer.Option(help="Host cores the stages share (0 = no contention).", min=0, max=4096)
    ] = 0,
    encoded: Annotated[
        bool,
        typer.Option(
            "--encoded/--raw",
            help="Requests come pre-encoded (the broker hands them to the executors, no worker).",
        ),
    ] = False,
    devices: Annotated[
        int,
        typer.Option(
            help="Devices the k executors share (a what-if kernel off the host; executor i uses i mod N).",
            min=1,
            max=1024,
        ),
    ] = 1,
    mode: Annotated[str, typer.Option(help="closed (p clients) or open (arrivals at --rate).")] = "closed",
    rate: Annotated[float, typer.Option(help="Open loop: requests/s.", min=0)] = 1000.0,
    arrivals: Annotated[
        str, typer.Option(help="Open loop: poisson, or fixed (evenly spaced, as `offload serve bench`).")
    ] = "poisson",
    sizes: Annotated[str, typer.Option(help="Queries per request to draw from, comma-separated.")] = "1",
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Draw request sizes from a trace directory's requests.csv instead. \\[default: none]"
        ),
    ] = None,
    duration: Annotated[float, typer.Option(help="Simulated seconds measured.", min=0, max=86_400)] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed (the result is deterministic per seed).", min=0)] = 1,
    max_requests: Annotated[
        int,
        typer.Option(
            help="Stop with an error after simulating this many requests (about 20-50 s of this "
            "machine's time at the default).",
            min=1,
            max=100_000_000,
        ),
    ] = 500_000,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Simulate the serving pipeline (p/w/k/e, batching) with given or calibrated stage costs:
    throughput and latency percentiles.

    Examples:

        offload plan simulate --calibration calibration.json -p 8 --w 2 --k 2 --trace build/s100k

        offload plan simulate --costs costs.toml -p 4 --w 2 --k 1 --e 2 --cpus 2 --trace build/s100k
    """
    from offload.plan import inputs
    from offload.plan import simulate as sim
    from offload.plan.tomlfile import InputError

    if calibration is not None and costs is not None:
        raise _fail("give --costs or --calibration, not both")
    if calibration is None and costs is None and preset is None:
        raise _fail(
            "nothing to simulate: give the stage costs, measured (--calibration from `offload plan "
            "calibrate`), written (--costs costs.toml) or a what-if kernel (--preset, e.g. erbium-fpga)"
        )
    try:
        sc = inputs.stage_costs(calibration, costs, preset)
    except InputError as ex:
        raise _fail(str(ex)) from None
    except (OSError, ValueError, TypeError) as ex:
        raise _fail(f"{calibration or preset}: {ex}") from None
    with failing(ValueError):
        qpr = inputs.request_sizes(trace, sizes)
    p = processes if p_old is None else p_old
    with failing(ValueError):  # a number out of its domain (the model's own check): one line
        pipe = sim.Pipeline(
            p, w, k, e, batch, timeout_us * 1e-6, queue, cpus or sc.cpus or None, encoded, devices
        )
        load = sim.Load(qpr, mode, rate, duration, min(0.1, duration / 10), seed, max_requests, arrivals)
    try:
        with progress(f"simulating {pipe.label()} for {duration:g} s"):
            r = sim.simulate(pipe, sc.costs, load)
    except sim.SimulationLimit as ex:
        raise _fail(f"{ex}; shorten --duration or raise --max-requests") from None
    except ValueError as ex:
        raise _fail(str(ex)) from None
    j = r.to_json() | {"validation_median_abs_error": sc.validation, "preset": sc.kernel or None}
    if emit(j, as_json, out):
        return
    _show(tables.simulation(r, j, pipe, mode, preset))


@app.command()
def calibrate(
    sweep: Annotated[
        Path, typer.Option(help="`offload serve sweep` JSON with a 1p 1w 1k 1e per-request row.")
    ],
    trace: Annotated[Path, typer.Option(help="The trace directory the sweep replayed (requests.csv).")],
    out: Annotated[Path, typer.Option(help="Calibration JSON to write (with --json too).")] = Path(
        "calibration.json"
    ),
    cpus: Annotated[
        int, typer.Option(help="Cores of the measured machine (0: this machine's).", min=0, max=4096)
    ] = 0,
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

    rows = _sweep_rows(sweep)
    try:
        sizes = cal.trace_sizes(trace)
    except (OSError, KeyError, ValueError) as ex:
        raise _fail(f"--trace {trace}: {ex}") from None
    try:
        channel = cal.profile_channel(json.loads(profile.read_text())) if profile else None
    except (OSError, KeyError, ValueError, TypeError, AttributeError) as ex:
        raise _fail(
            f"--profile {profile}: not an `offload probe` profile ({type(ex).__name__}: {ex})"
        ) from None
    with progress("calibrating") as say:
        try:
            if any(r.get("mode") == "knee" for r in rows):  # `serve sweep --knee`: per-role costs
                result = _knee_calibration(rows, sizes, cpus, channel, say)
            else:
                result = cal.calibrate(rows, sizes, cpus or None, say, channel)
        except ValueError as ex:
            raise _fail(str(ex)) from None
        except (KeyError, TypeError, AttributeError) as ex:
            raise _fail(f"--sweep {sweep}: a row is not a sweep's ({type(ex).__name__}: {ex})") from None
    result["sweep"] = str(sweep)
    result["profile"] = str(profile) if profile else None
    if emit(result, as_json, out):
        return
    _show(tables.knee_calibration(result, out) if "kinds" in result else tables.calibration(result, out))


def _knee_calibration(
    rows: list[dict[str, Any]], sizes: list[int], cpus: int, channel: Any, say: Any
) -> dict[str, Any]:
    """The calibration on knees (offload.plan.knees); the probe's channel, where given, is the
    client ↔ daemon hop of every point."""
    import os

    from offload.plan import knees
    from offload.plan.simulate import Costs

    base = Costs(channel_latency_s=channel[0], channel_bps=channel[1]) if channel else Costs()
    return knees.calibrate(rows, sizes, base, cpus or len(os.sched_getaffinity(0)), say)


def _sweep_rows(sweep: Path) -> list[dict[str, Any]]:
    """The rows of an `offload serve sweep` JSON; a one-line error naming the file otherwise."""
    try:
        rows = json.loads(sweep.read_text())["rows"]
    except OSError as ex:
        raise _fail(f"--sweep {sweep}: {ex.strerror or ex}") from None
    except (ValueError, KeyError, TypeError):
        raise _fail(f"--sweep {sweep}: not an `offload serve sweep` JSON (it has a list of rows)") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise _fail(f"--sweep {sweep}: its rows are not a list of measured configurations")
    return rows


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
        typer.Option(
            help="Queries per kernel batch where the kernel's floor is fitted (a typical request).",
            min=1,
            max=100_000_000,
        ),
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
    with failing(OSError):
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, measured.to_toml(about, costs))
    if emit({"about": about, "costs": costs, "out": str(out)}, as_json):
        return
    _show(tables.preset(about, costs, out))


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
    cpus: Annotated[
        int, typer.Option(help="Cores of the measured machine (0: the calibration's).", min=0, max=4096)
    ] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Predict every configuration of a measured sweep that the model was not fitted on, and
    say how far off each prediction is: a what-if (a --preset kernel) checked against the
    service actually running with that kernel.

        offload plan check --sweep sweep-gpu.json --calibration calibration.json --preset gpu-h200.toml \\
            --trace build/demo
    """
    from offload.plan import calibrate as cal
    from offload.plan import inputs, measured
    from offload.plan.tomlfile import InputError

    try:
        rows = json.loads(sweep.read_text())["rows"]
        sc = inputs.stage_costs(calibration, preset=preset)
        with progress("predicting the sweep's rows") as say:
            result = measured.check(rows, sc.costs, cal.trace_sizes(trace), cpus or sc.cpus, say)
    except InputError as ex:
        raise _fail(str(ex)) from None
    except (OSError, KeyError, ValueError, TypeError) as ex:
        raise _fail(f"{ex}") from None
    result.update(sweep=str(sweep), calibration=str(calibration), preset=sc.kernel or None)
    if emit(result, as_json, out):
        return
    _show(tables.check(result, out))


# Over 80 lines: the declarations of its 15 options; the logic below them is 35 lines.
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
            help="What-if kernel preset for the simulated grid (with a calibration on knees: a what-if "
            "device beside the kinds measured, shown but never the answer). "
            "\\[default: the calibrated CPU kernel]"
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
    k: Annotated[str, typer.Option("--k", help="Simulated grid: kernel executors (0 = inline).")] = "1,2",
    e: Annotated[str, typer.Option("--e", help="Simulated grid: engines per executor.")] = "1",
    batch: Annotated[
        str, typer.Option(help="Simulated grid: batch sizes (0 = per request), size-or-timeout of 200 µs.")
    ] = "0",
    policy: Annotated[
        str | None,
        typer.Option(
            help="Simulated grid: batching policies (per-req, fillN, bN/Tus, as `offload serve sweep`). "
            "\\[default: from --batch]"
        ),
    ] = None,
    encoding: Annotated[
        str, typer.Option(help="Simulated grid: raw, codes16 or codes32 (client-encoded requests).")
    ] = "raw",
    request_size: Annotated[
        str, typer.Option(help="Simulated grid: queries per request (0 = the trace's sizes).")
    ] = "0",
    cpus: Annotated[
        int, typer.Option(help="Simulated host cores (0: the calibration's).", min=0, max=4096)
    ] = 0,
    p99_us: Annotated[
        float | None,
        typer.Option(help="Q1: most throughput with p99 under (µs). \\[default: not asked]", min=0),
    ] = None,
    target_qps: Annotated[
        float | None,
        typer.Option(help="Q2: lowest p99 with at least this (q/s). \\[default: not asked]", min=0),
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
    from offload.plan import inputs
    from offload.plan import recommend as rec
    from offload.plan import simulate as sim

    if p99_us is None and target_qps is None:
        raise _fail("give --p99-us and/or --target-qps")
    if p99_us is not None and p99_us <= 0:
        raise _fail(f"--p99-us {p99_us:g}: no latency is under that; give a p99 bound above 0 µs")
    if not sweep and calibration is None:
        raise _fail("give measured rows (--sweep) and/or a calibration to simulate (--calibration)")
    if calibration is not None and trace is None:
        raise _fail("simulating needs --trace (the request sizes to replay)")
    sc = None
    calib: dict[str, Any] | None = None
    devices: dict[str, dict[str, Any]] = {}
    with failing(OSError, KeyError, ValueError, TypeError):
        rows = rec.measured_rows(sweep or [])
        if calibration is not None and trace is not None:
            calib = cal.load(calibration)
            if "kinds" not in calib:  # a calibration of stage costs (and a what-if kernel)
                sc = inputs.stage_costs(calibration, preset=preset)
            elif preset is not None:  # a what-if device beside the kinds measured
                devices = {Path(preset).stem: sim.load_preset(preset)[1]}
            sizes = cal.trace_sizes(trace)
            points = _simulated_grid(calib, preset, processes if p_old is None else p_old, w, k, e,
                                     batch, policy, encoding, request_size)  # fmt: skip
    if calib is not None and "kinds" in calib:
        with progress("simulating") as say, failing(ValueError):
            rows += rec.knee_rows(calib, sizes, points, cpus or None, progress=say, devices=devices)
    elif sc is not None:
        with progress("simulating") as say, failing(ValueError):
            rows += rec.simulated_rows(sc.costs, sizes, points, cpus=cpus or sc.cpus, error=sc.validation,
                                       progress=say)  # fmt: skip
    result = rec.recommend(rows, p99_us, target_qps)
    about = sc.kernel if sc else {}
    title = "offload plan recommend" + (f" — kernel: {about.get('name', preset)}" if about else "")
    with progress("plotting"), failing(OSError):
        out.parent.mkdir(parents=True, exist_ok=True)
        png = rec.plot(rows, rec.chosen(result), out.with_suffix(".png"), title[:110])
    result |= {"rows": rows, "preset": about or None, "plot": str(png)}
    if emit(result, as_json, out):
        return
    _show(tables.recommendation(result, rec.on_front(rows, result["pareto"]), out))


def _simulated_grid(
    calib: dict[str, Any], preset: str | None, p: str, w: str, k: str, e: str, batch: str, policy: str | None,
    encoding: str, request_size: str,
) -> list[Any]:  # fmt: skip
    """The points `recommend` simulates, on the one grid `offload serve sweep` measures. From a
    calibration of stage costs: the transport and matcher of its base row (its costs were
    measured there; a what-if preset's name as the matcher). From a calibration on knees: every
    kind it measured (matcher, transport, encoding, inline or executors) with the shapes given."""
    from offload.plan import knees
    from offload.serve import grid

    policies = grid.policies(policy, _ints(batch), grid.DAEMON_BATCH_TIMEOUT_US)
    shapes = list(itertools.product(_ints(w), _ints(k), _ints(e)))
    sizes = _ints(request_size)
    if "kinds" in calib:
        return knees.points(calib, _ints(p), shapes, policies, sizes, [Path(preset).stem] if preset else [])
    base = grid.Deployment.of_row(calib.get("base_deployment") or {})
    encodings = [x.strip() for x in encoding.split(",") if x.strip()]
    matcher = Path(preset).stem if preset else base.matcher
    return grid.product(_ints(p), shapes, policies, encodings, sizes, [base.transport], [matcher])


@app.command()
def fleet(
    calibration: Annotated[Path, typer.Option(help="Stage costs from `offload plan calibrate`.")],
    trace: Annotated[Path, typer.Option(help="Trace directory (requests.csv): the request sizes.")],
    requests_per_s: Annotated[float, typer.Option(help="The fleet's workload, user requests/s.", min=0)],
    item: Annotated[str, typer.Option(help="Catalog item one node is (e.g. aws-c5.12xlarge).")],
    processes: Annotated[
        int, typer.Option("--processes", "-p", help="Client processes per node.", min=1, max=100_000)
    ] = 48,
    p_old: Annotated[int | None, typer.Option("--p", hidden=True, help=OLD_P, min=1, max=100_000)] = None,
    w: Annotated[int, typer.Option("--w", help="Workers per node.", min=1, max=4096)] = 8,
    k: Annotated[int, typer.Option("--k", help="Kernel executors per node.", min=0, max=4096)] = 4,
    e: Annotated[int, typer.Option("--e", help="Engines per executor.", min=1, max=1024)] = 1,
    cpus: Annotated[int, typer.Option(help="Cores per node (0: the item's vCPUs).", min=0, max=4096)] = 0,
    preset: Annotated[
        str | None,
        typer.Option(help="What-if kernel preset per node. \\[default: the calibrated CPU kernel]"),
    ] = None,
    catalog: Annotated[
        Path | None, typer.Option(help="Price catalog TOML. \\[default: the bundled one]")
    ] = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Simulate one node, then size and price the fleet that carries a workload — fleet scale
    fed into the cost model (e.g. the seed's 400 nodes × 48 processes).

        offload plan fleet --calibration calibration.json --trace build/s100k --item aws-c5.12xlarge \\
            --requests-per-s 2e6 -p 48 --w 8 --k 4
    """
    from offload.plan import calibrate as cal
    from offload.plan import cost as c
    from offload.plan import fleet as fl
    from offload.plan import inputs
    from offload.plan import simulate as sim

    if requests_per_s <= 0:
        raise _fail(f"--requests-per-s {requests_per_s:g}: a fleet carries a workload above 0 requests/s")
    with failing(OSError, KeyError, ValueError, TypeError, c.InputError):
        sc = inputs.stage_costs(calibration, preset=preset)
        node_item = c.item_of(item, None if catalog is None else named(catalog, "prices"))
        pipe = sim.Pipeline(processes if p_old is None else p_old, w, k, e, cpus=cpus or node_item.vcpus)
        sizes = cal.trace_sizes(trace)
        with progress(f"simulating one node ({pipe.label()} on {pipe.cpus} cores)"):
            result = fl.size(pipe, sc.costs, sizes, node_item, requests_per_s)
    j = result.to_json() | {"preset": sc.kernel or None, "validation_median_abs_error": sc.validation}
    if emit(j, as_json, out):
        return
    _show(tables.fleet(result, pipe, sc))


def _moved_flows() -> None:
    """`offload plan flows` kept, hidden, for one release after it became `offload flows model`
    (the pipeline model lives with the flows it models)."""
    import functools

    from offload.flows.cli import model

    @functools.wraps(model)
    def alias(*args: Any, **kwargs: Any) -> None:
        err.print("offload plan flows is now offload flows model (the old name goes in the next release)",
                  highlight=False, soft_wrap=True)  # fmt: skip
        model(*args, **kwargs)

    app.command("flows", hidden=True)(alias)


_moved_flows()
