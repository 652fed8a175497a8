"""`offload recsys ...`: recommendation inference with embeddings on SSD (RM-SSD, seed 002).

create a model and its tables → synth a trace → infer with any strategy; kernels for the FPGA
kernel-size search, resources for Table VI beside the seed's, composition for Fig. 9's scan patterns.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich import box
from rich.table import Table

from offload.clitools import JsonOpt, OutOpt, console, emit, err, fail, failing, progress, size_bytes
from offload.files import WriteError, atomic_write, write_text
from offload.recsys import engine as E
from offload.recsys import traces as T
from offload.recsys.models import SPECS

app = typer.Typer(
    help="Recommendation inference with embedding tables on SSD (RM-SSD): "
    "create, synth, infer, bench, kernels, resources, composition.",
    no_args_is_help=True,
)

ModelDirOpt = Annotated[
    Path, typer.Option("--model-dir", "-m", help="Model directory made by `offload recsys create`.")
]


def _spec(name: str) -> Any:
    if name not in SPECS:
        raise fail(f"unknown model {name!r}; one of {', '.join(SPECS)}")
    return SPECS[name]


# The domains of the numeric options (shown in --help as ranges; typer refuses the rest, and
# clitools refuses nan and inf for every float option).
SEED_MAX = 2**32 - 1
ROWS_MAX = 2**32
BATCHES_MAX = 1_000_000
BATCH_SIZE_MAX = 65_536
LOOKUPS_MAX = 10_000
TRACE_LOOKUPS_MAX = 2**31
"""Lookups in one trace (16 GiB of int64 row ids): more is refused before anything is drawn."""
QUEUE_DEPTH_MAX = 4096
"""The device reader's ring (crates/recsys uring.rs takes at most this many reads in flight)."""
HOST_CACHE_MAX = 2**22
II_MAX = 1024


def _size(text: str, option: str = "--size") -> int:
    """'8G', '512M', '64k' or a plain byte count, more than 0; a clear exit otherwise (0, a
    negative number, nan and inf are refused, naming the option)."""
    try:
        n = size_bytes(text)
    except (ValueError, OverflowError):  # inf overflows int()
        n = None
    if n is None or n <= 0:
        raise fail(f"{option} {text}: write a size above 0: bytes, or a number with K, M, G or T (e.g. 8G)")
    return n


def _write_error(e: Exception) -> typer.Exit:
    return fail(str(e) if isinstance(e, WriteError) else f"{type(e).__name__}: {e}")


