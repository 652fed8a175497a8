"""`offload recsys bench`: every strategy over one model directory and one trace, side by side in
one run, in one timing mode. Writes JSON with throughput, latency percentiles, the per-stage
breakdown of the seed's Fig. 2, I/O bytes, read amplification, the traffic reduction of Table IV
and the predictions' agreement with the `dram` strategy; `plots.py` draws the paper's figures.

Steady state as the seed measures it: the first `warmup` batches of each strategy run but are not
recorded (they fill the page cache of ssd-s / ssd-m and RecSSD's host cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload import __version__
from offload.host.machine import machine
from offload.recsys import engine as E
from offload.recsys import memlimit
from offload.recsys import traces as T

# Fig. 2's stages (seconds), plus the host link.
STAGES = ("bot_mlp", "emb_ssd", "emb_fs", "emb_op", "concat", "top_mlp", "link")
# The SparseLengthSum operator's share of the stages (Fig. 10 times the SLS alone).
SLS_STAGES = ("emb_ssd", "emb_fs", "emb_op", "link")

# The seed's Table IV: I/O traffic reduction vs SSD-S (RecSSD, EMB-VectorSum, RM-SSD).
PAPER_TABLE_IV = {
    "rmc1": {"recssd": 1989, "emb-vectorsum": 1989, "rm-ssd": 31826},
    "rmc2": {"recssd": 1071, "emb-vectorsum": 1071, "rm-ssd": 137142},
    "rmc3": {"recssd": 546, "emb-vectorsum": 546, "rm-ssd": 10914},
}
# The seed's headline ratios against SSD-S (§VI): SLS 16× for EMB-VectorSum (Fig. 10), RM-SSD up
# to 36× throughput (Figs. 12/13), about 100× on NCF and WnD (Fig. 15).
PAPER_SPEEDUPS = {"sls_vectorsum_vs_ssd_s": 16.0, "rm_ssd_vs_ssd_s_max": 36.0, "mlp_models_vs_ssd_s": 100.0}


def traffic_bytes(io: dict[str, int]) -> int:
    """Bytes between the host and the storage device: the link counter where the strategy talks
    to a device, else the pages the kernel read for it (ssd-s / ssd-m)."""
    return int(io.get("link_bytes", 0) or io.get("media_bytes", 0))


# Share of the tables' bytes the host keeps in DRAM, for the page-cache strategies.
DRAM_SHARE = {"ssd-s": 0.25, "ssd-m": 0.5}
# Warm-up traffic for a modelled page cache: rounds of this many lookups per table, at most
# FILL_LIMIT × its capacity in all.
FILL_CHUNK = 1 << 16
FILL_LIMIT = 8


@dataclass(frozen=True)
class RunOptions:
    """How each strategy runs: `warmup` first batches unrecorded; `flash` Table II parameters;
    the device reader's queue depth; RecSSD's host cache in vectors; `device` "process" (the
    in-storage device in its own process behind shared memory) or "in-process";
    `device_mlp_cycles` rm-ssd's device MLP in flash mode, cycles per sample (bottom′, L_e, top′;
    default: the kernel search's design at its own batch, `engine.kernel_design_cycles`)."""

    warmup: int = 1
    flash: dict[str, Any] | None = None
    queue_depth: int = 64
    host_cache_vectors: int = 8192
    device: str = "process"
    device_mlp_cycles: tuple[int, int, int] | None = None


def run_strategy(
    model_dir: E.ModelDir,
    trace: T.EmbeddingTrace,
    strategy: str,
    mode: str,
    opts: RunOptions = RunOptions(),
    on_batch: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], np.ndarray]:
    """One strategy over every batch of the trace: (summary, predictions of the recorded batches).
    In `disk` mode ssd-s / ssd-m run inside a memory cgroup of their DRAM share (memlimit.py);
    the summary's `dram_limit` says how the budget was held, or why it was not."""
    share = DRAM_SHARE.get(strategy)
    if mode != "disk" or share is None:
        return _run_batches(model_dir, trace, strategy, mode, opts, on_batch)
    with memlimit.page_cache_budget(int(share * model_dir.table_bytes)) as limit:
        summary, preds = _run_batches(model_dir, trace, strategy, mode, opts, on_batch)
    summary["dram_limit"] = limit
    return summary, preds


