"""`offload metrics`: metrics that compare offloaded and not-offloaded systems (seed 003)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from offload.clitools import JsonOpt, OutOpt, choices, console, emit, fail, failing, oneline, progress
from offload.metrics import tables

app = typer.Typer(
    help="Offload metrics (seed 003): mbwu (work units of a disk, $/kWh/m³ per unit), headroom (CPU left at "
    "line rate), availability (embedded storage vs servers), rpwu (node budgets by stress-ng). See "
    "docs/metrics.md.",
    no_args_is_help=True,
)


def _show(renderables: list[Any]) -> None:
    """A command's text result on stdout, each table and note on its own lines."""
    for x in renderables:
        console.print(x)


@app.command()
def rpwu(
    profiles: Annotated[str, typer.Option(help="Node budgets to profile, comma-separated.")] = (
        "bluefield2,host"
    ),
    reference: Annotated[
        str, typer.Option(help="The budget every ratio is to (the seed: a Raspberry Pi 4B).")
    ] = "core",
    stressors: Annotated[
        str | None, typer.Option(help="stress-ng stressors, comma-separated. \\[default: all 15]")
    ] = None,
    seconds: Annotated[int, typer.Option(help="Whole seconds each stressor runs.", min=1, max=3600)] = 2,
    plot: Annotated[
        Path | None, typer.Option(help="Write a bar chart of the ratios here (.png, .svg). \\[default: none]")
    ] = None,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Relative performance of node budgets, stressor by stressor: each stress-ng stressor runs
    with one instance in a process held to each budget, and its bogo-ops per second are divided
    by the reference's. Classes and the whole are geometric means (the seed's RPWU)."""
    from offload.host import budgets as B
    from offload.metrics import rpwu as R

    profs = choices(profiles, tuple(B.PROFILES), "profile")
    choices(reference, tuple(B.PROFILES), "reference profile")
    names = choices(stressors, tuple(R.STRESSORS), "stressor") if stressors else None
    if seconds < 1:
        raise fail(f"stress-ng runs whole seconds (>= 1), got {seconds}")
    why = R.unavailable_reason()
    if why:
        raise fail(why)
    with progress("stress-ng") as say:  # progress on stderr: stdout holds only the result
        with failing(RuntimeError, ValueError):
            r = R.profile(profs, names, seconds, reference, lambda what: say(f"stress-ng: {what}"))
    if plot is not None:
        with failing(OSError):
            R.plot(r, plot)
    if emit(r, json_out, out):
        return
    _show(tables.rpwu(r))


@app.command()
def headroom(
    profiles: Annotated[str, typer.Option(help="Node budgets the senders are held to, comma-separated.")] = (
        "bluefield2,host"
    ),
    link: Annotated[
        str,
        typer.Option(
            help="The shaped link's RATE (htb, loopback), as every command spells it: 200mbit, 1gbit."
        ),
    ] = "200mbit",
    rate_mbit: Annotated[
        float | None, typer.Option(hidden=True, help="Old spelling of --link, Mbit/s.")
    ] = None,
    packet_bytes: Annotated[
        int, typer.Option(help="UDP payload per packet (seed's top: 10 KiB).", min=64, max=65000)
    ] = 8192,
    burst: Annotated[int, typer.Option(help="Packets per burst.", min=1, max=100_000)] = 32,
    max_threads: Annotated[
        int, typer.Option(help="Most sender threads (processes) tried in step 1.", min=1, max=256)
    ] = 4,
    tolerance: Annotated[
        float, typer.Option(help="Kept: within this share (< 0.5) of saturation.", min=0, max=0.5)
    ] = 0.05,
    iterations: Annotated[int, typer.Option(help="Bisection steps for the delay.", min=1, max=64)] = 8,
    repeats: Annotated[int, typer.Option(help="Trials per point; the median is taken.", min=1, max=1000)] = 5,
    seconds: Annotated[
        float, typer.Option(help="Measured seconds per trial (after 0.15 s warm-up).", min=0.01, max=3600)
    ] = 0.4,
    port: Annotated[
        int, typer.Option(help="The receiver's UDP port (its traffic is shaped).", min=1024, max=65535)
    ] = 5201,
    netns: Annotated[
        str, typer.Option(help="Private network namespace to run in (`offload-` prefixed; removed if made).")
    ] = "headroom",
    plot: Annotated[
        Path | None,
        typer.Option(help="Plot throughput vs inter-burst delay, headroom marked (.png). \\[default: none]"),
    ] = None,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Network processing headroom (seed 003): on a loopback link shaped in a private namespace,
    the fewest UDP sender threads that saturate it at a packet and burst size; then, with those,
    the largest CPU work between bursts (found by bisection) that keeps the throughput within the
    tolerance. The headroom is that work's share of the CPU a sender thread has in one burst period
    (the seed's BlueField-2: 78.5% with the kernel's IP stack, 87.5% with DPDK)."""
    from offload.host import budgets as B
    from offload.metrics import headroom as H

    profs = choices(profiles, tuple(B.PROFILES), "profile")
    with failing(ValueError):
        if rate_mbit is None:
            rate_mbit = B.Link.parse(link).rate_mbit
            if rate_mbit is None:
                raise ValueError(f"--link {link!r}: give a rate such as 200mbit or 1gbit")
        cfg = H.Config(rate_mbit, packet_bytes, burst, max_threads, tolerance, iterations, repeats, seconds,
                       port=port, netns=netns)  # fmt: skip
    why = H.unavailable_reason()
    if why:
        raise fail(why)
    with progress("headroom") as say:
        with failing(OSError, RuntimeError, ValueError):
            r = H.measure_profiles(profs, cfg, lambda what: say(f"headroom: {what}"))
    if plot is not None:
        with failing(OSError):
            H.plot(r, plot)
    if emit(r, json_out, out):
        return
    _show(tables.headroom(r))


