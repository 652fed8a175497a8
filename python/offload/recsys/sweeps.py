"""Sweeps over one knob with the bench's strategies (`bench.run`): Figs. 12/13 by batch size, and
the `dram` baseline of Fig. 15 by table size and page size. `benches/recsys_batch.py` and
`benches/recsys_dram.py` run them and draw them (`plots.py`).

Batch size (Figs. 12/13). The seed: "for embedding-dominated models RMC1 and RMC2, the throughput
almost keeps the same value ... for MLP-dominated RMC3, the throughput increases linearly with
the batch size, from 1 to 4", then stays at the embedding layer's pace. In `flash` mode rm-ssd's
device MLP takes the cycles of one fixed design — Table V's, the kernel search's — run at each
batch as eq. 1 charges it: each MLP stage once per batch (its weights read once for the batch),
the flash reads per sample (:func:`device_mlp_at`). The other strategies run their MLPs on this
host, measured.

`dram` (Fig. 15: "RM-SSD even beats the all-DRAM version on NCF and WnD"). Random lookups into
tables held in process memory pay the TLB and, in a VM, the nested page walk; the 8 GiB runs of
BENCHMARKS.md swung several-fold between runs. :func:`dram_probe` measures `dram` with the
lookup stage apart, the page faults taken while it runs, and how much of its memory sits on huge
pages (THP: `glibc.malloc.hugetlb=1` makes malloc ask for them where THP is `madvise`).
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from offload.recsys import bench as B
from offload.recsys import engine as E
from offload.recsys import traces as T
from offload.recsys.models import SPECS

BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
BATCH_STRATEGIES: tuple[str, ...] = ("dram", "ssd-s", "emb-vectorsum", "recssd", "rm-ssd")
PAPER_BATCH_SHAPE = {
    "rmc1": "flat (embedding-bound)",
    "rmc2": "flat (embedding-bound)",
    "rmc3": "rises linearly from batch 1 to 4 (MLP-bound), then flat (embedding-bound)",
}
"""§VI-C on RM-SSD's throughput by batch size (Figs. 12/13)."""
SATURATION = 0.9
"""A strategy has saturated at the smallest batch whose throughput is this share of its best."""


def model_dir(root: Path, name: str, size: int, seed: int = 0) -> E.ModelDir:
    """The model directory ``root/{name}-{MiB}M`` with ``size`` bytes of tables, made if missing."""
    d = root / f"{name}-{size >> 20}M"
    if (d / "manifest.json").exists():
        return E.ModelDir.open(d)
    return E.create(d, SPECS[name], E.rows_for_bytes(SPECS[name], size), seed=seed)


def device_mlp_at(spec: Any, n_batch: int, composition: str = "sum") -> dict[str, Any]:
    """rm-ssd's device MLP at a batch of ``n_batch`` on the kernel search's design (fixed: Table
    V's kernels): eq. 1's stage cycles for the batch, per sample for the engine (bottom′, L_e,
    top′), and the samples/s eq. 1 gives (the slowest of emb′, bot′, top′ per batch)."""
    from offload.recsys import fpga as K

    shape = E.kernel_shape(spec)
    d = K.search(shape, composition=composition)  # type: ignore[arg-type]
    at = K.evaluate(shape, d.kernels, n_batch=n_batch, ii=d.ii, composition=composition)  # type: ignore[arg-type]
    stages = (at.t_bot, at.kernel("L_e").cycles, at.t_top)
    return {
        "design_n_batch": d.n_batch,
        "cycles_per_batch": {"flash": at.t_flash, "L_e": stages[1], "bottom": at.t_bot, "top": at.t_top},
        "per_sample": tuple(math.ceil(c / n_batch) for c in stages),
        "eq1_samples_per_s": at.throughput,
        "bound_by": max(
            {"flash": at.t_flash, "L_e": stages[1], "bottom": at.t_bot, "top": at.t_top}.items(),
            key=lambda kv: kv[1],
        )[0],
    }


def _slim(run: dict[str, Any]) -> dict[str, Any]:
    """What a sweep keeps of a strategy's run: pace, latency, stages, hit rates, the answers' check."""
    io = run["io"]
    looked = io.get("cache_hits", 0) + io.get("cache_misses", 0)
    keep = ("samples", "batches", "throughput_per_s", "latency_s", "stages_s", "sls_s",
            "traffic_bytes_per_sample", "host_cache_hit_rate", "max_abs_diff_vs_first")  # fmt: skip
    return {k: run.get(k) for k in keep} | {
        "cache_hit_rate": io.get("cache_hits", 0) / looked if looked else None,
        "lookups": io.get("lookups", 0),
    }