def fill_page_cache(eng: E.Engine, config: T.TraceConfig | None, tables: int) -> dict[str, int] | None:
    """Steady state for the modelled page cache (flash mode, ssd-s / ssd-m): fresh lookups of the
    trace's distribution go through it, unread and untimed, until it is full (or FILL_LIMIT × its
    capacity lookups went in). None where there is no such cache or no config to draw from."""
    held, cap = eng.warm_page_cache(0, np.zeros(0, np.int64))
    if cap == 0 or config is None:
        return None
    lookups, stream = 0, 1
    while held < cap and lookups < FILL_LIMIT * cap:
        for t in range(tables):
            rows = T.more_lookups(config, t, FILL_CHUNK, stream=stream)
            held, cap = eng.warm_page_cache(t, rows)
            lookups += len(rows)
        stream += 1
    return {"lookups": lookups, "pages_held": held, "capacity": cap}


def _run_batches(
    model_dir: E.ModelDir,
    trace: T.EmbeddingTrace,
    strategy: str,
    mode: str,
    opts: RunOptions,
    on_batch: Callable[[], None] | None,
) -> tuple[dict[str, Any], np.ndarray]:
    with E.Engine(
        model_dir,
        strategy,
        mode,
        flash=opts.flash,
        queue_depth=opts.queue_depth,
        host_cache_vectors=opts.host_cache_vectors,
        device_mlp_cycles=opts.device_mlp_cycles or (0, 0, 0),
        device=opts.device,
    ) as eng:
        fill = fill_page_cache(eng, trace.config, model_dir.spec.tables)
        device = eng.device_info
        batches = list(trace)
        warmup = min(opts.warmup, max(0, len(batches) - 1))
        stages = dict.fromkeys(STAGES, 0.0)
        io: dict[str, int] = {}
        latencies, intervals, preds = [], [], []
        wall0 = time.perf_counter()
        for i, (p, info) in enumerate(_outcomes(eng, batches)):
            if on_batch:
                on_batch()
            if i < warmup:
                continue
            preds.append(p)
            latencies.append(info["latency_s"])
            intervals.append(info["interval_s"])
            for k in STAGES:
                stages[k] += info["stages"][k]
            for k, v in info["io"].items():
                io[k] = io.get(k, 0) + int(v)
        wall = time.perf_counter() - wall0
    summary, all_preds = _summary(strategy, stages, io, latencies, intervals, preds, wall)
    summary["page_cache_fill"] = fill
    summary["device"] = {k: v for k, v in device.items() if k != "command"}
    return summary, all_preds


def _outcomes(eng: E.Engine, batches: list[T.Batch]) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
    """Each batch's (predictions, info) in order. rm-ssd as the seed runs it: the next batch's
    inputs go to the device (`RM_send_inputs`) before this one's outputs are read."""
    if eng.strategy != "rm-ssd":
        for b in batches:
            yield eng.infer(b.dense, b.offsets, b.indices)
        return
    for i, b in enumerate(batches):
        eng.send_inputs(b.dense, b.offsets, b.indices)
        if i > 0:
            yield eng.read_outputs()
    if batches:
        yield eng.read_outputs()


def _summary(
    strategy: str,
    stages: dict[str, float],
    io: dict[str, int],
    latencies: list[float],
    intervals: list[float],
    preds: list[np.ndarray],
    wall: float,
) -> tuple[dict[str, Any], np.ndarray]:
    samples = int(sum(len(p) for p in preds))
    busy = float(sum(intervals))
    lat = np.array(latencies) if latencies else np.zeros(1)
    looked = io.get("cache_hits", 0) + io.get("cache_misses", 0)
    summary = {
        "strategy": strategy,
        "samples": samples,
        "batches": len(latencies),
        "throughput_per_s": samples / busy if busy > 0 else None,
        "latency_s": {
            "p50": float(np.percentile(lat, 50)),
            "p99": float(np.percentile(lat, 99)),
            "mean": float(lat.mean()),
        },
        "stages_s": stages,
        "sls_s": sum(stages[k] for k in SLS_STAGES) if strategy != "rm-ssd" else None,
        "io": io,
        "traffic_bytes": traffic_bytes(io),
        "traffic_bytes_per_sample": traffic_bytes(io) / samples if samples else 0.0,
        "read_amplification": io.get("media_bytes", 0) / max(1, io.get("useful_bytes", 0)),
        "host_cache_hit_rate": io.get("cache_hits", 0) / looked if looked else None,
        "wall_s": wall,
    }
    return summary, np.concatenate(preds) if preds else np.zeros(0, np.float32)