@app.command()
def create(
    out: Annotated[Path, typer.Option("--out", "-o", help="Model directory to write.")],
    model: Annotated[str, typer.Option(help="Model: rmc1, rmc2, rmc3, ncf, wnd.")] = "rmc1",
    size: Annotated[
        str, typer.Option(help="Total size of the embedding tables (K/M/G suffixes; above 0), split evenly.")
    ] = "64M",
    rows: Annotated[
        int | None,
        typer.Option(help="Rows per table instead of --size. \\[default: from --size]", min=1, max=ROWS_MAX),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the weights and table values.", min=0, max=SEED_MAX)] = 0,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace an existing model at --out (once the new one is complete)."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a random model (DLRM's initialisation) and its table files (RM_create_table). The
    directory appears whole or not at all; an existing one is kept unless --force."""
    spec = _spec(model)
    try:
        per = [rows] * spec.tables if rows else E.rows_for_bytes(spec, _size(size))
    except ValueError as e:
        raise fail(f"--size {size}: {e}") from None
    total = sum(per)
    t0 = time.perf_counter()
    try:
        with progress("writing tables", total=total) as steps:
            d = E.create(out, spec, per, seed=seed, progress=steps.update, overwrite=force)
    except FileExistsError as e:
        raise fail(str(e.strerror or e)) from None
    except (OSError, E.RecsysError, ValueError) as e:
        raise _write_error(e) from None
    secs = time.perf_counter() - t0
    res = {
        "out": str(out),
        "model": spec.name,
        "tables": spec.tables,
        "rows_per_table": per,
        "dim": spec.dim,
        "table_bytes": d.table_bytes,
        "seed": seed,
        "seconds": secs,
    }
    if emit(res, as_json):  # its --out is the model directory
        return
    console.print(
        f"{spec.name}: {spec.tables} tables × {per[0]:,} rows × dim {spec.dim} = "
        f"{d.table_bytes / 2**30:.2f} GiB in {secs:.1f} s → {out}"
    )


@app.command()
def synth(
    out: Annotated[Path, typer.Option("--out", "-o", help="Trace file to write (.npz).")],
    model_dir: ModelDirOpt,
    batches: Annotated[int, typer.Option(help="Batches in the trace.", min=1, max=BATCHES_MAX)] = 16,
    batch_size: Annotated[int, typer.Option(help="Samples per batch.", min=1, max=BATCH_SIZE_MAX)] = 16,
    kind: Annotated[
        str,
        typer.Option(
            help="Distribution: hotset (the seed's statistics), recssd (locality K), zipf, uniform."
        ),
    ] = "hotset",
    k: Annotated[float, typer.Option("--k", help="RecSSD locality knob K (kind recssd).", min=0)] = 0.3,
    alpha: Annotated[float, typer.Option(help="Zipf exponent (kind zipf).", min=0)] = 1.09,
    lookups: Annotated[
        int | None,
        typer.Option(help="Lookups per table per sample. \\[default: the model's]", min=0, max=LOOKUPS_MAX),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed.", min=0, max=SEED_MAX)] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Generate a seeded trace of dense features and EmbeddingBag inputs for a model directory
    (at most 2^31 lookups in all)."""
    d = _open(model_dir)
    total = batches * batch_size * (lookups if lookups is not None else d.spec.lookups) * d.spec.tables
    if total > TRACE_LOOKUPS_MAX:
        raise fail(
            f"a trace of {total:,} lookups is more than {TRACE_LOOKUPS_MAX:,} ({TRACE_LOOKUPS_MAX * 8 >> 30} "
            "GiB of row ids); ask for fewer --batches, --batch-size or --lookups"
        )
    try:
        cfg = T.TraceConfig(
            rows=d.rows,
            batch_size=batch_size,
            lookups=lookups if lookups is not None else d.spec.lookups,
            dense_width=d.spec.dense_width,
            seed=seed,
            kind=kind,  # type: ignore[arg-type]
            recssd_k=k,
            zipf_alpha=alpha,
        )
        with progress(f"synthesising {batches} batches × {batch_size} samples ({kind})"):
            trace = T.generate_trace(cfg, batches)
            T.save_trace(out, trace)
    except WriteError as e:
        raise fail(str(e)) from None
    except (ValueError, OSError) as e:
        raise fail(f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e)) from None
    stats = T.locality_stats(T.table_streams(trace.batches)[0])
    res = {"out": str(out), "batches": batches, "batch_size": batch_size, "kind": kind, "table0": stats}
    if emit(res, as_json, default=float):  # its --out is the trace
        return
    console.print(
        f"{batches} batches × {batch_size} samples ({kind}) → {out}; table 0: "
        f"{stats['unique_share']:.1%} unique, top-10k share {stats['top_share']:.1%}"
    )


def _open(model_dir: Path, *, check_weights: bool = True) -> E.ModelDir:
    """The model directory, checked (its weights too unless `check_weights` is False: `info`
    reports them); a model made before weights had a checksum is used with a warning."""
    with failing(OSError, ValueError):  # RecsysError is a ValueError
        d = E.ModelDir.open(model_dir, check_weights=check_weights)
    if d.weights_status == E.NOT_VERIFIABLE and check_weights:
        err.print(f"warning: {_unverifiable(d)}", highlight=False, soft_wrap=True, markup=False)
    return d


def _unverifiable(d: E.ModelDir) -> str:
    return (
        f"{d.path / E.WEIGHTS_FILE}: weights not verifiable (the manifest, made before weights had a "
        f"checksum, has none); recreate the model to add one: offload recsys create --out {d.path} --force"
    )


# The predictions file of `infer --out`, by suffix.
PREDICTION_FORMATS = {".npy": "numpy array", ".csv": "one per line", ".json": "a JSON list"}


def _save_predictions(out: Path, p: np.ndarray) -> None:
    """Writes exactly `out` (temp + fsync + rename), in the format its suffix names."""
    suffix = out.suffix.lower()
    with atomic_write(out, "wb") as f:
        if suffix == ".npy":
            np.save(f, p)
        elif suffix == ".csv":
            np.savetxt(f, p, fmt="%.9g")
        else:
            f.write(json.dumps([float(x) for x in p]).encode())


# One default for both commands: the seed's Table II model (reproducible anywhere).
MODE_DEFAULT = "flash"
DEVICE_DEFAULT = "process"
ModeOpt = Annotated[
    str,
    typer.Option(help="flash: the seed's Table II model of the media; disk: this machine's disk, measured."),
]
DeviceOpt = Annotated[
    str,
    typer.Option(
        help="Where the in-storage device runs: process (its own process, pinned to the last CPU, "
        "behind a shared-memory channel) or in-process."
    ),
]


@app.command()
def infer(
    model_dir: ModelDirOpt,
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Trace from `offload recsys synth`.")],
    strategy: Annotated[
        str, typer.Option("--strategy", "-s", help=f"One of: {', '.join(E.STRATEGIES)}.")
    ] = "dram",
    mode: ModeOpt = MODE_DEFAULT,
    device: DeviceOpt = DEVICE_DEFAULT,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write the predictions to exactly this file: .npy, .csv or .json. \\[default: none]"
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run every batch of a trace through one strategy; print the stage breakdown and I/O."""
    if out is not None and out.suffix.lower() not in PREDICTION_FORMATS:
        raise fail(f"--out {out}: unknown suffix {out.suffix!r}; use one of {', '.join(PREDICTION_FORMATS)}")
    d = _open(model_dir)
    preds, stages, io = [], {}, {}
    with failing(OSError, ValueError):  # RecsysError is a ValueError
        with progress("reading the trace"):
            tr = T.load_trace(trace, rows=d.rows)
        with (
            E.Engine(d, strategy, mode, device=device) as eng,
            progress(f"{strategy} ({mode})", len(tr)) as bar,
        ):
            for b in tr:
                p, info = eng.infer(b.dense, b.offsets, b.indices)
                bar.advance()
                preds.append(p)
                for key, v in info["stages"].items():
                    stages[key] = stages.get(key, 0.0) + v
                for key, v in info["io"].items():
                    io[key] = io.get(key, 0) + v
    allp = np.concatenate(preds) if preds else np.zeros(0, np.float32)
    if out:
        try:
            _save_predictions(out, allp)
        except OSError as e:
            raise _write_error(e) from None
    summary = {
        "strategy": strategy,
        "mode": mode,
        "device": device,
        "samples": int(allp.size),
        "weights": d.weights_status,
        "mean_prediction": float(allp.mean()) if allp.size else None,
        "stages_s": stages,
        "io": io,
        "read_amplification": io.get("media_bytes", 0) / max(1, io.get("useful_bytes", 0)),
        "out": str(out) if out else None,
    }
    if emit(summary, as_json):  # its --out is the predictions
        return
    t = Table(title=f"{strategy} ({mode}): {allp.size} samples")
    t.add_column("stage")
    t.add_column("seconds", justify="right")
    for key, v in stages.items():
        t.add_row(key.replace("_", "-"), f"{v:.6f}")
    console.print(t)
    console.print(
        f"media {io.get('media_bytes', 0):,} B in {io.get('media_reads', 0):,} reads, "
        f"link {io.get('link_bytes', 0):,} B, read amplification {summary['read_amplification']:.1f}×"
    )


def _flash_params(pairs: list[str] | None) -> dict[str, float] | None:
    """`--flash key=value` pairs for the Table II model (e.g. t_page_us=60 host_iops_4k=30000),
    each checked against its domain by the model itself (crates/recsys `FlashModel::check`:
    finite, positive where it counts or divides) before anything runs."""
    from offload import _native

    if not pairs:
        return None
    out: dict[str, float] = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        try:
            x = float(val)
        except ValueError:
            raise fail(f"--flash {p!r}: write key=number, e.g. t_page_us=20") from None
        if not sep:
            raise fail(f"--flash {p!r}: write key=number, e.g. t_page_us=20")
        if not math.isfinite(x):
            raise fail(f"--flash {p}: {val.strip()} is not a finite number")
        out[key.strip()] = int(x) if x.is_integer() else x  # channels and page_bytes are counts
    with failing(ValueError):
        try:
            _native.recsys_flash_model(out)
        except ValueError as e:
            raise ValueError(f"--flash {' '.join(pairs)}: {e}") from None
    return out


@app.command()
def bench(
    model_dir: ModelDirOpt,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            "-t",
            help="Trace from `offload recsys synth`. \\[default: a hotset trace made here]",
        ),
    ] = None,
    strategies: Annotated[
        str, typer.Option("--strategies", "-s", help="Comma list, first = the reference for the answers.")
    ] = ",".join(E.STRATEGIES),
    mode: ModeOpt = MODE_DEFAULT,
    batches: Annotated[
        int, typer.Option(help="Batches of the trace made here (without --trace).", min=1, max=BATCHES_MAX)
    ] = 8,
    batch_size: Annotated[
        int, typer.Option(help="Samples per batch (without --trace).", min=1, max=BATCH_SIZE_MAX)
    ] = 16,
    warmup: Annotated[
        int, typer.Option(help="First batches of each strategy run but not recorded.", min=0, max=BATCHES_MAX)
    ] = 1,
    queue_depth: Annotated[
        int,
        typer.Option(help="io_uring queue depth of device reads (disk mode).", min=1, max=QUEUE_DEPTH_MAX),
    ] = 64,
    host_cache: Annotated[
        int, typer.Option(help="RecSSD's host LRU cache, in vectors.", min=1, max=HOST_CACHE_MAX)
    ] = 8192,
    flash: Annotated[
        list[str] | None,
        typer.Option(
            help="A Table II parameter, key=value (repeat): channels, page_bytes, t_page_us, flush_fraction, "
            "host_iops_4k, clock_mhz, link_bytes_per_s, doorbell_us. \\[default: Table II]"
        ),
    ] = None,
    device: DeviceOpt = DEVICE_DEFAULT,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write the results as JSON here, after each strategy (a failure keeps what was measured "
            "and records the failure). \\[default: none]",
        ),
    ] = None,
    plots: Annotated[
        Path | None, typer.Option(help="Directory for the PNG figures (Figs. 2, 3, 10). \\[default: none]")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Every strategy over one trace, side by side in one run: throughput, latency, the stage
    breakdown (Fig. 2), I/O and read amplification (Fig. 3, Table IV), × over ssd-s."""
    from offload.recsys import bench as B
    from offload.recsys import plots as P

    d = _open(model_dir)
    names = [s.strip() for s in strategies.split(",") if s.strip()]
    flash_params = _flash_params(flash)
    try:
        with progress("reading the trace" if trace is not None else f"making a trace of {batches} batches"):
            tr = B.trace_of(d, trace, batches, batch_size)
        with progress(names[0] if names else "", total=len(tr) * len(names)) as bar:
            opts = B.RunOptions(warmup, flash_params, queue_depth, host_cache, device)
            res = B.run(
                d,
                tr,
                names,
                mode,
                opts,
                progress=bar,
                on_batch=bar.advance,
                on_result=(lambda r: _save_json(out, r)) if out else None,
            )
    except B.BenchFailed as e:
        raise fail(e.saying_what_was_kept(out)) from None
    except WriteError as e:
        raise fail(str(e)) from None
    except (ValueError, OSError) as e:  # RecsysError is a ValueError
        raise fail(str(e)) from None
    if plots:
        res["plots"] = [str(p) for p in P.per_bench(res, plots)]
    if emit(res, as_json, out):  # the whole result, the plots' paths too
        return
    print_bench(res)


def _save_json(out: Path, res: dict[str, Any]) -> None:
    """The results so far, whole (temp + fsync + rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(res, indent=2))


def _compact(x: float) -> str:
    """1,946,453 → 1.9M; 83,032 → 83k; small numbers as they are."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if x >= scale:
            return f"{x / scale:.1f}{unit}" if unit != "k" else f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"


def print_bench(res: dict[str, Any]) -> None:
    gib = res["table_bytes"] / 2**30
    n = res["trace"]["batches"]
    t = Table(title=f"{res['model']} ({res['mode']}), {gib:.2f} GiB of tables, {n} batches")
    t.box, t.pad_edge = box.SIMPLE_HEAD, False
    t.caption = (
        "inf/s: inferences per second; p50/p99: batch latency (ms); SLS: µs per inference; ampl.: read "
        "amplification; B/inf: host↔storage bytes per inference"
    )
    for c in ("strategy", "inf/s", "p50", "p99", "SLS", "ampl.", "B/inf", "×ssd-s"):
        t.add_column(c, justify="left" if c == "strategy" else "right", no_wrap=True)
    vs = res["vs_ssd_s"]
    for name, r in res["strategies"].items():
        x = (vs.get(name) or {}).get("throughput_x")
        sls = r["sls_s"]
        t.add_row(
            name,
            f"{r['throughput_per_s']:,.0f}" if r["throughput_per_s"] else "-",
            f"{r['latency_s']['p50'] * 1e3:.2f}",
            f"{r['latency_s']['p99'] * 1e3:.2f}",
            f"{sls * 1e6 / max(1, r['samples']):,.0f}" if sls is not None else "-",
            f"{r['read_amplification']:.1f}×",
            _compact(r["traffic_bytes_per_sample"]),
            f"{x:.1f}×" if x else "-",
        )
    console.print(t)
    worst = max((r["max_abs_diff_vs_first"] for r in res["strategies"].values()), default=0.0)
    console.print(f"answers: every strategy within {worst:.1e} of {res['reference_strategy']}'s predictions")
    for p in res.get("plots", []):
        console.print(f"plot: {p}")


@app.command()
def info(
    model_dir: ModelDirOpt,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify/--no-verify",
            help="Check every row against its checksum (reads all the tables); --no-verify checks the "
            "manifest, headers and checksum areas only.",
        ),
    ] = True,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """What a model directory holds: spec, tables, extents (as RM_open_table sees them), and
    whether the weights and every row match their checksums. Damaged weights are reported, then
    the command ends with the error (exit 2)."""
    from offload import _native

    d = _open(model_dir, check_weights=False)
    weights = {
        "file": str(d.path / E.WEIGHTS_FILE),
        "status": d.weights_status,
        "sha256": d.weights_sha256,
        "problem": d.weights_problem or (_unverifiable(d) if d.weights_sha256 is None else None),
    }
    with failing(OSError, ValueError):  # RecsysError is a ValueError
        tables = [_native.recsys_table_info(str(p)) for p in d.table_paths]
        t0 = time.perf_counter()
        if verify:
            total = sum(t["file_bytes"] for t in tables)
            with progress("checking rows", total=total) as bar:
                base = 0
                for p, t in zip(d.table_paths, tables, strict=True):
                    _native.recsys_verify_table(str(p), lambda k, base=base: bar.update(base + k))
                    base += t["file_bytes"]
    res = {
        "spec": d.spec.name,
        "rows": d.rows,
        "table_bytes": d.table_bytes,
        "rows_checked": verify,
        "check_seconds": time.perf_counter() - t0 if verify else None,
        "weights": weights,
        "tables": tables,
    }
    if not emit(res, as_json, out):
        checked = (
            f"every row matches its checksum ({res['check_seconds']:.2f} s)"
            if verify
            else "rows not checked (--no-verify)"
        )
        console.print(
            f"{d.spec.name}: {len(tables)} tables, {d.table_bytes / 2**20:.1f} MiB; extents: "
            f"{sum(t['extents'] for t in tables)} ({tables[0]['extents_source'] if tables else '-'}); "
            f"{checked}; weights: {_weights_words(d)}"
        )
    if d.weights_problem:
        raise fail(d.weights_problem)


def _weights_words(d: E.ModelDir) -> str:
    """How `info` says what it found of the weights."""
    if d.weights_status == E.NOT_VERIFIABLE:
        return "not verifiable (no checksum in the manifest; recreate the model to add one)"
    return "DAMAGED (below)" if d.weights_problem else "match their checksum"


CompositionOpt = Annotated[
    str, typer.Option(help="How eq. 1b/1c combine paired layers: sum (as printed) or pipelined (max).")
]
IIOpt = Annotated[
    int, typer.Option("--ii", help="Initiation interval of the MLP kernels.", min=1, max=II_MAX)
]


@app.command()
def kernels(
    composition: CompositionOpt = "sum",
    ii: IIOpt = 8,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """The RM-SSD kernel-size search on Table III's models: our Table V beside the paper's, and
    Table VI's naive / default / optimized designs with the devices each fits."""
    from offload.recsys import fpga as K
    from offload.recsys.engine import kernel_shape
    from offload.recsys.models import SPECS

    ours = K.table_v(composition=composition, ii=ii)
    designs = {name: K.compare(m, ii=ii, composition=composition) for name, m in K.TABLE_III.items()}  # type: ignore[arg-type]
    fig15 = {n: K.search(kernel_shape(SPECS[n]), ii=ii, composition=composition) for n in ("ncf", "wnd")}  # type: ignore[arg-type]
    if emit(K.search_report(ours, designs, fig15), as_json, out, default=str):
        return
    _print_table_v(ours, ii, composition)
    _print_table_vi(designs)
    _print_fig15(fig15)


@app.command()
def resources(
    composition: CompositionOpt = "sum",
    ii: IIOpt = 8,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Table VI beside the seed's: the resource model's LUT / FF / BRAM / DSP for MLP-naïve, MLP
    (default kernels) and MLP-op (searched) on RMC1-3, our ÷ the seed's for each cell, which of
    XCVU9P and XC7A200T each fits, and RMC3's MLP-op ÷ MLP-naïve (the seed: 3.5×). The figures
    are a model's estimate (fp32 units and weight memories counted with generic HLS
    operator costs), not synthesis; the JSON says where the costs came from and how far each cell
    is from the seed's. Record it: --out benches/results/recsys/table-vi.json."""
    from offload.recsys.fpga import resource_table as RT

    if composition not in ("sum", "pipelined"):
        raise fail(f"unknown composition {composition!r}; one of sum, pipelined")
    with failing(ValueError):
        res = RT.report(ii=ii, composition=composition)  # type: ignore[arg-type]
    if emit(res, as_json, out):
        return
    t = Table(
        title=f"Table VI: MLP engine resources, ours (a model) beside the seed's; II = {ii}, {composition}"
    )
    for c in ("model", "unit", "", "LUT", "FF", "BRAM", "DSP", "XC7A200T", "samples/s"):
        t.add_column(c, justify="left" if c in ("model", "unit", "", "XC7A200T") else "right")
    for r in res["rows"]:
        fit = ("fits", "over: " + ", ".join(r["overflows"]["XC7A200T"]))[bool(r["overflows"]["XC7A200T"])]
        pfit = ("fits", "over: " + ", ".join(r["paper_overflows"]["XC7A200T"]))[
            bool(r["paper_overflows"]["XC7A200T"])
        ]
        t.add_row(r["model"], r["unit"], "ours", *(_count(r["ours"][k]) for k in RT.RESOURCES), fit,
                  f"{r['samples_per_s']:,.0f}")  # fmt: skip
        t.add_row("", "", "seed", *(_count(r["paper"][k]) for k in RT.RESOURCES), pfit, "")
        t.add_row(
            "", "", "×", *(f"{r['ours_over_paper'][k]:.2f}" for k in RT.RESOURCES), "", "", end_section=True
        )
    console.print(t)
    near, sp = res["distance"], res["rmc3_speedup"]
    big = [f"{r['model']} {r['unit']}" for r in res["rows"] if r["overflows"]["XCVU9P"]]
    console.print("XCVU9P: " + (f"over for {', '.join(big)}" if big else "every design fits"))
    low = res["sized_for_xc7a200t"]
    console.print(
        "sized for XC7A200T (rule one with its BRAM): "
        + "; ".join(
            f"{m} fits as " + (", ".join(u for u, d in units.items() if not d["overflows"]) or "none")
            for m, units in low.items()
        )
    )
    console.print(
        f"distance to the seed: median cell {near['median_factor']:.2f}× off, "
        f"{near['cells_within_10pct']} of {near['cells']} within 10%"
    )
    console.print(f"RMC3 MLP-op ÷ MLP-naïve: {sp['ours']:.2f}× (seed {sp['paper']}×): {sp['why']}")
    console.print(f"verdict: {res['verdict']}: {res['why']}")


def _count(x: float) -> str:
    """A resource count: thousands separated, halves of a BRAM kept."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


@app.command()
def composition(
    models: Annotated[str, typer.Option(help="Comma list of Table III models.")] = "RMC1,RMC2,RMC3",
    samples: Annotated[
        int, typer.Option(help="Samples streamed through each chain (≥ 2 for an interval).", min=1, max=1000)
    ] = 3,
    ii: IIOpt = 8,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Fig. 9's inter-layer composition run in software on the searched designs (Table V's
    kernels): each layer's blocks stepped in its scan order on real values, a block waiting for the
    outputs it reads. One sample's latency and a stream's interval under the same scan pattern
    (Fig. 9a) and the alternating one (9b), beside eq. 1b/1c's sum and pair-max. Cycles of the
    schedule, not an FPGA. Record it: --out benches/results/recsys/fig9-composition.json."""
    from offload.recsys.fpga import TABLE_III
    from offload.recsys.fpga import compose as C

    names = [m.strip().upper() for m in models.split(",") if m.strip()]
    bad = [m for m in names if m not in TABLE_III]
    if bad or not names:
        raise fail(f"unknown model {', '.join(bad) or '(none)'}; one of {', '.join(TABLE_III)}")
    with failing(ValueError):
        res = C.report({m: TABLE_III[m] for m in names}, samples=samples, ii=ii)
    if emit(res, as_json, out):
        return
    t = Table(title=f"Fig. 9: two layers composed, cycles of the schedule (II = {ii}, {samples} samples)")
    for c in ("model", "chain", "same scan", "Σ layers", "alternating", "Σ pair max", "×", "interval"):
        t.add_column(c, justify="left" if c in ("model", "chain") else "right")
    for name, m in res["models"].items():
        for chain, c in m["chains"].items():
            runs, f = c["runs"], c["formulas"]
            ivs = {runs[p]["interval_cycles"] for p in runs}
            t.add_row(
                name,
                chain,
                f"{runs['same']['latency_cycles']:,}",
                f"{f['sum_of_layers']:,}",
                f"{runs['alternating']['latency_cycles']:,}",
                f"{f['sum_of_pair_max']:,}",
                f"{c['latency_same_over_alternating']:.2f}",
                " / ".join(f"{x:,}" for x in sorted(ivs, key=lambda v: v or 0) if x is not None) or "-",
            )
    console.print(t)
    for name, m in res["models"].items():
        layers = [x for c in m["chains"].values() for x in c["layers"]]
        console.print(f"{name} kernels: " + ", ".join(f"{x['name']} {x['kernel']}" for x in layers))
    console.print(
        "latency: one sample through the chain; interval: between samples of a stream (every layer "
        "has its own kernel, so both patterns run at the slowest layer's pace)"
    )


def _print_table_v(ours: dict[str, dict[str, str]], ii: int, composition: str) -> None:
    from offload.recsys import fpga as K

    t = Table(title=f"Table V: kernel sizes (II = {ii}, {composition}); paper in brackets where it differs")
    t.add_column("model")
    for c in K.TABLE_V_COLUMNS:
        t.add_column(c, justify="center")
    for name, row in ours.items():
        paper = K.PAPER_TABLE_V[name]
        t.add_row(
            name, *[row[c] if row[c] == paper[c] else f"{row[c]} [{paper[c]}]" for c in K.TABLE_V_COLUMNS]
        )
    console.print(t)


def _print_table_vi(designs: dict[str, Any]) -> None:
    t = Table(title="Table VI: resources of the MLP engine (ours)")
    for c in ("model", "unit", "LUT", "FF", "BRAM", "DSP", "overflows", "samples/s"):
        t.add_column(c, justify="right" if c not in ("model", "unit", "overflows") else "left")
    for name, rows in designs.items():
        for c in rows:
            r = c.resources
            over = "; ".join(f"{d}: {', '.join(x)}" for d, x in c.overflows.items() if x) or "fits both"
            t.add_row(
                name,
                c.unit,
                f"{r.lut:,}",
                f"{r.ff:,}",
                f"{r.bram:g}",
                f"{r.dsp:,}",
                over,
                f"{c.design.throughput:,.0f}",
            )
    console.print(t)


def _print_fig15(fig15: dict[str, Any]) -> None:
    from offload.recsys import fpga as K

    t = Table(title="The MLP-dominated models of Fig. 15: searched designs (cycles per batch)")
    for c in ("model", "N_batch", "flash", "L_e", "bot'", "top'", "samples/s", "bound by"):
        t.add_column(c, justify="left" if c in ("model", "bound by") else "right")
    for name, d in fig15.items():
        j = K.design_summary(d)
        c = j["cycles"]
        t.add_row(
            name,
            str(d.n_batch),
            *(f"{c[k]:,}" for k in ("flash", "L_e", "bottom", "top")),
            f"{d.throughput:,.0f}",
            j["bound_by"],
        )
    console.print(t)
    for name, d in fig15.items():
        console.print(f"  {name} kernels: " + ", ".join(f"{x.name} {x.label}" for x in d.layers))