def batch_sweep(
    model_dir: E.ModelDir,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    strategies: Sequence[str] = BATCH_STRATEGIES,
    *,
    samples: int = 128,
    warmup: int = 2,
    min_batches: int = 3,
    mode: str = "flash",
    device: str = "process",
    composition: str = "sum",
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Every strategy at each batch size over a hotset trace of at least ``samples`` recorded
    samples (and ``min_batches`` recorded batches) after ``warmup`` batches; rm-ssd's device MLP
    as :func:`device_mlp_at` gives it (flash mode). Per batch size: the strategies' runs (`bench.run`,
    answers checked against the first), and rm-ssd's eq. 1 figure; per strategy, the shape."""
    if not batch_sizes or min(batch_sizes) < 1 or samples < 1:
        raise ValueError("batch sizes and samples must be positive")
    spec = model_dir.spec
    points = []
    for n in batch_sizes:
        batches = warmup + max(min_batches, math.ceil(samples / n))
        cfg = T.TraceConfig(
            rows=model_dir.rows, batch_size=n, lookups=spec.lookups, dense_width=spec.dense_width
        )
        mlp = device_mlp_at(spec, n, composition) if mode == "flash" else None
        opts = B.RunOptions(
            warmup=warmup, device=device, device_mlp_cycles=mlp["per_sample"] if mlp else None
        )
        res = B.run(
            model_dir,
            T.generate_trace(cfg, batches),
            list(strategies),
            mode,
            opts,
            progress=(lambda s, n=n: progress(f"batch {n} {s}")) if progress else None,
            on_batch=on_batch,
        )
        points.append(
            {
                "batch_size": n,
                "batches": batches,
                "strategies": {s: _slim(r) for s, r in res["strategies"].items()},
            }
            | ({"rm_ssd_eq1": mlp | {"per_sample": list(mlp["per_sample"])}} if mlp else {})
        )
    return B._header("offload.recsys.batch_sweep", model_dir) | {
        "mode": mode,
        "warmup_batches": warmup,
        "samples_per_point": samples,
        "composition": composition,
        "strategies": list(strategies),
        "paper_shape": PAPER_BATCH_SHAPE.get(spec.name),
        "points": points,
        "shape": {s: batch_shape(points, s) for s in strategies},
    }


def batch_shape(points: Sequence[dict[str, Any]], strategy: str) -> dict[str, Any]:
    """A strategy's throughput against batch size: at each batch, ÷ its value at the smallest
    batch (``rise``), and the smallest batch reaching :data:`SATURATION` of its best."""
    xs = [p["batch_size"] for p in points]
    tp = [p["strategies"][strategy]["throughput_per_s"] or 0.0 for p in points]
    best = max(tp) if tp else 0.0
    sat = next((x for x, t in zip(xs, tp, strict=True) if best and t >= SATURATION * best), None)
    return {
        "batch_sizes": xs,
        "throughput_per_s": tp,
        "rise": [t / tp[0] if tp[0] else None for t in tp],
        "best_over_first": best / tp[0] if tp and tp[0] else None,
        "saturates_at": sat,
    }


# ---------------------------------------------------------------- dram: tables in process memory


def thp_mode() -> dict[str, str | None]:
    """Transparent huge pages on this machine: the selected `enabled` and `defrag` settings."""
    out: dict[str, str | None] = {}
    for key in ("enabled", "defrag"):
        try:
            text = Path(f"/sys/kernel/mm/transparent_hugepage/{key}").read_text()
            out[key] = text[text.index("[") + 1 : text.index("]")]
        except (OSError, ValueError):
            out[key] = None
    return out


