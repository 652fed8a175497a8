"""The RM-SSD benchmark behind BENCHMARKS.md, in one command: for each model (RMC1-3, NCF, WnD)
a model directory with SIZE of tables, one hotset trace, every strategy in `flash` mode (the seed's
Table II media) side by side; RMC1 also in `disk` mode (this machine's disk, for real); the
locality sweep of Fig. 14; fio at the device's block size and queue depth on the same table file,
beside the device reader's IOPS; and the paper's figures.

    python benches/recsys_bench.py --size 8G --dir build/recsys --out benches/results/recsys

Minutes to hours with 8 GB tables (the table files are written once and kept under --dir).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from offload import _native
from offload.recsys import bench as B
from offload.recsys import engine as E
from offload.recsys import plots as P
from offload.recsys import traces as T
from offload.recsys.cli import _size
from offload.recsys.models import SPECS

console = Console(stderr=True)


def model_dir(root: Path, name: str, size: int) -> E.ModelDir:
    d = root / f"{name}-{size >> 20}M"
    if (d / "manifest.json").exists():
        return E.ModelDir.open(d)
    console.print(f"creating {name}: {size / 2**30:.1f} GiB of tables in {d}")
    return E.create(d, SPECS[name], E.rows_for_bytes(SPECS[name], size), seed=0)


def trace_for(d: E.ModelDir, batches: int, batch_size: int) -> T.EmbeddingTrace:
    cfg = T.TraceConfig(
        rows=d.rows, batch_size=batch_size, lookups=d.spec.lookups, dense_width=d.spec.dense_width
    )
    return T.generate_trace(cfg, batches)


def calibrated_flash(ssd_s: dict[str, Any], qd1: dict[str, Any] | None) -> dict[str, float] | None:
    """Table II's model tuned to this machine as the seed tuned it to fio: T_page from fio's QD1
    4 KiB latency, and the host block path's rate from what one ssd-s miss cost here in disk mode
    (the whole pread through the kernel: its I/O stack and the disk)."""
    misses, secs = ssd_s["io"]["media_reads"], ssd_s["stages_s"]["emb_fs"]
    if not qd1 or not misses or not secs:
        return None
    return {"t_page_us": round(qd1["lat_mean_us"], 2), "host_iops_4k": round(misses / secs, 1)}


def run_all(
    d: E.ModelDir, tr: T.EmbeddingTrace, mode: str, depth: int, flash: dict[str, float] | None = None
) -> dict[str, Any]:
    """Every strategy over the trace, with a progress bar over all their batches."""
    cols = (TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console) as bar:
        task = bar.add_task(d.spec.name, total=len(tr) * len(E.STRATEGIES))
        return B.run(
            d,
            tr,
            list(E.STRATEGIES),
            mode,
            B.RunOptions(warmup=2, flash=flash, queue_depth=depth),
            progress=lambda s: bar.update(task, description=f"{d.spec.name} {mode} {s}"),
            on_batch=lambda: bar.advance(task),
        )


def lookups_sweep(d: E.ModelDir, lookups: list[int], batches: int, batch_size: int) -> list[dict[str, Any]]:
    """emb-vectorsum in flash mode with L lookups per table, one hotset trace per L."""
    out = []
    for n in lookups:
        cfg = T.TraceConfig(rows=d.rows, batch_size=batch_size, lookups=n, dense_width=d.spec.dense_width)
        r, _ = B.run_strategy(
            d, T.generate_trace(cfg, batches), "emb-vectorsum", "flash", B.RunOptions(warmup=2)
        )
        out.append({"lookups": n, "sls_us_per_inference": r["sls_s"] * 1e6 / r["samples"], "run": r})
    return out


def fio_iops(path: Path, block: int, depth: int, seconds: int) -> dict[str, Any] | None:
    """fio 4K/512 B random O_DIRECT reads through io_uring on one file: IOPS and mean latency."""
    if shutil.which("fio") is None:
        return None
    cmd = [
        "fio", "--name=r", f"--filename={path}", "--rw=randread", f"--bs={block}", "--direct=1",
        "--ioengine=io_uring", f"--iodepth={depth}", f"--runtime={seconds}", "--time_based",
        "--output-format=json", "--numjobs=1",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    job = json.loads(out.stdout)["jobs"][0]["read"]
    return {"block": block, "depth": depth, "iops": job["iops"], "lat_mean_us": job["lat_ns"]["mean"] / 1e3}


def reader_vs_fio(path: Path, block: int, depth: int, rounds: int, seconds: int) -> dict[str, Any] | None:
    """The device's io_uring reader (`uring::random_reads`, the code that serves disk mode) against
    fio on the same workload: uniform random `block` reads over `path` at `depth`. This disk is a
    shared, rate-limited virtual one whose IOPS swing several-fold within a minute, so the two
    alternate in ABBA order (fio, reader, reader, fio, ...); each reader run does as many reads as
    its neighbouring fio run did, and the figure is the median of the per-pair ratios."""
    if shutil.which("fio") is None:
        return None
    pairs = []
    for r in range(rounds):
        if r % 2 == 0:
            f = fio_iops(path, block, depth, seconds)
        reads = max(depth, int(f["iops"] * seconds))  # type: ignore[index]
        ours = _native.recsys_random_reads(str(path), block, depth, reads, seed=r + 1)
        if r % 2 == 1:
            f = fio_iops(path, block, depth, seconds)
        pairs.append({"fio_iops": f["iops"], "reader_iops": ours["iops"], "ratio": ours["iops"] / f["iops"]})  # type: ignore[index]
    ratios = sorted(p["ratio"] for p in pairs)
    return {
        "block": block,
        "depth": depth,
        "seconds": seconds,
        "pairs": pairs,
        "median_ratio": statistics.median(ratios),
        "fio_iops_median": statistics.median(p["fio_iops"] for p in pairs),
        "reader_iops_median": statistics.median(p["reader_iops"] for p in pairs),
        "registered": {"buffers": ours["fixed_buffers"], "files": ours["fixed_files"]},
    }


def device_iops(run: dict[str, Any]) -> float:
    """Reads per second of the device's io_uring reader in a disk-mode run (media reads over the
    time the device spent on them)."""
    io, st = run["io"], run["stages_s"]
    return io["media_reads"] / st["emb_ssd"] if st["emb_ssd"] else 0.0


PARTS = ("flash", "disk", "reader", "locality", "lookups")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="8G", help="tables per model (default 8G)")
    ap.add_argument(
        "--dir", type=Path, default=Path("build/recsys"), help="model directories (default build/recsys)"
    )
    ap.add_argument("--out", type=Path, default=Path("benches/results/recsys"), help="JSON and PNG here")
    ap.add_argument("--models", default="rmc1,rmc2,rmc3,ncf,wnd")
    ap.add_argument(
        "--parts",
        default=",".join(PARTS),
        help="which parts to run (default all): flash (every strategy per model), disk (the first model "
        "on this disk, fio beside it, the calibrated flash run), reader (the device reader against fio, "
        "ABBA rounds), locality (Fig. 14), lookups (Fig. 10b)",
    )
    ap.add_argument("--batches", type=int, default=12, help="batches per strategy (default 12, 2 warm-up)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--queue-depth", type=int, default=64)
    ap.add_argument("--fio-seconds", type=int, default=10)
    ap.add_argument("--reader-rounds", type=int, default=8, help="fio/reader pairs per block (default 8)")
    ap.add_argument("--reader-seconds", type=int, default=3, help="seconds per fio run in those pairs")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if parts - set(PARTS):
        ap.error(f"unknown parts {', '.join(sorted(parts - set(PARTS)))}; choose from {', '.join(PARTS)}")
    size = _size(a.size)
    a.out.mkdir(parents=True, exist_ok=True)
    models = a.models.split(",")
    first = model_dir(a.dir, models[0], size)
    if "flash" in parts:
        flash_runs(a, models, size)
    if "disk" in parts:
        disk_runs(a, first)
    if "reader" in parts:
        console.print(f"{first.spec.name}: the device reader against fio, {a.reader_rounds} pairs per block")
        path, qd = first.table_paths[0], a.queue_depth
        reader = {str(b): reader_vs_fio(path, b, qd, a.reader_rounds, a.reader_seconds) for b in (4096, 512)}
        (a.out / "reader-vs-fio.json").write_text(json.dumps(reader, indent=2))
    if "locality" in parts:
        console.print(f"{first.spec.name} locality sweep (Fig. 14)")
        loc = B.locality_sweep(
            first, [0, 0.3, 1, 2], "flash", B.RunOptions(warmup=2), batches=a.batches, batch_size=a.batch_size
        )
        (a.out / "locality.json").write_text(json.dumps(loc, indent=2))
        P.locality(loc["points"], a.out / "fig14-locality.png")
    if "lookups" in parts:
        console.print(f"{first.spec.name} emb-vectorsum against lookups per table (Fig. 10b)")
        sens = lookups_sweep(first, [10, 20, 40, 80, 120], a.batches, a.batch_size)
        (a.out / "lookups.json").write_text(json.dumps(sens, indent=2))
        P.lookups_sensitivity(sens, a.out / "fig10b-lookups.png")
    console.print(f"wrote {a.out}")


def flash_runs(a: argparse.Namespace, models: list[str], size: int) -> None:
    """Every strategy on each model in flash mode, then Figs. 12/13 and 15 from the runs."""
    benches: dict[str, dict[str, Any]] = {}
    for name in models:
        d = model_dir(a.dir, name, size)
        tr = trace_for(d, a.batches, a.batch_size)
        console.print(f"{name} flash: every strategy over {a.batches} × {a.batch_size}")
        b = run_all(d, tr, "flash", a.queue_depth)
        benches[name] = b
        (a.out / f"{name}-flash.json").write_text(json.dumps(b, indent=2))
        P.per_bench(b, a.out)
    dlrm = [benches[m] for m in ("rmc1", "rmc2", "rmc3") if m in benches]
    mlp = [benches[m] for m in ("ncf", "wnd") if m in benches]
    if dlrm:
        P.end_to_end(dlrm, a.out / "fig12-13-dlrm.png", "Throughput and latency, DLRM RMC1-3 (Figs. 12/13)")
    if mlp:
        P.end_to_end(mlp, a.out / "fig15-ncf-wnd.png", "MLP-dominated models (Fig. 15)")
    json.dump({m: b["vs_ssd_s"] for m, b in benches.items()}, sys.stdout, indent=2)


def disk_runs(a: argparse.Namespace, d: E.ModelDir) -> None:
    """Every strategy on this machine's disk with fio beside the device reads, then the flash model
    calibrated to this disk."""
    name = d.spec.name
    console.print(f"{name} disk: every strategy, this machine's disk")
    disk = run_all(d, trace_for(d, a.batches, a.batch_size), "disk", a.queue_depth)
    fio = {
        "emb-pagesum": fio_iops(d.table_paths[0], 4096, a.queue_depth, a.fio_seconds),
        "emb-vectorsum": fio_iops(d.table_paths[0], 512, a.queue_depth, a.fio_seconds),
    }
    disk["fio"] = {
        s: (
            f
            | {
                "device_iops": device_iops(disk["strategies"][s]),
                "ratio": device_iops(disk["strategies"][s]) / f["iops"],
            }
        )
        if f
        else None
        for s, f in fio.items()
    }
    qd1 = fio_iops(d.table_paths[0], 4096, 1, a.fio_seconds)
    disk["fio"]["qd1_4k"] = qd1
    (a.out / f"{name}-disk.json").write_text(json.dumps(disk, indent=2))
    P.per_bench(disk, a.out)
    cal = calibrated_flash(disk["strategies"]["ssd-s"], qd1)
    if cal:
        console.print(f"{name} flash, calibrated to this disk: {cal}")
        b = run_all(d, trace_for(d, a.batches, a.batch_size), "flash", a.queue_depth, flash=cal)
        b["calibration"] = {"from": "fio QD1 4K latency (t_page_us), ssd-s disk-mode seconds per miss (host)"}
        (a.out / f"{name}-flash-calibrated.json").write_text(json.dumps(b, indent=2))


if __name__ == "__main__":
    main()
