"""Benchmarks of the rule engine: throughput per matcher, thread count and batch size, the cost
of encoding raw values, compile time and memory. Timing loops run in Rust; this module only
chooses what to run and writes JSON.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload import __version__, _native
from offload.rules import CompiledRules, RuleSet

# Matching is timed on at most this many queries per configuration, and slow matchers on a
# prefix sized so one repeat takes roughly this many seconds.
TARGET_SECONDS = 0.4


def rate(qps: float) -> str:
    """A throughput for people: 12.3 M/s, 45.6 k/s, 789 /s."""
    if qps >= 1e6:
        return f"{qps / 1e6:.2f} M/s"
    if qps >= 1e3:
        return f"{qps / 1e3:.1f} k/s"
    return f"{qps:.0f} /s"


def plot(result: dict[str, Any], path: Path) -> Path:
    """Throughput against batch size, one line per matcher and thread count (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, m in result["matchers"].items():
        for th in sorted({r["threads"] for r in m["runs"]}):
            runs = sorted((r for r in m["runs"] if r["threads"] == th), key=lambda r: r["batch"])
            ax.plot(
                [r["batch"] for r in runs],
                [r["queries_per_s"] for r in runs],
                marker="o",
                linestyle="-" if th == 1 else "--",
                label=f"{name}, {th} thread{'s' if th > 1 else ''}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (queries per call)")
    ax.set_ylabel("queries / s (pre-encoded)")
    ax.set_title(f"{result['rules']:,} rules, {result['queries']:,} queries — {result['machine']['cpu']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.system(),
    }


def _queries_for(engine: CompiledRules, codes: np.ndarray, cap: int) -> np.ndarray:
    """A prefix of `codes` small enough that one pass of a slow matcher stays near the target."""
    probe = codes[: min(len(codes), 256)]
    t = min(engine._native.time_match(np.ascontiguousarray(probe), 256, 1, 1)) if len(probe) else 0.0
    per_query = t / max(len(probe), 1)
    n = int(TARGET_SECONDS / per_query) if per_query > 0 else len(codes)
    return np.ascontiguousarray(codes[: max(256, min(n, cap, len(codes)))])


def run(
    rules: RuleSet,
    query_columns: list[list[str]],
    matchers: Sequence[str] = ("linear", "nfa", "fast"),
    threads: Sequence[int] = (1, 2),
    batch_sizes: Sequence[int] = (1, 16, 256, 4096, 65536),
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Benchmark every matcher on the given raw queries; returns a JSON-ready dict."""
    say = progress or (lambda _msg: None)
    out: dict[str, Any] = {
        "version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rules": len(rules),
        "queries": len(query_columns[0]) if query_columns else 0,
        "repeats": repeats,
        "matchers": {},
    }
    for name in matchers:
        say(f"compiling {name}")
        t0 = time.perf_counter()
        engine = CompiledRules(rules, name)
        compile_wall = time.perf_counter() - t0
        say(f"encoding queries for {name}")
        enc_times = _native.time_encode(engine._native, query_columns, 3)
        n_q = len(query_columns[0])
        codes = engine.encode(query_columns)
        sample = _queries_for(engine, codes, len(codes))
        entry: dict[str, Any] = {
            "compile_s": engine.compile_seconds,
            "compile_wall_s": compile_wall,
            "memory_bytes": engine.memory_bytes(),
            "structure": engine.stats(),
            "encode_ns_per_query": 1e9 * statistics.median(enc_times) / max(n_q, 1),
            "timed_queries": len(sample),
            "runs": [],
        }
        for th in threads:
            for bs in batch_sizes:
                if name != "fast" and bs not in (batch_sizes[0], batch_sizes[-1]):
                    continue  # slow matchers: the extremes are enough
                say(f"{name}: threads={th} batch={bs}")
                secs = engine._native.time_match(sample, bs, th, repeats)
                med = statistics.median(secs)
                qps = len(sample) / med if med > 0 else float("inf")
                entry["runs"].append(
                    {
                        "threads": th,
                        "batch": bs,
                        "seconds": secs,
                        "median_s": med,
                        "queries_per_s": qps,
                        "ns_per_query": 1e9 * med / len(sample),
                    }
                )
        # Throughput including encoding raw values (one thread, largest batch).
        best1 = max(
            (r for r in entry["runs"] if r["threads"] == 1),
            key=lambda r: r["queries_per_s"],
        )
        entry["queries_per_s_1t"] = best1["queries_per_s"]
        entry["queries_per_s_1t_with_encode"] = 1e9 / (best1["ns_per_query"] + entry["encode_ns_per_query"])
        out["matchers"][name] = entry
    ms = out["matchers"]
    if "fast" in ms:
        fast = ms["fast"]
        two = [r for r in fast["runs"] if r["threads"] == 2 and r["batch"] == max(batch_sizes)]
        one = [r for r in fast["runs"] if r["threads"] == 1 and r["batch"] == max(batch_sizes)]
        if two and one:
            out["fast_2t_over_1t"] = two[0]["queries_per_s"] / one[0]["queries_per_s"]
        for other in ("nfa", "linear"):
            if other in ms:
                out[f"fast_over_{other}"] = fast["queries_per_s_1t"] / ms[other]["queries_per_s_1t"]
    return out


def load_query_columns(
    rules: RuleSet, path: Path, limit: int | None = None
) -> tuple[list[str], list[list[str]]]:
    """Reads a query CSV (validated by the native loader) as raw text columns."""
    ids, cols = _native.load_queries(rules._native, str(path))
    if limit is not None:
        ids = ids[:limit]
        cols = [c[:limit] for c in cols]
    return list(ids), [list(c) for c in cols]