def anon_huge_bytes() -> int | None:
    """Bytes of this process's anonymous memory on transparent huge pages (smaps_rollup)."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def dram_probe(
    model_dir: E.ModelDir, trace: T.EmbeddingTrace, repeats: int = 3, warmup: int = 2
) -> dict[str, Any]:
    """`dram` over the trace ``repeats`` times, each with the tables loaded afresh: throughput
    (samples over the recorded batches' time), the lookup stage per lookup (emb-op: the sums over
    process memory) apart from the MLPs, the page faults taken while the batches ran (minor and
    major, getrusage) and the process's bytes on huge pages once the tables are in."""
    if repeats < 1 or len(trace) <= warmup:
        raise ValueError(f"need repeats >= 1 and more than {warmup} batches")
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with E.Engine(model_dir, "dram", "flash", device="in-process") as eng:
            load_s = time.perf_counter() - t0
            huge = anon_huge_bytes()
            before = resource.getrusage(resource.RUSAGE_SELF)
            busy = emb = mlp = 0.0
            samples = lookups = 0
            for i, b in enumerate(trace):
                _, info = eng.infer(b.dense, b.offsets, b.indices)
                if i < warmup:
                    continue
                st = info["stages"]
                busy += info["interval_s"]
                emb += st["emb_op"]
                mlp += st["bot_mlp"] + st["concat"] + st["top_mlp"]
                samples += b.batch_size
                lookups += int(info["io"].get("lookups", 0))
            after = resource.getrusage(resource.RUSAGE_SELF)
        runs.append(
            {
                "throughput_per_s": samples / busy if busy else None,
                "lookup_ns": emb * 1e9 / max(1, lookups),
                "mlp_us_per_sample": mlp * 1e6 / max(1, samples),
                "load_s": load_s,
                "anon_huge_bytes": huge,
                "faults": {
                    "minor": after.ru_minflt - before.ru_minflt,
                    "major": after.ru_majflt - before.ru_majflt,
                },
            }
        )
    tps = sorted(r["throughput_per_s"] or 0.0 for r in runs)
    return {
        "table_bytes": model_dir.table_bytes,
        "samples_per_run": samples,
        "runs": runs,
        "throughput_median": tps[len(tps) // 2],
        "throughput_spread": tps[-1] / tps[0] if tps[0] else None,
        "lookup_ns_median": sorted(r["lookup_ns"] for r in runs)[len(runs) // 2],
    }


QUIET_LOOKUP = 4.0
QUIET_MLP = 1.5
"""A dram run is quiet (not slowed) when its lookups take at most QUIET_LOOKUP × and its MLPs at
most QUIET_MLP × the least this model's runs took. A lookup beyond the fastest pays a cache miss
and a page walk or two (up to a few hundred ns); one slowed by the VM's paging takes microseconds.
Slower MLPs are other work on the machine's CPUs."""


def dram_verdict(entry: dict[str, Any]) -> dict[str, Any]:
    """Does rm-ssd beat dram where dram is not slowed? ``entry``: ``rm_ssd.throughput_per_s`` and
    ``dram``, a list of :func:`dram_probe` results with ``pages``. Each run is quiet or slowed
    (:data:`QUIET_LOOKUP`, :data:`QUIET_MLP`, against the model's fastest lookups and MLPs); the
    comparison is rm-ssd against the best quiet dram run of each table and page size."""
    rm = entry["rm_ssd"]["throughput_per_s"]
    runs = [(c["table_bytes"], c["pages"], r) for c in entry["dram"] for r in c["runs"]]
    fast_lookup = min(r["lookup_ns"] for _, _, r in runs)
    fast_mlp = min(r["mlp_us_per_sample"] for _, _, r in runs)

    def quiet(r: dict[str, Any]) -> bool:
        return r["lookup_ns"] <= QUIET_LOOKUP * fast_lookup and r["mlp_us_per_sample"] <= QUIET_MLP * fast_mlp

    configs: dict[str, Any] = {}
    for size, pages, r in runs:
        empty = {"runs": 0, "quiet": 0, "best_quiet": None, "slow_lookups": 0, "guest_faults": 0}
        c = configs.setdefault(f"{size >> 20} MiB, {pages} pages", empty)
        c["runs"] += 1
        c["guest_faults"] += r["faults"]["minor"] + r["faults"]["major"]
        c["slow_lookups"] += r["lookup_ns"] > QUIET_LOOKUP * fast_lookup
        if quiet(r):
            c["quiet"] += 1
            c["best_quiet"] = max(c["best_quiet"] or 0.0, r["throughput_per_s"])
    for c in configs.values():
        c["rm_ssd_over_dram"] = rm / c["best_quiet"] if c["best_quiet"] else None
    ratios = [c["rm_ssd_over_dram"] for c in configs.values() if c["rm_ssd_over_dram"]]
    beats = all(x > 1 for x in ratios) if ratios else None
    best = max((c["best_quiet"] for c in configs.values() if c["best_quiet"]), default=None)
    word = {True: "beats", False: "does not beat", None: "cannot be compared with"}[beats]
    return {
        "fastest_lookup_ns": fast_lookup,
        "fastest_mlp_us_per_sample": fast_mlp,
        "configs": configs,
        "best_quiet_dram": best,
        "rm_ssd_over_best_quiet_dram": rm / best if best else None,
        "runs": len(runs),
        "slow_lookup_runs": sum(c["slow_lookups"] for c in configs.values()),
        "slowest_lookup_ns": max(r["lookup_ns"] for _, _, r in runs),
        "guest_faults_during_runs": sum(c["guest_faults"] for c in configs.values()),
        "rm_ssd_beats_quiet_dram": beats,
        "text": f"rm-ssd ({rm:,.0f}/s) {word} dram where it is not slowed: rm-ssd ÷ the best quiet dram run "
        + ", ".join(f"{k} {v['rm_ssd_over_dram']:.2f}×" for k, v in configs.items() if v["rm_ssd_over_dram"]),
    }


def trace_for(model_dir: E.ModelDir, batches: int, batch_size: int) -> T.EmbeddingTrace:
    """The bench's hotset trace for a model directory."""
    spec = model_dir.spec
    cfg = T.TraceConfig(
        rows=model_dir.rows, batch_size=batch_size, lookups=spec.lookups, dense_width=spec.dense_width
    )
    return T.generate_trace(cfg, batches)


__all__ = [
    "BATCH_SIZES",
    "BATCH_STRATEGIES",
    "PAPER_BATCH_SHAPE",
    "anon_huge_bytes",
    "batch_shape",
    "batch_sweep",
    "device_mlp_at",
    "dram_probe",
    "dram_verdict",
    "model_dir",
    "thp_mode",
    "trace_for",
]
