"""Benchmarks of the rule engine: throughput per matcher, thread count and batch size, the cost
of encoding raw values, compile time and memory. Timing loops run in Rust; this module only
chooses what to run and writes JSON.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload import __version__, _native
from offload.files import save_figure
from offload.host.machine import machine
from offload.rules import DEVICE_MATCHERS, CompiledRules, RuleSet

# One timed pass of a configuration takes roughly this many seconds (see _queries_for).
TARGET_SECONDS = 0.25


def rate(qps: float) -> str:
    """A throughput for people: 12.3 M/s, 45.6 k/s, 789 /s."""
    if qps >= 1e6:
        return f"{qps / 1e6:.2f} M/s"
    if qps >= 1e3:
        return f"{qps / 1e3:.1f} k/s"
    return f"{qps:.0f} /s"


def plot(result: dict[str, Any], path: Path) -> Path:
    """Throughput against batch size, one line per matcher and thread count (log-log)."""
    from offload.host.plots import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    batches = sorted({r["batch"] for m in result["matchers"].values() for r in m["runs"]})
    if len(batches) == 1:  # one batch size: bars by matcher and threads, not one point on a log axis
        bars = [(f"{name}\n{r['threads']} thr", r["queries_per_s"]) for name, m in result["matchers"].items()
                for r in sorted(m["runs"], key=lambda r: r["threads"])]  # fmt: skip
        ax.bar([b[0] for b in bars], [b[1] for b in bars], color=[f"C{i % 10}" for i in range(len(bars))])
        ax.set_xlabel(f"matcher and threads (batch of {batches[0]:,} queries per call)")
    for name, m in result["matchers"].items() if len(batches) > 1 else ():
        for th in sorted({r["threads"] for r in m["runs"]}):
            runs = sorted((r for r in m["runs"] if r["threads"] == th), key=lambda r: r["batch"])
            ax.plot(
                [r["batch"] for r in runs],
                [r["queries_per_s"] for r in runs],
                marker="o",
                linestyle="-" if th == 1 else "--",
                label=f"{name}, {th} thread{'s' if th > 1 else ''}",
            )
    if len(batches) > 1:
        ax.set_xscale("log")
        ax.set_xlabel("batch size (queries per call)")
    ax.set_yscale("log")
    ax.set_ylabel("queries / s (pre-encoded)")
    ax.set_title(f"{result['rules']:,} rules, {result['queries']:,} queries — {result['machine']['cpu']}")
    ax.grid(True, which="both", alpha=0.3)
    if len(batches) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, format="png")
    return path


ENCODE_QUERIES = 200_000
"""About how many queries the encoding is timed on."""


def _queries_for(engine: CompiledRules, codes: np.ndarray) -> np.ndarray:
    """The queries to time: a pass should take about TARGET_SECONDS, long enough that thread
    start-up and timer noise vanish. Slow matchers get a prefix of the trace; fast ones the
    whole trace, repeated if one pass is too short."""
    if len(codes) == 0:
        return np.ascontiguousarray(codes)
    probe = np.ascontiguousarray(codes[: min(len(codes), 2048)])
    t = min(engine._native.time_match(probe, 2048, 1, 3))
    per_query = max(t / len(probe), 1e-10)
    n = int(TARGET_SECONDS / per_query)
    if n <= len(codes):
        return np.ascontiguousarray(codes[: max(n, 256)])
    return np.ascontiguousarray(np.tile(codes, (-(-n // len(codes)), 1)))


def _device_stages(engine: CompiledRules, codes: np.ndarray, batch: int, repeats: int) -> dict[str, Any]:
    """A device matcher's time per stage (H2D, kernel, D2H) on one whole reference batch, the
    median of `repeats` batches by kernel time: the kernel's own rate (data already on the
    device) beside the rate with transfers. One batch of exactly `batch` queries, not the
    timed passes' last batch, which is whatever remainder a pass ends with."""
    one = np.ascontiguousarray(codes[:batch])
    stages = []
    for _ in range(max(repeats, 1)):
        engine._native.time_match(one, len(one), 1, 1)
        stages.append(engine.stats().get("last_batch", {}))
    stages = sorted((s for s in stages if s.get("kernel_s")), key=lambda s: s["kernel_s"])
    out: dict[str, Any] = {"structure": engine.stats()}
    profile = engine._native.device_profile(one, repeats)
    if profile is not None:
        # the host's staging copy, the kernel per block size and with sorted queries, and the
        # device's own pipeline with transfers (from pinned memory)
        out["device_profile"] = profile
    if stages:
        med = stages[len(stages) // 2]
        out["device_stages"] = med
        out["kernel_queries_per_s"] = med["queries"] / med["kernel_s"]
    return out


def run(
    rules: RuleSet,
    query_columns: list[list[str]],
    matchers: Sequence[str] = ("linear", "nfa", "fast"),
    threads: Sequence[int] = (1, 2),
    batch_sizes: Sequence[int] = (1, 16, 256, 4096, 65536),
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Benchmark every matcher on the given raw queries; returns a JSON-ready dict.

    Configurations (matcher x threads x batch size) are timed round-robin, one pass each per
    round, `repeats` rounds, and the median is quoted: on a shared, noisy machine a slow spell
    then hits every configuration alike instead of one, so ratios stay honest. Headline
    figures use the largest batch (every matcher runs it), not the best of several.
    """
    say = progress or (lambda _msg: None)
    ref_batch = max(batch_sizes)
    out: dict[str, Any] = {
        "version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rules": len(rules),
        "queries": len(query_columns[0]) if query_columns else 0,
        "repeats": repeats,
        "reference_batch": ref_batch,
        "matchers": {},
    }
    engines, samples = _compile_all(rules, query_columns, matchers, out, say)
    configs = [
        (name, th, bs)
        for name in matchers
        if name in engines
        for th in threads
        for bs in batch_sizes
        # slow matchers: the extremes are enough; a device's rate is what the batch size decides
        if name in ("fast", *DEVICE_MATCHERS) or bs in (batch_sizes[0], batch_sizes[-1])
    ]
    secs: dict[tuple[str, int, int], list[float]] = {c: [] for c in configs}
    for round_ in range(max(repeats, 1)):
        for name, th, bs in configs:
            say(f"round {round_ + 1}/{repeats}: {name} threads={th} batch={bs}")
            secs[(name, th, bs)] += engines[name]._native.time_match(samples[name], bs, th, 1)
    for (name, th, bs), ts in secs.items():
        out["matchers"][name]["runs"].append(_run_entry(th, bs, ts, len(samples[name])))
    for name, engine in engines.items():
        if name in DEVICE_MATCHERS:
            out["matchers"][name].update(_device_stages(engine, samples[name], ref_batch, repeats))
    _headlines(out, min(threads), ref_batch)
    return out


def _compile_all(
    rules: RuleSet,
    query_columns: list[list[str]],
    matchers: Sequence[str],
    out: dict[str, Any],
    say: Callable[[str], None],
) -> tuple[dict[str, CompiledRules], dict[str, np.ndarray]]:
    """Compiles each matcher (a device matcher without its device goes under out["skipped"]
    with the reason), times the encoding once, and picks each matcher's timed queries; fills
    out["matchers"][name] with compile time, memory, structure and encoding cost."""
    engines: dict[str, CompiledRules] = {}
    samples: dict[str, np.ndarray] = {}
    n_q = len(query_columns[0]) if query_columns else 0
    encode_ns = 0.0
    for name in matchers:
        say(f"compiling {name}")
        t0 = time.perf_counter()
        try:
            engine = CompiledRules(rules, name)
        except RuntimeError as e:  # a device matcher without its device: skipped, with the reason
            out.setdefault("skipped", {})[name] = str(e)
            continue
        compile_wall = time.perf_counter() - t0
        if not engines:  # encoding does not depend on the matcher: time it once
            say("timing the encoding of raw values")
            # the trace repeated up to ~200k queries and 7 passes: a few thousand queries timed
            # three times moved the median by a third between runs
            reps = max(1, ENCODE_QUERIES // max(n_q, 1))
            enc = _native.time_encode(engine._native, [c * reps for c in query_columns], 7)
            encode_ns = 1e9 * statistics.median(enc) / max(n_q * reps, 1)
        engines[name] = engine
        samples[name] = _queries_for(engine, engine.encode(query_columns))
        out["matchers"][name] = {
            "compile_s": engine.compile_seconds,
            "compile_wall_s": compile_wall,
            "memory_bytes": engine.memory_bytes(),
            "structure": engine.stats(),
            "encode_ns_per_query": encode_ns,
            "timed_queries": len(samples[name]),
            "runs": [],
        }
    return engines, samples


def _run_entry(threads: int, batch: int, seconds: list[float], n: int) -> dict[str, Any]:
    """One configuration's timings and its median rate over ``n`` queries per pass."""
    med = statistics.median(seconds)
    return {
        "threads": threads,
        "batch": batch,
        "seconds": seconds,
        "median_s": med,
        "queries_per_s": n / med if med > 0 else float("inf"),
        "ns_per_query": 1e9 * med / n,
    }


def _headlines(out: dict[str, Any], threads: int, ref_batch: int) -> None:
    """Each matcher's rate at ``threads`` and the reference batch, with and without encoding,
    and the ratios fast/nfa, fast/linear, fast 2 threads/1 thread."""
    for entry in out["matchers"].values():
        ref = next(r for r in entry["runs"] if r["threads"] == threads and r["batch"] == ref_batch)
        entry["queries_per_s_1t"] = ref["queries_per_s"]
        entry["queries_per_s_1t_with_encode"] = 1e9 / (ref["ns_per_query"] + entry["encode_ns_per_query"])
    ms = out["matchers"]
    if "fast" in ms:
        fast = ms["fast"]
        at = {(r["threads"], r["batch"]): r["queries_per_s"] for r in fast["runs"]}
        if (2, ref_batch) in at and (1, ref_batch) in at:
            out["fast_2t_over_1t"] = at[(2, ref_batch)] / at[(1, ref_batch)]
        for other in ("nfa", "linear"):
            if other in ms:
                out[f"fast_over_{other}"] = fast["queries_per_s_1t"] / ms[other]["queries_per_s_1t"]


def load_query_columns(
    rules: RuleSet, path: Path, limit: int | None = None
) -> tuple[list[str], list[list[str]]]:
    """Reads a query CSV (validated by the native loader) as raw text columns."""
    ids, cols = _native.load_queries(rules._native, str(path))
    if limit is not None:
        ids = ids[:limit]
        cols = [c[:limit] for c in cols]
    return list(ids), [list(c) for c in cols]
