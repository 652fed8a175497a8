"""`offload metrics`: metrics that compare offloaded and not-offloaded systems (seed 003)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from offload.clitools import JsonOpt, choices, console, err, fail, failing
from offload.files import WriteError

app = typer.Typer(
    help="Offload metrics (seed 003): mbwu (work units of a disk, $/kWh/m³ per unit), headroom (CPU left at "
    "line rate), availability (embedded storage vs servers), rpwu (node budgets by stress-ng). See "
    "docs/metrics.md.",
    no_args_is_help=True,
)


def _table(title: str) -> Table:
    """A table that reads in 80 columns: a rule under the header, no frame, one space between
    columns, the title on one line; cells wrap rather than being cut short."""
    from rich import box

    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False,
                 min_width=min(80, len(title)))  # fmt: skip


def _progress(status: Any, line: str) -> None:
    """A step of a long measurement on stderr: the spinner's text on a terminal; elsewhere (a
    log, a pipe) a plain line, so a run is never silent for long and stdout stays JSON."""
    if err.is_terminal:
        status.update(line)
    else:
        err.print(line, highlight=False, soft_wrap=True)


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
    seconds: Annotated[int, typer.Option(help="Whole seconds each stressor runs.")] = 2,
    plot: Annotated[
        Path | None, typer.Option(help="Write a bar chart of the ratios here (.png, .svg). \\[default: none]")
    ] = None,
    json_out: JsonOpt = False,
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
    with err.status("stress-ng") as status:  # progress on stderr: stdout holds only the result
        with failing(RuntimeError, ValueError):
            r = R.profile(profs, names, seconds, reference, lambda what: status.update(f"stress-ng: {what}"))
    if plot is not None:
        _plot(r, plot)
    if json_out:
        print(json.dumps(r, indent=2))
        return
    t = _table(f"relative performance (bogo-ops/s over {reference}'s)")
    t.add_column("stressor")
    t.add_column("class")
    for p in r["relative"]:
        t.add_column(p, justify="right")
    for s, c in r["classes"].items():
        t.add_row(s, c, *(f"{r['relative'][p][s]:.2f}" for p in r["relative"]))
    for c in ["overall", *sorted(set(r["classes"].values()))]:
        t.add_row(f"[bold]{c}[/]", "geomean", *(f"{r['summary'][p][c]:.2f}" for p in r["relative"]))
    console.print(t)


def _plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(r["classes"])
    profs = [p for p in r["relative"] if p != r["reference"]]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(1, len(profs))
    for i, p in enumerate(profs):
        xs = [k + i * width for k in range(len(names))]
        ax.bar(xs, [r["relative"][p][s] for s in names], width, label=p)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([k + width * (len(profs) - 1) / 2 for k in range(len(names))])
    ax.set_xticklabels([f"{s}\n({r['classes'][s]})" for s in names], rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"bogo-ops/s ÷ {r['reference']}'s")
    ax.set_title("stress-ng relative performance per budget (seed 003's RPWU)")
    ax.legend()
    fig.tight_layout()
    from offload.files import save_figure

    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


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
    packet_bytes: Annotated[int, typer.Option(help="UDP payload per packet (seed's top: 10 KiB).")] = 8192,
    burst: Annotated[int, typer.Option(help="Packets per burst.")] = 32,
    max_threads: Annotated[int, typer.Option(help="Most sender threads (processes) tried in step 1.")] = 4,
    tolerance: Annotated[float, typer.Option(help="Kept: within this share (< 0.5) of saturation.")] = 0.05,
    iterations: Annotated[int, typer.Option(help="Bisection steps for the delay.")] = 8,
    repeats: Annotated[int, typer.Option(help="Trials per point; the median is taken.")] = 5,
    seconds: Annotated[float, typer.Option(help="Measured seconds per trial (after 0.15 s warm-up).")] = 0.4,
    port: Annotated[int, typer.Option(help="The receiver's UDP port (its traffic is shaped).")] = 5201,
    netns: Annotated[
        str, typer.Option(help="Private network namespace to run in (`offload-` prefixed; removed if made).")
    ] = "headroom",
    plot: Annotated[
        Path | None,
        typer.Option(help="Plot throughput vs inter-burst delay, headroom marked (.png). \\[default: none]"),
    ] = None,
    json_out: JsonOpt = False,
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
    with err.status("headroom") as status:
        with failing(OSError, RuntimeError, ValueError):
            r = H.measure_profiles(profs, cfg, lambda what: status.update(f"headroom: {what}"))
    if plot is not None:
        _plot_headroom(r, plot)
    if json_out:
        print(json.dumps(r, indent=2))
        return
    link = f"{rate_mbit:g} Mbit/s link, {packet_bytes} B x {burst}"
    t = _table(f"network processing headroom: {link} ({r['machine']})")
    cols = ("budget", "threads", "Mbit/s", "link used", "burst period", "max delay (CPU)", "headroom")
    for col in (*cols, "from CPU"):
        t.add_column(col, justify="left" if col == "budget" else "right")
    for name, p in r["profiles"].items():
        check = "-" if p["headroom_from_cpu"] is None else f"{p['headroom_from_cpu']:.1%}"
        t.add_row(name, str(p["min_threads"]), f"{p['saturated_mbit_s']:.1f}", f"{p['link_utilisation']:.0%}",
                  f"{p['burst_period_s'] * 1e3:.2f} ms", f"{p['max_delay_s'] * 1e3:.3f} ms",
                  f"{p['headroom']:.1%}" + (" (≥, capped)" if p["capped"] else ""), check)  # fmt: skip
    for name, v in r["seed"].items():
        t.add_row(f"[dim]seed: {name}[/]", "", "", "", "", "", f"[dim]{v:.1%}[/]", "")
    console.print(t)
    console.print("[dim]from CPU, a cross-check: 1 - a sender's CPU at saturation (no delay) / its share[/]")


def _plot_headroom(r: dict, path: Path) -> None:
    """Left: the search (throughput against the delay offered, as a share of the CPU a sender has
    in a saturated burst period); right: the headroom found beside the seed's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = r["config"]
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [2.2, 1]})
    for k, (name, p) in enumerate(r["profiles"].items()):
        color = f"C{k}"
        sat = p["by_threads"][p["min_threads"] - 1]
        cpu = p["cpu_share_per_thread"] * sat["period_s"]  # a sender's CPU in a saturated period
        pts = sorted((x["delay_s"] / cpu * 100, x["mbit_s"], x["keeps"]) for x in [sat, *p["by_delay"]])
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "-", color=color, lw=0.8, alpha=0.6)
        for fill, label in ((True, f"{name}, {p['min_threads']} thread(s): kept"), (False, "lost")):
            xs = [(x, y) for x, y, keeps in pts if keeps == fill]
            if xs:
                ax.plot(*zip(*xs, strict=True), "o", color=color, mfc=color if fill else "white",
                        label=label if fill else f"{name}: lost")  # fmt: skip
        ax.axvline(p["max_delay_s"] / cpu * 100, color=color, ls="--", lw=1)
        ax.axhline(p["saturated_mbit_s"] * (1 - c["tolerance"]), color=color, ls=":", lw=0.8)
    ax.set_xlabel("delay between bursts (CPU work), % of a sender's CPU in a saturated burst period")
    ax.set_ylabel("receiver throughput, Mbit/s (median)")
    ax.set_ylim(0, None)
    ax.set_title(f"search: {c['rate_mbit']:g} Mbit/s link, {c['packet_bytes']} B x {c['burst']} per burst")
    ax.legend(fontsize=7, loc="lower left")
    names = [*r["profiles"], *(f"seed {s}" for s in r["seed"])]
    values = [p["headroom"] * 100 for p in r["profiles"].values()] + [v * 100 for v in r["seed"].values()]
    colors = [f"C{k}" for k in range(len(r["profiles"]))] + ["grey"] * len(r["seed"])
    bars.barh(names, values, color=colors)
    for y, v in enumerate(values):
        bars.annotate(f"{v:.1f}%", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    bars.invert_yaxis()
    bars.set_xlim(0, 115)
    bars.set_xlabel("headroom, % of a sender's CPU")
    bars.set_title(f"headroom ({r['machine'].split(',')[0]})")
    fig.tight_layout()
    from offload.files import save_figure

    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


@app.command()
def availability(
    servers: Annotated[int, typer.Option(help="Servers m in the server-based system (the seed: 10).")] = 10,
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
            "it. \\[default: none: the rare-failure limit, where it cancels]"
        ),
    ] = None,
    window: Annotated[float | None, typer.Option(hidden=True, help="Old spelling of --exposure.")] = None,
    scatter_width: Annotated[int, typer.Option(help="Copyset scatter width w (the seed: 4).")] = 4,
    replicas: Annotated[int, typer.Option(help="Replicas of each chunk (the seed: 3).")] = 3,
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
    json_out: JsonOpt = False,
) -> None:
    """Relative data availability of embedded storage nodes against servers (seed 003, HotEdge'20):
    P(data loss) of m servers over that of m·c embedded nodes, both 3-way replicated on copysets,
    failures Poisson. Above 1, embedded storage is the more available."""
    from offload.metrics import availability as A

    window = exposure if exposure is not None else window
    pers = choices(f_per, A.F_PER, "--f-per value")
    if len(pers) != 1:
        raise fail(f"--f-per takes one of {', '.join(A.F_PER)}, got {f_per!r}")
    per: A.FPer = "server" if pers[0] == "server" else "compute-unit"
    cases = list(A.SEED_CASES)
    if case:
        cases = []
        for text in case:
            try:
                n, c, f = text.split(",")
                cases.append(A.Case("--case", int(n), int(c), float(f), 0.0))
            except ValueError:
                raise fail(f"--case {text!r}: expected n,c,f such as 12,17,2") from None
    with failing(ValueError):
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
    if json_out:
        print(json.dumps(r, indent=2))
        return
    when = "rare-failure limit" if window is None else f"window λT = {window:g}"
    t = _table(f"relative benefit: P(loss, {servers} servers) ÷ P(loss, embedded) ({when})")
    for col in ("case", "n", "c", "f", "server devices", "embedded nodes", "model, limit"):
        t.add_column(col, justify="left" if col == "case" else "right")
    if window is not None:
        t.add_column("model, window", justify="right")
    t.add_column("seed", justify="right")
    for row in r["cases"]:
        cells = [row["case"], str(row["n"]), str(row["c"]), f"{row['f']:g}", str(row["server_devices"])]
        cells += [str(row["embedded_nodes"]), f"{row['benefit_rare_limit']:.1f}"]
        if window is not None:
            cells.append(f"{row['benefit_window']:.1f}")
        cells.append("-" if row["published"] is None else f"{row['published']:g}")
        t.add_row(*cells)
    console.print(t)


