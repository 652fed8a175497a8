"""`offload probe` (run the suite), `offload probe ctc`, `offload probe reuse`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from offload.clitools import JsonOpt, OutOpt, console, emit, err, failing, progress
from offload.clitools import fail as _fail
from offload.clitools import seconds as _us
from offload.files import save_figure

app = typer.Typer(
    help="Measure the channels that decide whether offloading pays (memory, IPC, ZeroMQ, io_uring, "
    "GPU when present): a JSON profile with T(n) = L + n/B fits, and plots. Without a subcommand: run it.",
    invoke_without_command=True,
)


def _si(bps: float | None) -> str:
    if bps is None:  # JSON null: the time did not grow with the payload (pure latency)
        return "unbounded"
    if bps >= 1e12:
        return f"{bps / 1e12:.2f} TB/s"
    return f"{bps / 1e9:.2f} GB/s" if bps >= 1e8 else f"{bps / 1e6:.1f} MB/s"


def _presets() -> dict[str, Any]:
    """The shipped platform presets, or a one-line error naming the file."""
    from offload.probe import presets

    try:
        return presets.load()
    except (OSError, ValueError) as e:  # tomllib.TOMLDecodeError is a ValueError
        raise _fail(f"platform presets {presets.PRESETS}: {e}") from None


@app.callback()
def probe(
    ctx: typer.Context,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="Small payloads, few samples (~5 s on 2 vCPUs, GPU aside): the CI mode."
        ),
    ] = False,
    directory: Annotated[
        Path,
        typer.Option(
            "--dir",
            help="Where the io_uring test file and ipc sockets go: on the disk to measure (on tmpfs or "
            "ramfs the reads measure memory, and the profile says so).",
        ),
    ] = Path("."),
    out: Annotated[
        Path, typer.Option(help="Profile to write, whole, with --json too (plots go next to it).")
    ] = Path("probe.json"),
    channel: Annotated[
        list[str] | None,
        typer.Option("--channel", help="Only these channels (repeat), e.g. ipc/pipe. \\[default: all]"),
    ] = None,
    uring: Annotated[bool, typer.Option(help="Measure io_uring (NOP and O_DIRECT random reads).")] = True,
    plots: Annotated[bool, typer.Option(help="Write the PNG plots.")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Run the probe and write the profile; exits 1 if an ordering check fails."""
    if ctx.invoked_subcommand is not None:
        return
    from offload import probe as pr
    from offload.probe import plot

    unknown = [c for c in channel or [] if c not in pr.CHANNELS]
    if unknown:
        raise _fail(f"unknown channel {unknown[0]!r}; known: {', '.join(pr.CHANNELS)}")
    if not directory.is_dir():
        raise _fail(f"--dir {directory}: not a directory")
    steps = list(channel or pr.CHANNELS) + (["io_uring"] if uring else []) + ["gpu"]
    with progress("probing", total=len(steps)) as bar:

        def step(name: str) -> None:
            bar.update(steps.index(name) if name in steps else 0, f"probing {name}")

        with failing(ValueError):
            profile = pr.run(quick=quick, directory=directory, channels=channel, uring=uring, progress=step)
        bar.update(len(steps))
    if not emit(profile, json_out, out):
        print_profile(profile)
    written = plot.all_plots(profile, out) if plots else []
    (err if json_out else console).print(f"wrote {out}" + "".join(f", {p}" for p in written))
    if not all(c["ok"] for c in profile["checks"]):
        raise typer.Exit(1)