@app.command()
def availability(
    servers: Annotated[
        int, typer.Option(help="Servers m in the server-based system (the seed: 10).", min=1, max=1_000_000)
    ] = 10,
    case: Annotated[
        list[str] | None,
        typer.Option(
            help="A configuration n,c,f: devices per server, embedded nodes per server, a device's failure "
            "rate over a compute unit's; repeatable. \\[default: none: the seed's three cases]"
        ),
    ] = None,
    exposure: Annotated[
        float | None,
        typer.Option(
            help="Expected failures of one compute unit in the exposure window T (λ·T); no source gives "
            "it. \\[default: none: the rare-failure limit, where it cancels]",
            min=0,
        ),
    ] = None,
    window: Annotated[
        float | None, typer.Option(hidden=True, help="Old spelling of --exposure.", min=0)
    ] = None,
    scatter_width: Annotated[
        int, typer.Option(help="Copyset scatter width w (the seed: 4).", min=1, max=1_000_000)
    ] = 4,
    replicas: Annotated[int, typer.Option(help="Replicas of each chunk (the seed: 3).", min=1, max=1000)] = 3,
    f_per: Annotated[
        str,
        typer.Option(
            help="What f is relative to: compute-unit (an embedded node's non-storage part) or server "
            "(a whole server's non-storage part)."
        ),
    ] = "compute-unit",
    plot: Annotated[
        Path | None,
        typer.Option(help="Write the benefit over n, c and f here (.png, .svg). \\[default: none]"),
    ] = None,
    models: Annotated[
        bool,
        typer.Option(
            "--models",
            help="Instead: every candidate model (copysets with Poisson failures, Cidon et al.'s copyset and "
            "random replication, a Markov chain with repair, servers whose devices fail alone) on the seed's "
            "three cases, in its limit and at the setting of its free parameter closest to all three.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Relative data availability of embedded storage nodes against servers (seed 003, HotEdge'20):
    P(data loss) of m servers over that of m·c embedded nodes, both 3-way replicated on copysets,
    failures Poisson. Above 1, embedded storage is the more available. With --models, which model
    could give the seed's three figures (docs/metrics.md)."""
    from offload.metrics import availability as A

    window = exposure if exposure is not None else window
    if models:
        if case or window is not None or plot is not None or f_per != "compute-unit":
            raise fail("--models takes the seed's cases, both readings of f and no window: drop "
                       "--case, --exposure, --f-per and --plot")  # fmt: skip
        if (scatter_width, replicas) != (A.SCATTER_WIDTH, A.REPLICAS):
            raise fail(f"--models compares at the seed's w = {A.SCATTER_WIDTH} and R = {A.REPLICAS}")
        with failing(ValueError):
            r = A.candidates(servers=servers)
        if emit(r, json_out, out):
            return
        _show(tables.availability_models(r))
        return
    pers = choices(f_per, A.F_PER, "--f-per value")
    if len(pers) != 1:
        raise fail(f"--f-per takes one of {', '.join(A.F_PER)}, got {f_per!r}")
    per: A.FPer = "server" if pers[0] == "server" else "compute-unit"
    with failing(OSError, ValueError):
        cases = [A.case_from_text(text, "--case") for text in case] if case else list(A.SEED_CASES)
        r = A.report(
            cases, servers=servers, window=window, scatter_width=scatter_width, replicas=replicas, f_per=per
        )
        if plot is not None:
            A.plot(
                plot,
                servers=servers,
                window=window,
                scatter_width=scatter_width,
                replicas=replicas,
                f_per=per,
            )
    if emit(r, json_out, out):
        return
    _show(tables.availability(r, servers, window))


# Over 80 lines: the declarations of its 21 options; the logic below them is 35 lines.
@app.command()
def mbwu(
    workloads: Annotated[str, typer.Option(help="Workloads: ycsb-a, ycsb-c, arrow-scan.")] = (
        "ycsb-a,ycsb-c,arrow-scan"
    ),
    work_dir: Annotated[
        Path, typer.Option("--dir", help="A directory on the disk under test (not tmpfs); emptied after.")
    ] = Path("/var/tmp/offload-mbwu"),
    keys: Annotated[
        int, typer.Option(help="Key-value records (1 KiB values) in the key space.", min=1, max=1_000_000_000)
    ] = 500_000,
    threads: Annotated[str, typer.Option(help="Worker counts to sweep, rising; stops at the plateau.")] = (
        "1,2,4,8"
    ),
    seconds: Annotated[
        float, typer.Option(help="Seconds each sweep step is measured.", min=0.01, max=86_400)
    ] = 4.0,
    warmup: Annotated[
        float, typer.Option(help="Seconds each key-value step runs uncounted first.", min=0, max=86_400)
    ] = 2.0,
    bucket: Annotated[
        float, typer.Option(help="Seconds per throughput sample (key-value).", min=0.01, max=3600)
    ] = 0.5,
    rate: Annotated[
        float | None,
        typer.Option(help="Open-loop target ops/s, all workers. \\[default: none: flat out]", min=0.001),
    ] = None,
    overwrite: Annotated[
        float, typer.Option(help="Precondition: overwrites, x the key count.", min=0, max=1000)
    ] = 0.5,
    precondition_rate: Annotated[
        float | None,
        typer.Option(help="Precondition overwrite rate, ops/s. \\[default: none: flat out]", min=0.001),
    ] = None,
    scan_rows: Annotated[
        int, typer.Option(help="Rows of the Arrow scan's Parquet data set.", min=1, max=1_000_000_000)
    ] = 4_000_000,
    threshold: Annotated[
        float, typer.Option(help="Plateau: a step gaining no more than this share.", min=0, max=1)
    ] = 0.05,
    bound: Annotated[
        float, typer.Option(help="Steady state: most (max - min) / median.", min=0, max=10)
    ] = 0.15,
    steady_samples: Annotated[
        int,
        typer.Option(
            help="Steady state: fewest throughput samples in the steady window.", min=1, max=1_000_000
        ),
    ] = 4,
    window: Annotated[int | None, typer.Option(hidden=True, help="Old spelling of --steady-samples.")] = None,
    embedded: Annotated[
        str | None,
        typer.Option(help="Also sweep held to this node budget (bluefield2, core). \\[default: none]"),
    ] = None,
    measure: Annotated[
        bool, typer.Option(help="Measure this disk; --no-measure prints only the seed's case study.")
    ] = True,
    catalog: Annotated[
        Path | None, typer.Option(help="Price catalog. \\[default: data/prices/catalog.toml]")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Plot throughput vs workers, plateau marked (.png). \\[default: none]"),
    ] = None,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Media-based work units (seed 003): the throughput one storage device gives a workload when
    only the device limits it. Preconditions the data, sweeps the worker count until throughput
    stops rising (the plateau), reads each step in its steady-state window. Then $/MBWU, kWh/MBWU
    and m³/MBWU of the seed's host and embedded systems, from the catalog, beside its reductions."""
    from offload.clitools import ints
    from offload.metrics import mbwu as M
    from offload.plan.cost import InputError

    names = tuple(choices(workloads, M.WORKLOADS, "workload"))
    window = steady_samples if window is None else window
    if embedded is not None:
        from offload.host import budgets as B

        choices(embedded, tuple(B.PROFILES), "profile")
    with failing(InputError, ValueError):
        ts = tuple(ints(threads, minimum=1))
        plan = M.Plan(names, work_dir, keys, ts, seconds, warmup, bucket, rate, overwrite, precondition_rate,
                      scan_rows, threshold, bound, window, embedded)  # fmt: skip
        if measure:
            plan.check()
        case = M.seed_case_study(catalog)
    result: dict = {"seed_case_study": case}
    if measure:
        with progress("mbwu", every_step=True) as say:  # each step a line in a log: they take minutes
            try:
                r = M.measure(plan, lambda what: say(f"mbwu: {what}"))
            except (OSError, RuntimeError, ValueError) as e:
                raise fail(oneline(e)) from None
        result = {**r, **result}
        if embedded:
            result["this_machine_costs"] = M.this_machine_costs(r, catalog)
        if plot is not None:
            with failing(OSError):
                M.plot(r, plot)
    elif plot is not None:
        raise fail("--plot draws the sweep: it needs --measure")
    if emit(result, json_out, out):
        return
    _show(tables.mbwu(result, embedded))