def _header(kind: str, model_dir: E.ModelDir) -> dict[str, Any]:
    """What every result file starts with: what it is, when, on what, for which tables."""
    return {
        "kind": kind,
        "version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "model": model_dir.spec.name,
        "table_bytes": model_dir.table_bytes,
    }


def compare(runs: dict[str, dict[str, Any]], base: str = "ssd-s") -> dict[str, dict[str, float | None]]:
    """Per strategy: throughput, latency, SLS time and traffic against `base` (× better)."""
    if base not in runs:
        return {}
    b = runs[base]
    out: dict[str, dict[str, float | None]] = {}
    for name, r in runs.items():
        tp, btp = r["throughput_per_s"], b["throughput_per_s"]
        out[name] = {
            "throughput_x": tp / btp if tp and btp else None,
            "latency_p50_reduction": 1 - r["latency_s"]["p50"] / b["latency_s"]["p50"]
            if b["latency_s"]["p50"]
            else None,
            "sls_x": b["sls_s"] / r["sls_s"] if r.get("sls_s") and b.get("sls_s") else None,
            "traffic_reduction_x": b["traffic_bytes"] / r["traffic_bytes"] if r["traffic_bytes"] else None,
        }
    return out


class BenchFailed(RuntimeError):
    """A strategy failed part-way: `result` holds the strategies measured before it and the
    failure (`complete: false`, `failure: {strategy, error}`)."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result

    def saying_what_was_kept(self, out: Path | None) -> str:
        """The failure, and where the strategies measured before it were saved (if they were)."""
        done = len(self.result["strategies"])
        what = (
            "the strategy measured before it is"
            if done == 1
            else f"the {done} strategies measured before it are"
        )
        return f"{self}; {what} in {out}" if out else str(self)


def trace_of(model_dir: E.ModelDir, path: Path | None, batches: int, batch_size: int) -> T.EmbeddingTrace:
    """The trace a bench runs: the file at ``path`` (checked against the model's rows), or a
    hotset trace of ``batches`` x ``batch_size`` made for the model."""
    if path is not None:
        return T.load_trace(path, rows=model_dir.rows)
    cfg = T.TraceConfig(
        rows=model_dir.rows,
        batch_size=batch_size,
        lookups=model_dir.spec.lookups,
        dense_width=model_dir.spec.dense_width,
    )
    return T.generate_trace(cfg, batches)


def run(
    model_dir: E.ModelDir,
    trace: T.EmbeddingTrace,
    strategies: Sequence[str],
    mode: str,
    opts: RunOptions = RunOptions(),
    *,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[], None] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every strategy in `strategies` over the same trace, one after the other, in one process.
    `on_result(result so far)` is called after each strategy (and on a failure) so that a long
    bench keeps what it measured; a strategy that fails raises `BenchFailed` carrying that."""
    for s in strategies:
        if s not in E.STRATEGIES:
            raise ValueError(f"unknown strategy {s!r}; one of {', '.join(E.STRATEGIES)}")
    runs: dict[str, dict[str, Any]] = {}
    reference: np.ndarray | None = None
    for s in strategies:
        if progress:
            progress(s)
        try:
            summary, preds = run_strategy(model_dir, trace, s, mode, opts, on_batch)
        except (E.RecsysError, ValueError, OSError) as e:
            res = _result(model_dir, trace, strategies, mode, opts, runs, {"strategy": s, "error": str(e)})
            if on_result:
                on_result(res)
            raise BenchFailed(f"{s}: {e}", res) from e
        if reference is None:
            reference = preds
        summary["max_abs_diff_vs_first"] = float(np.max(np.abs(preds - reference))) if preds.size else 0.0
        runs[s] = summary
        if on_result:
            on_result(_result(model_dir, trace, strategies, mode, opts, runs))
    return _result(model_dir, trace, strategies, mode, opts, runs)


def _result(
    model_dir: E.ModelDir,
    trace: T.EmbeddingTrace,
    strategies: Sequence[str],
    mode: str,
    opts: RunOptions,
    runs: dict[str, dict[str, Any]],
    failure: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The bench's JSON for the strategies measured so far (`complete` once all are)."""
    spec = model_dir.spec
    return _header("offload.recsys.bench", model_dir) | {
        "model_dir": str(model_dir.path),
        "rows_per_table": model_dir.rows,
        "weights": model_dir.weights_status,
        "trace": {"batches": len(trace), "batch_size": trace.batches[0].batch_size if len(trace) else 0}
        | (trace.config.to_dict() if trace.config else {}),
        "mode": mode,
        "flash": opts.flash,
        "warmup_batches": opts.warmup,
        "options": asdict(opts),
        "reference_strategy": strategies[0] if strategies else None,
        "complete": failure is None and len(runs) == len(strategies),
        "failure": failure,
        "strategies": dict(runs),
        "vs_ssd_s": compare(runs),
        "paper": {"table_iv": PAPER_TABLE_IV.get(spec.name), "speedups": PAPER_SPEEDUPS},
    }


# The seed's Fig. 14 caption: RecSSD's host-cache hit rate for each locality knob K.
PAPER_LOCALITY_HIT_RATES = {0.0: 0.80, 0.3: 0.65, 1.0: 0.45, 2.0: 0.30}


def locality_sweep(
    model_dir: E.ModelDir,
    ks: Sequence[float],
    mode: str,
    opts: RunOptions = RunOptions(),
    *,
    batches: int = 8,
    batch_size: int = 16,
    seed: int = 0,
    on_batch: Callable[[], None] | None = None,
    constants: str = "fitted",
) -> dict[str, Any]:
    """Fig. 14: RecSSD and RM-SSD on RecSSD-style traces with locality knob K, each K one trace.
    `constants`: the trace's locality constants, "fitted" (to RM-SSD's hit rates; the default)
    or "recssd" (RecSSD's own generator's): `T.LOCALITY_CONSTANTS`."""
    if constants not in T.LOCALITY_CONSTANTS:
        raise ValueError(f"unknown constants {constants!r}; one of {', '.join(T.LOCALITY_CONSTANTS)}")
    spec = model_dir.spec
    points = []
    for k in ks:
        cfg = T.TraceConfig(
            rows=model_dir.rows,
            batch_size=batch_size,
            lookups=spec.lookups,
            dense_width=spec.dense_width,
            seed=seed,
            kind="recssd",
            recssd_k=float(k),
            **T.LOCALITY_CONSTANTS[constants],  # type: ignore[arg-type]
        )
        trace = T.generate_trace(cfg, batches)
        per_table = max(1, opts.host_cache_vectors // spec.tables)
        point: dict[str, Any] = {
            "k": float(k),
            "paper_hit_rate": PAPER_LOCALITY_HIT_RATES.get(float(k)),
            # the trace's own locality: an exact LRU of the same size per lookup, as the seed's
            # Fig. 14 states it; the host cache below is updated once per batch (misses in
            # flight are not yet cached), so repeats within a batch are misses there
            "trace_lru_hit_rate": T.lru_hit_rate(T.table_streams(trace), per_table),
        }
        for s in ("recssd", "rm-ssd"):
            point[s], _ = run_strategy(model_dir, trace, s, mode, opts, on_batch)
        points.append(point)
    return _header("offload.recsys.locality", model_dir) | {
        "mode": mode,
        "options": asdict(opts),
        "batches": batches,
        "batch_size": batch_size,
        "constants": {"label": constants, "why": T.LOCALITY_CONSTANTS_WHY[constants]}
        | T.LOCALITY_CONSTANTS[constants]
        | {"hit_rate_formula": [_lru_hit_formula(constants, float(k)) for k in ks]},
        "points": points,
    }


def _lru_hit_formula(constants: str, k: float) -> float:
    """What the constants give an LRU of at least D entries per table: (1 - b) / (1 + c K)."""
    c = T.LOCALITY_CONSTANTS[constants]
    return (1.0 - c["recssd_base_new"]) / (1.0 + c["recssd_k_scale"] * k)