@app.command()
def mbwu(
    workloads: Annotated[str, typer.Option(help="Workloads: ycsb-a, ycsb-c, arrow-scan.")] = (
        "ycsb-a,ycsb-c,arrow-scan"
    ),
    work_dir: Annotated[
        Path, typer.Option("--dir", help="A directory on the disk under test (not tmpfs); emptied after.")
    ] = Path("/var/tmp/offload-mbwu"),
    keys: Annotated[int, typer.Option(help="Key-value records (1 KiB values) in the key space.")] = 500_000,
    threads: Annotated[str, typer.Option(help="Worker counts to sweep, rising; stops at the plateau.")] = (
        "1,2,4,8"
    ),
    seconds: Annotated[float, typer.Option(help="Seconds each sweep step is measured.")] = 4.0,
    warmup: Annotated[float, typer.Option(help="Seconds each key-value step runs uncounted first.")] = 2.0,
    bucket: Annotated[float, typer.Option(help="Seconds per throughput sample (key-value).")] = 0.5,
    rate: Annotated[
        float | None, typer.Option(help="Open-loop target ops/s, all workers. \\[default: none: flat out]")
    ] = None,
    overwrite: Annotated[float, typer.Option(help="Precondition: overwrites, x the key count.")] = 0.5,
    precondition_rate: Annotated[
        float | None, typer.Option(help="Precondition overwrite rate, ops/s. \\[default: none: flat out]")
    ] = None,
    scan_rows: Annotated[int, typer.Option(help="Rows of the Arrow scan's Parquet data set.")] = 4_000_000,
    threshold: Annotated[float, typer.Option(help="Plateau: a step gaining no more than this share.")] = 0.05,
    bound: Annotated[float, typer.Option(help="Steady state: most (max - min) / median.")] = 0.15,
    steady_samples: Annotated[
        int, typer.Option(help="Steady state: fewest throughput samples in the steady window.")
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
        ts = tuple(ints(threads))
        plan = M.Plan(names, work_dir, keys, ts, seconds, warmup, bucket, rate, overwrite, precondition_rate,
                      scan_rows, threshold, bound, window, embedded)  # fmt: skip
        if measure:
            plan.check()
        case = M.seed_case_study(catalog)
    out: dict = {"seed_case_study": case}
    if measure:
        with err.status("mbwu") as status:
            try:
                r = M.measure(plan, lambda what: _progress(status, f"mbwu: {what}"))
            except (OSError, RuntimeError, ValueError) as e:
                raise fail(e.strerror if isinstance(e, WriteError) and e.strerror else str(e)) from None
        out = {**r, **out}
        if embedded:
            out["this_machine_costs"] = M.this_machine_costs(r, catalog)
        if plot is not None:
            try:
                M.plot(r, plot)
            except OSError as e:
                raise fail(e.strerror or str(e)) from None
    elif plot is not None:
        raise fail("--plot draws the sweep: it needs --measure")
    if json_out:
        print(json.dumps(out, indent=2))
        return
    if measure:
        m = out["machine"]
        t = _table(f"MBWU of the disk under {m['work_dir']} ({m['cpus']} CPUs, "
                  f"{m['memory_bytes'] / 2**30:.0f} GiB memory)")  # fmt: skip
        left = ("workload", "unit", "sweep (median per step)")
        for col in ("workload", "MBWU", "unit", "at workers", "plateau", "sweep (median per step)"):
            t.add_column(col, justify="left" if col in left else "right")
        if embedded:
            t.add_column(f"{embedded}, MBWUs", justify="right")
        for w, x in out["workloads"].items():
            steps = ", ".join(
                f"{s['threads']}: {s['value']:,.0f}{'' if s['steady'] else '~'}" for s in x["host"]["steps"]
            )
            row = [w, f"{x['mbwu']:,.0f}", x["unit"], str(x["host"]["threads_at_mbwu"])]
            row += ["yes" if x["host"]["plateau_reached"] else "not reached", steps]
            if embedded:
                row.append("-" if x.get("embedded_mbwus") is None else f"{x['embedded_mbwus']:.2f}")
            t.add_row(*row)
        console.print(t)
        console.print("[dim]~: no steady window within the bound; the median of the step's second half[/]")
    t = _table("seed 003's key-value case study: reductions host -> embedded, ours | seed's")
    for col in ("test", "MBWUs host, emb.", "$/MBWU", "kWh/MBWU", "m³/MBWU", "implied price, watts"):
        t.add_column(col, justify="left" if col == "test" else "right")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    for row in case["tests"]:
        red, rep, imp = row["reduction"], row["reported"], row["implied_host_over_embedded"]
        t.add_row(
            row["test"], f"{row['host']['mbwus']:g}, {row['embedded']['mbwus']:g}",
            f"{pct(red['usd_per_mbwu'])}|{pct(rep['usd_per_mbwu'])}",
            f"{pct(red['kwh_per_mbwu'])}|{pct(rep['kwh_per_mbwu'])}",
            f"{pct(red['m3_per_mbwu'])}|-", f"{imp['price']:.1f}x, {imp['watts']:.1f}x",
        )  # fmt: skip
    console.print(t)
    ratio = case["catalog_host_over_embedded"]
    console.print(
        f"catalog host/embedded: price {ratio['price']:.1f}x, watts "
        f"{'-' if ratio['watts'] is None else format(ratio['watts'], '.1f')}x (estimates), volume "
        f"{'-' if ratio['volume'] is None else format(ratio['volume'], '.1f')}x"
    )
    for w, c in out.get("this_machine_costs", {}).items():
        red = c["reduction"]
        console.print(
            f"{w}, this machine's MBWUs (host 1, {embedded} {c['embedded']['mbwus']:.2f}) at the catalog's "
            f"prices: $/MBWU {pct(red['usd_per_mbwu'])}, kWh/MBWU {pct(red['kwh_per_mbwu'])}, "
            f"m³/MBWU {pct(red['m3_per_mbwu'])}"
        )
