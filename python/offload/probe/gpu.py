"""GPU channels, measured with CuPy when a CUDA GPU is present (seed 004's stages, on a GPU):
host->device and device->host copies from pinned memory, from pageable memory, and from
pageable memory with both buffers allocated per copy; kernel launch latency (an empty kernel,
launch + synchronise). Without CuPy or a GPU, :func:`measure` says why and measures nothing.

Timing mirrors the Rust probes (crates/probe/src/measure.rs): a warm-up, samples of enough
repetitions to last a minimum time, median and p10/p90; the fit is the same Rust code.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from offload import _native


def _cupy() -> Any:
    try:
        import cupy  # type: ignore[import-not-found]

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU here"
        return None


def available() -> bool:
    return _cupy() is not None


def _time(op: Callable[[], None], sync: Callable[[], None], min_sample_s: float, samples: int) -> list[float]:
    op()
    sync()
    t0 = time.perf_counter()
    op()
    sync()
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, min(100_000, int(min_sample_s / one) + 1))
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            op()
        sync()
        out.append((time.perf_counter() - t0) / reps)
    return out


def _point(n: int, per_op: list[float]) -> dict[str, Any]:
    per_op = sorted(per_op)
    q = lambda x: per_op[round((len(per_op) - 1) * x)]  # noqa: E731
    med = statistics.median(per_op)
    return {"bytes": n, "median_s": med, "p10_s": q(0.1), "p90_s": q(0.9),
            "bandwidth_bps": n / med if med > 0 else 0.0, "samples": len(per_op)}  # fmt: skip


def _channel(name: str, operation: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    fit = _native.probe_fit([(p["bytes"], p["median_s"]) for p in points])
    return {"name": name, "operation": operation, "points": points, "fit": fit, "fit_from_bytes": 0}


def measure(quick: bool) -> dict[str, Any]:
    """The GPU section of a profile: channels, or why there are none."""
    cp = _cupy()
    if cp is None:
        return {"present": False, "note": "no CUDA GPU usable from CuPy: GPU channels skipped"}
    min_s, samples = (0.5e-3, 5) if quick else (2e-3, 11)
    hi = (16 << 20) if quick else (256 << 20)
    sizes = [1 << k for k in range(6, hi.bit_length())]
    rt = cp.cuda.runtime
    sync = cp.cuda.Device().synchronize
    h2d, d2h = rt.memcpyHostToDevice, rt.memcpyDeviceToHost
    dev = cp.cuda.Memory(hi)  # cudaMalloc, outside CuPy's pool
    pinned_mem = cp.cuda.alloc_pinned_memory(hi)
    pinned = np.frombuffer(pinned_mem, dtype=np.uint8, count=hi)
    pinned[:] = 1
    pageable = np.ones(hi, dtype=np.uint8)
    channels: dict[str, Any] = {}

    def copies(name: str, op_text: str, make: Callable[[int], Callable[[], None]]) -> None:
        channels[name] = _channel(
            name, op_text, [_point(n, _time(make(n), sync, min_s, samples)) for n in sizes]
        )

    copies("gpu/h2d-pinned", "cudaMemcpy n bytes from pinned host memory to the device",
           lambda n: lambda: rt.memcpy(dev.ptr, pinned.ctypes.data, n, h2d))  # fmt: skip
    copies("gpu/d2h-pinned", "cudaMemcpy n bytes from the device to pinned host memory",
           lambda n: lambda: rt.memcpy(pinned.ctypes.data, dev.ptr, n, d2h))  # fmt: skip
    copies("gpu/h2d-pageable", "cudaMemcpy n bytes from pageable host memory (staged by the driver)",
           lambda n: lambda: rt.memcpy(dev.ptr, pageable.ctypes.data, n, h2d))  # fmt: skip
    copies("gpu/d2h-pageable", "cudaMemcpy n bytes from the device to pageable host memory",
           lambda n: lambda: rt.memcpy(pageable.ctypes.data, dev.ptr, n, d2h))  # fmt: skip

    def alloc_copy(n: int) -> Callable[[], None]:
        def op() -> None:
            host = np.ones(n, dtype=np.uint8)  # allocate + fill the pageable source
            d = cp.cuda.Memory(n)  # cudaMalloc
            rt.memcpy(d.ptr, host.ctypes.data, n, h2d)
            del d

        return op

    copies(
        "gpu/h2d-pageable-alloc",
        "allocate a pageable host buffer and a device buffer, copy n bytes",
        alloc_copy,
    )
    empty = cp.RawKernel(r'extern "C" __global__ void offload_empty() {}', "offload_empty")
    launch = _time(lambda: empty((1,), (1,), ()), sync, min_s, samples)
    launch_sync = _time(lambda: (empty((1,), (1,), ()), sync()), lambda: None, min_s, samples)
    return {
        "present": True,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(errors="replace"),
        "channels": channels,
        "launch": {
            "enqueue_s": statistics.median(launch),
            "launch_and_sync_s": statistics.median(launch_sync),
        },
        "note": "measured with CuPy (cudaMemcpy, empty RawKernel)",
    }