def print_profile(profile: dict[str, Any]) -> None:
    t = Table(title=f"channels ({profile['mode']}; {profile['environment']['cpu']})")
    t.add_column("channel", no_wrap=True)
    for col in ("L", "B", "n½ = L·B", "B/limit", "fit err"):
        t.add_column(col, justify="right")
    for name, ch in profile["channels"].items():
        f = ch.get("fit")
        frac = ch.get("fraction_of_limit")
        t.add_row(
            f"{name} [red](unphysical)[/]" if ch.get("unphysical") else name,
            _us(f["latency_s"]) if f else "-",
            _si(f["bandwidth_bps"]) if f else "(cache-sized)",
            f"{f['n_half_bytes']:,.0f} B" if f and f.get("n_half_bytes") is not None else "-",
            f"{100 * frac:.0f}%" if frac else "-",
            f"{100 * f['median_rel_error']:.0f}%" if f else "-",
        )
    console.print(t)
    for name, ch in profile["channels"].items():
        if ch.get("unphysical"):
            console.print(f"[red]unphysical[/]: {name}: {escape(ch['unphysical'])}", highlight=False)
    u = profile.get("io_uring", {})
    if "nop" in u:
        console.print(
            f"io_uring NOP: {_us(u['nop']['single_s'])} alone, {_us(u['nop']['batched_s'])} in batches of 64"
        )
    if "random_reads" in u:
        pts = u["random_reads"]["points"]
        fs = profile.get("directory") or {}
        on = (
            f" [red]on {fs.get('type')}: memory, not a disk[/]"
            if u["random_reads"].get("memory_backed")
            else ""
        )
        console.print(f"io_uring 4 KiB O_DIRECT random reads{on}: " + ", ".join(
            f"QD{p['queue_depth']} {p['iops']:,.0f} IOPS (p50 {_us(p['p50_s'])})" for p in pts))  # fmt: skip
    elif "skipped" in u:
        console.print(f"io_uring skipped: {u['skipped']}")
    console.print(f"GPU: {profile['gpu']['note']}")
    for c in profile["checks"]:
        mark = "[green]ok[/]" if c["ok"] else "[red]FAILED[/]"
        console.print(f"{mark} {escape(c['check'])}: {escape(c['detail'])}", highlight=False)


def _channels_for_ctc(profile: Path | None) -> list[tuple[str, float, float]]:
    """(name, L, B) for every measured channel with a fit, every preset platform and limit."""
    from offload.probe import presets

    out: list[tuple[str, float, float]] = []
    if profile is not None:
        out += _measured_channels(profile)
    p = _presets()
    for key, plat in p["platforms"].items():
        bw = plat.get("dma_gbps") or plat.get("read_gbps")
        if bw:
            out.append((f"preset {key}", plat["latency_s"], bw * presets.GB))
    for key, lim in p["limits"].items():
        out.append((f"limit {key}", 0.0, lim["bandwidth_gbps"] * presets.GB))
    return out


def _measured_channels(profile: Path) -> list[tuple[str, float, float]]:
    """(name, L, B) of a probe profile's fitted ZeroMQ and IPC channels; a one-line error naming
    the file if it is not one (`offload probe --out` writes them)."""
    try:
        channels = json.loads(profile.read_text())["channels"].items()
        out = []
        for name, ch in channels:
            f = ch.get("fit")
            physical = not ch.get("unphysical")  # a zero-copy figure is no channel to move data on
            if f and f.get("bandwidth_bps") is not None and name.startswith(("zmq/", "ipc/")) and physical:
                out.append((f"measured {name}", float(f["latency_s"]), float(f["bandwidth_bps"])))
    except OSError as e:
        raise _fail(f"--profile {profile}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _fail(
            f"--profile {profile}: not a probe profile (needs channels.<name>.fit with latency_s and "
            "bandwidth_bps; `offload probe --out FILE` writes one)"
        ) from None
    return out


