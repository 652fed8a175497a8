"""The MBWU procedure's two detectors (the plateau of a thread sweep, the steady window of a
step's samples) and the sweep that uses them: generic over a step function, so the key-value
and the scan workloads share them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def _check_series(values: Sequence[float], what: str) -> list[float]:
    xs = [float(v) for v in values]
    bad = [v for v in xs if not math.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"{what} must be finite and >= 0, got {bad[0]!r}")
    return xs


def steady_window(series: Sequence[float], bound: float = 0.15, min_len: int = 3) -> tuple[int, int] | None:
    """The longest tail ``series[start:]`` of at least ``min_len`` samples whose spread
    (max − min) is at most ``bound`` × its median; ``(start, len(series))``, or None.

    A tail, because a run settles: warm-up (empty caches, a memtable not yet flushed) is at the
    start, and the longest steady tail keeps the most samples for the median."""
    xs = _check_series(series, "throughput samples")
    if bound < 0:
        raise ValueError(f"the steady-state bound must be >= 0, got {bound}")
    if min_len < 1:
        raise ValueError(f"a steady-state window needs at least 1 sample, got {min_len}")
    for start in range(len(xs) - min_len + 1):
        tail = xs[start:]
        if max(tail) - min(tail) <= bound * statistics.median(tail):
            return start, len(xs)
    return None


def plateau(values: Sequence[float], threshold: float = 0.05) -> int | None:
    """Index of the plateau in a sweep's throughputs (by rising thread count): the best step
    before the first step that fails to beat it by more than ``threshold``; None while every
    step still gains (the sweep ended on the rise, or has a single step: no evidence yet).

    The best so far, not the last: a step past the knee may lose throughput to contention."""
    xs = _check_series(values, "sweep throughputs")
    if threshold < 0:
        raise ValueError(f"the plateau threshold must be >= 0, got {threshold}")
    best = 0
    for i in range(1, len(xs)):
        if xs[i] <= xs[best] * (1 + threshold):
            return best
        best = i
    return None


def summarize(threads: int, samples: Sequence[float], bound: float, min_len: int) -> dict[str, Any]:
    """One sweep step: its samples, the steady window and the window's median; without a steady
    window, the median of the second half, flagged (the run was too short or too noisy)."""
    xs = _check_series(samples, "throughput samples")
    if not xs:
        raise ValueError(f"the step at {threads} threads produced no samples")
    w = steady_window(xs, bound, min(min_len, len(xs)))
    part = xs[w[0] : w[1]] if w else xs[len(xs) // 2 :]
    return {
        "threads": threads, "samples": xs, "window": list(w) if w else None, "steady": w is not None,
        "value": statistics.median(part),
    }  # fmt: skip


def sweep(
    step: Callable[[int], list[float]], threads: Sequence[int], threshold: float = 0.05, bound: float = 0.15,
    min_len: int = 3, progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Runs ``step(n)`` for rising ``threads`` until the plateau; the MBWU is the best steady
    throughput up to it (a lower bound, flagged, when the sweep ends still rising)."""
    ts = list(threads)
    if not ts or any(t < 1 for t in ts) or ts != sorted(set(ts)):
        raise ValueError(f"thread counts must be rising and >= 1, got {ts}")
    steps: list[dict[str, Any]] = []
    for n in ts:
        if progress:
            progress(f"{n} thread{'s' if n > 1 else ''}")
        steps.append(summarize(n, step(n), bound, min_len))
        if plateau([s["value"] for s in steps], threshold) is not None:
            break
    values = [s["value"] for s in steps]
    p = plateau(values, threshold)
    best = p if p is not None else int(np.argmax(values))
    return {
        "steps": steps, "plateau_index": p, "plateau_reached": p is not None,
        "mbwu": values[best], "threads_at_mbwu": steps[best]["threads"],
        "threshold": threshold, "bound": bound, "min_window": min_len,
    }  # fmt: skip