@app.command()
def ctc(
    queries_per_s: Annotated[
        float | None,
        typer.Option(help="The kernel's throughput (queries/s); or give --bench. \\[default: none]", min=0),
    ] = None,
    bench: Annotated[
        Path | None,
        typer.Option(help="An `offload rules bench` JSON: use fast's 1-thread throughput. \\[default: none]"),
    ] = None,
    bytes_per_query: Annotated[
        float, typer.Option(help="Input bytes per query (pre-encoded MCT row: 8 codes x 4 B).", min=0)
    ] = 32.0,
    batch: Annotated[str, typer.Option(help="Batch sizes in queries, comma-separated.")] = "1,64,1024,4096",
    profile: Annotated[
        Path | None,
        typer.Option(help="A probe profile: add its measured channels. \\[default: none: presets only]"),
    ] = None,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Computation-to-communication ratio of a kernel on each channel: time to compute a batch /
    time to move it. Above 1: compute-bound (a faster link would not help); below 1:
    communication-bound (seed 004, Insight 4)."""
    from offload.probe import presets

    if queries_per_s is None and bench is not None:
        try:
            runs = json.loads(bench.read_text())["matchers"]["fast"]["runs"]
            queries_per_s = max(r["queries_per_s"] for r in runs if r["threads"] == 1)
        except OSError as e:
            raise _fail(f"--bench {bench}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError):
            raise _fail(
                f"--bench {bench}: not an `offload rules bench` JSON (needs matchers.fast.runs with a "
                "1-thread queries_per_s)"
            ) from None
    if not queries_per_s or queries_per_s <= 0:
        raise _fail("give --queries-per-s N or --bench rules-bench.json")
    try:
        sizes = [int(x) for x in batch.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise _fail(f"--batch {batch!r}: expected batch sizes of 1 or more queries, separated by commas")
    channels = _channels_for_ctc(profile)
    rows = [
        {"channel": name, "batch": n, **vars(c), "ctc": c.ratio}
        for name, lat, bw in channels
        for n in sizes
        for c in [presets.ctc(queries_per_s, bytes_per_query, n, lat, bw)]
    ]
    result = {"queries_per_s": queries_per_s, "bytes_per_query": bytes_per_query, "rows": rows}
    if emit(result, json_out, out):
        return
    t = Table(title=f"CTC at {queries_per_s:,.0f} queries/s, {bytes_per_query:g} B/query (>1: compute-bound)")
    t.add_column("channel")
    for n in sizes:
        t.add_column(f"batch {n}", justify="right")
    for name, _l, _b in channels:
        t.add_row(name, *(f"{r['ctc']:.3g}" for r in rows if r["channel"] == name))
    console.print(t)


SEED_R = 7  # seed 004, Sec. 4 and 5.2: Alpha Data beats Xeon+FPGA v1 beyond 7 iterations


@app.command()
def reuse(
    private: Annotated[str, typer.Option(help="Private-memory preset.")] = "alpha_data",
    shared: Annotated[str, typer.Option(help="Shared-memory preset.")] = "xeon_fpga_v1",
    out: Annotated[Path | None, typer.Option(help="Write the curve plot (PNG). \\[default: no plot]")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Effective bandwidth against the device-memory reuse ratio r, and the r above which the
    private-memory platform wins: from the seed's stated DMA rates of an iterative kernel (staged
    and vendor-stack), beside the ≈7 that seed 004 reports for Alpha Data vs Xeon+FPGA v1 and the
    fitted rate that gives exactly 7."""
    from offload.probe import presets

    p = _presets()["platforms"]
    for given in (private, shared):
        if given not in p:
            raise _fail(f"unknown preset {given!r}; known: {', '.join(p)}")
    pv, sh = p[private], p[shared]
    dev, sh_bw = pv["device_read_gbps"], sh["read_gbps"]
    steps = pv.get("dma_breakdown_gbps", {"effective": pv.get("dma_gbps")})
    table = {k: presets.reuse_threshold(v, dev, sh_bw) for k, v in steps.items() if v}
    variants = presets.reuse_variants(steps, dev, sh_bw, SEED_R)
    result = {
        "private": private, "shared": shared, "device_read_gbps": dev, "shared_read_gbps": sh_bw,
        "r_threshold_by_dma_step": table, "seed_reported": SEED_R,
        "dma_gbps_that_gives_7": variants["fitted"]["dma_gbps"], **variants,
    }  # fmt: skip
    if out is not None:
        _reuse_plot(pv, sh, steps, out)
        result["plot"] = str(out)
    if emit(result, json_out):  # its --out is the plot
        return
    console.print(f"{pv['name']} vs {sh['name']}")
    console.print(f"device memory read {dev} GB/s, shared-memory read {sh_bw} GB/s")
    console.print(_reuse_table(variants))
    console.print("every step of the seed's DMA breakdown (Fig. 5):")
    for k, r in table.items():
        console.print(
            f"  DMA at the '{k}' step ({steps[k]} GB/s): r_threshold = {r:.1f}" if r else f"  {k}: never"
        )
    console.print(
        f"An iterative kernel allocates its buffers once, so the allocation step (1.6 GB/s, which "
        f"would give {table.get('with_allocation') or 0:.0f}) does not recur; its rate lies between the "
        f"staged and the vendor-stack ones, whose thresholds bracket the seed's {SEED_R}. Exactly "
        f"{SEED_R} needs {variants['fitted']['dma_gbps']:.1f} GB/s, a rate the seed never states: fitted."
    )


def _reuse_table(variants: dict[str, Any]) -> Table:
    """The stated-rate thresholds and the fitted one, each beside the seed's."""
    t = Table(title=f"r_threshold: from the seed's stated DMA rates, and fitted (seed: ≈{SEED_R})")
    for col in ("variant", "DMA rate", "r_threshold", "vs the seed's"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for v in variants["stated"]:
        r, d = v["r_threshold"], v["rel_diff"]
        shown = ("never", "-") if r is None else (f"{r:.1f}", f"{d:+.0%}".replace("-", "−"))
        t.add_row(f"stated: {v['what']}", f"{v['dma_gbps']} GB/s", *shown)
    f = variants["fitted"]
    t.add_row("fitted (back-solved)", f"{f['dma_gbps']:.1f} GB/s", f"{f['r_threshold']:.1f}",
              "= by construction")  # fmt: skip
    return t


def _reuse_plot(pv: dict[str, Any], sh: dict[str, Any], steps: dict[str, float], out: Path) -> None:
    from offload.host.plots import pyplot

    plt = pyplot()
    import numpy as np

    from offload.probe import presets

    r = np.linspace(0.5, 30, 200)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k, dma in steps.items():
        ax.plot(r, [presets.private_bandwidth(x, dma * 1e9, pv["device_read_gbps"] * 1e9) / 1e9 for x in r],
                label=f"{pv['name'].split(' (')[0]}, DMA {dma} GB/s ({k})")  # fmt: skip
    ax.axhline(
        sh["read_gbps"], color="k", ls="--", label=f"{sh['name'].split(' (')[0]} ({sh['read_gbps']} GB/s)"
    )
    ax.axvline(7, color="grey", ls=":", label="seed: r_threshold ≈ 7")
    ax.set_xlabel("device memory reuse ratio r")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out, dpi=110)


@app.command("gpu-channels")
def gpu_channels(
    quick: Annotated[
        bool,
        typer.Option("--quick", help="Sizes to 64 MiB, fewer samples: ~10-20 s on a GPU (full: ~1-2 min)."),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the JSON result (also without a GPU: why). \\[default: none]"),
    ] = None,
    plots: Annotated[bool, typer.Option(help="Write the plot beside --out, as a .png (with a GPU).")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Seed 004's device-side channels on a GPU (CuPy): device memory, mapped host memory (its
    shared access) and managed memory (its coherent access) from 4 KiB to 1 GiB (Fig. 4, §3.2.2);
    one 64 B access each way (Table 5); matrix multiply (§5.1) and matrix-vector iterated on one
    matrix with the reuse-ratio threshold r measured (§5.2). Without a GPU: one line saying why,
    exit 0. Exits 1 if a part failed (the others are still written)."""
    from offload.probe import gpuchannels as gc

    why = gc.why_unavailable()
    if why is not None:
        emit(gc.unavailable(why), json_out, out)
        (err if json_out else console).print(
            f"GPU channels skipped: {why}", markup=False, highlight=False, soft_wrap=True
        )
        return
    with progress("measuring the device-side channels", every_step=True) as say:
        result = gc.measure(quick, say)
    emit(result, False, out)  # on disk first: nothing measured is lost to a failing plot
    if out is not None and plots:
        png = out.with_suffix(".png")
        with failing(OSError, ValueError):
            result["plot"] = str(gc.plot(result, png))
        emit(result, False, out)
    if not emit(result, json_out):
        for part in gc.render(result):
            console.print(part)
        if out is not None:
            console.print(f"wrote {out}" + (f", {result['plot']}" if "plot" in result else ""))
    problems = gc.failed(result)
    for p in problems:
        err.print(f"[red]failed[/]: {escape(p)}", highlight=False)
    if problems:
        raise typer.Exit(1)
