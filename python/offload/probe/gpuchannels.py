"""Seed 004's device-side channels on a GPU, and its two case studies, measured with CuPy.

Its §3.2 channels seen from the accelerator: private device memory (a device-to-device copy and a
read kernel), zero-copy mapped host memory (pinned host memory that a kernel reads over PCIe: the
seed's shared-memory access) and managed memory (pages the driver migrates on first touch: its
coherent access, first touch and resident), each from 4 KiB to 1 GiB so that a falloff at large
transfers (§3.2.2) shows; the latency of one 64 B access each way (Table 5's analogue: a
one-thread pointer chase, and the host's cudaMemcpy of 64 B); matrix multiply with its inputs in
device or mapped memory (§5.1), and matrix-vector multiply iterated on one matrix, whose crossover
is the device-memory reuse-ratio threshold r **measured** (§5.2), beside the one the seed's
formula gives with this GPU's measured rates, `offload probe reuse`'s and the seed's 7.

Without CuPy or a GPU, :func:`why_unavailable` says why and nothing is measured. Timing is
gpu.py's (a warm-up, samples of enough repetitions to last a minimum time, median and p10/p90);
the operations that change state (first touch) are timed one at a time after their set-up.
The pure helpers (sizes, crossover, falloff, chain, the result's parts, rendering) need no GPU.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from offload.probe import presets

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SEED_R = 7  # seed 004, §5.2: Alpha Data overtakes Xeon+FPGA v1 past 7 iterations
SEED_TABLE5 = {  # seed 004, Table 5: latency of transferring a single 512-bit cache block
    "device": "device DRAM: 542 ns (Alpha Data), 561 ns (Amazon EC2 F1)",
    "shared": "shared memory: 882 ns (CAPI), 355 ns (Xeon+FPGA v1), 323 ns (Xeon+FPGA v2)",
    "pcie": "PCIe: 160 µs (Alpha Data), 127 µs (Amazon EC2 F1)",
}
THREADS = 256
BLOCKS_PER_SM = 8  # enough 16 B loads in flight for HBM; one atomic per block stays cheap
CHASE_STEPS = 4096  # dependent loads per sample: a few ms, far above the timer's resolution

# Reads n/16 uint4 (16 B) words, grid-stride, and adds them up: one atomic per block, so the sum
# checks that every byte was read and keeps the loads live.
READ_KERNEL = r"""
extern "C" __global__ void offload_read(const uint4* p, unsigned long long n16, unsigned int* sum) {
    unsigned int acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n16; i += stride) {
        uint4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    __shared__ unsigned int warp_sums[32];
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int s = 0;
        for (unsigned int w = 0; w < (blockDim.x + 31) / 32; ++w) s += warp_sums[w];
        atomicAdd(sum, s);
    }
}
"""

# One thread follows `steps` dependent links; each link reads a whole 64 B block (four 16 B
# loads, the first word is the next block's word index). The device's nanosecond timer brackets
# the chase; the second read takes the last index as an input, so it waits for the last load.
CHASE_KERNEL = r"""
extern "C" __global__ void offload_chase(const unsigned long long* p, unsigned long long start,
                                         unsigned int steps, unsigned long long* out) {
    unsigned long long i = start, sink = 0, t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned int s = 0; s < steps; ++s) {
        const ulonglong2* b = (const ulonglong2*)(p + i);
        ulonglong2 a = b[0], c = b[1], d = b[2], e = b[3];
        sink ^= a.y ^ c.x ^ c.y ^ d.x ^ d.y ^ e.x ^ e.y;
        i = a.x;
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1) : "l"(i));
    out[0] = t1 - t0;
    out[1] = i;
    out[2] = sink;
}
"""
KERNELS = {"offload_read": READ_KERNEL, "offload_chase": CHASE_KERNEL}


# ------------------------------------------------------------------ pure helpers (no GPU)


def sweep_sizes(lo: int = 4 * KIB, hi: int = GIB, limit: int | None = None) -> list[int]:
    """Powers of two from ``lo`` to ``hi``, none above ``limit`` (what the buffers may take)."""
    if lo <= 0 or lo & (lo - 1) or hi < lo:
        raise ValueError(f"sizes {lo}..{hi}: lo must be a power of two, at most hi")
    top = hi if limit is None else min(hi, limit)
    return [1 << k for k in range(lo.bit_length() - 1, top.bit_length()) if lo <= 1 << k <= top]


def falloff(points: Sequence[dict[str, Any]], min_drop: float = 0.25) -> dict[str, Any] | None:
    """The largest fall of bandwidth from one size to the next (§3.2.2: CAPI's at 4 MB), if it
    loses at least ``min_drop`` of the rate; with the best rate reached again at larger sizes."""
    bw = [p["bandwidth_bps"] for p in points]
    drops = [(bw[i + 1] / bw[i], i) for i in range(len(bw) - 1) if bw[i] > 0]
    if not drops:
        return None
    ratio, i = min(drops)
    if 1 - ratio < min_drop:
        return None
    after = bw[i + 2 :]
    return {
        "at_bytes": points[i + 1]["bytes"], "from_bytes": points[i]["bytes"], "from_bps": bw[i],
        "to_bps": bw[i + 1], "drop": 1 - ratio, "recovered_bps": max(after) if after else None,
    }  # fmt: skip


def peak(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    best = max(points, key=lambda p: p["bandwidth_bps"])
    return {"bytes": best["bytes"], "bandwidth_bps": best["bandwidth_bps"]}


@dataclass(frozen=True)
class Line:
    """Least-squares T(k) = intercept + k * slope."""

    intercept_s: float
    per_iteration_s: float


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Line:
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return Line(float(intercept), float(slope))


def crossover(
    iterations: Sequence[int], private_s: Sequence[float], shared_s: Sequence[float]
) -> dict[str, Any]:
    """Where the private-memory platform (copy once, then iterate on device memory) overtakes
    the shared one (iterate over mapped host memory), from the measured curves: ``first``, the
    fewest iterations from which private is faster at every larger count measured (None if it
    is not faster at the last); ``line``, where the two fitted lines cross (None if they never do)."""
    ks = list(iterations)
    if not (len(ks) == len(private_s) == len(shared_s) >= 2) or ks != sorted(set(ks)):
        raise ValueError("crossover needs two or more increasing iteration counts, one time each")
    first = None
    for k, p, s in reversed(list(zip(ks, private_s, shared_s, strict=True))):
        if p >= s:
            break
        first = k
    lp, ls = fit_line(ks, private_s), fit_line(ks, shared_s)
    gap = ls.per_iteration_s - lp.per_iteration_s
    line = (lp.intercept_s - ls.intercept_s) / gap if gap > 0 else None
    return {"first": first, "line": line, "private_fit": vars(lp), "shared_fit": vars(ls)}


def chain(n_blocks: int, count: int, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct random 64 B blocks of ``n_blocks`` linked in one cycle: the word index
    (8 words a block) of each, and of its successor. Chasing ``s`` links from ``blocks[i]`` ends
    at ``blocks[(i + s) % count]``."""
    if not 1 < count <= n_blocks:
        raise ValueError(f"a chain of {count} blocks out of {n_blocks}")
    blocks = np.random.default_rng(seed).choice(n_blocks, size=count, replace=False).astype(np.uint64) * 8
    return blocks, np.roll(blocks, -1)


def _q(xs: Sequence[float], at: float) -> float:
    s = sorted(xs)
    return s[round((len(s) - 1) * at)]


def latency_entry(operation: str, per_access_s: Sequence[float], steps: int, seed: str) -> dict[str, Any]:
    return {
        "operation": operation, "per_access_s": statistics.median(per_access_s),
        "p10_s": _q(per_access_s, 0.1), "p90_s": _q(per_access_s, 0.9), "samples": len(per_access_s),
        "steps": steps, "seed": seed,
    }  # fmt: skip


def matmul_row(n: int, device_s: float, copy_s: float, mapped_s: float) -> dict[str, Any]:
    """One size of §5.1: the kernel alone, the private platform (copy in, multiply, copy back)
    and the shared one (the kernel reads and writes mapped host memory)."""
    flops = 2.0 * n**3
    return {
        "n": n, "device_s": device_s, "copy_s": copy_s, "mapped_s": mapped_s,
        "device_gflops": flops / device_s * 1e-9, "copy_gflops": flops / copy_s * 1e-9,
        "mapped_gflops": flops / mapped_s * 1e-9, "mapped_over_copy": mapped_s / copy_s,
    }  # fmt: skip


def probe_reuse_figures() -> dict[str, Any]:
    """What `offload probe reuse` derives for the seed's pair (the FPGA presets): the thresholds
    from its stated DMA rates and the fitted one; the error instead when the presets don't load."""
    try:
        p = presets.load()["platforms"]
    except (OSError, ValueError) as e:
        return {"error": f"platform presets {presets.PRESETS}: {e}"}
    pv, sh = p["alpha_data"], p["xeon_fpga_v1"]
    steps = pv.get("dma_breakdown_gbps", {})
    v = presets.reuse_variants(steps, pv["device_read_gbps"], sh["read_gbps"], SEED_R)
    return {
        "stated": [{k: s[k] for k in ("what", "dma_gbps", "r_threshold")} for s in v["stated"]],
        "fitted": v["fitted"]["r_threshold"], "fitted_dma_gbps": v["fitted"]["dma_gbps"],
    }  # fmt: skip


def matvec_summary(
    n: int, iterations: Sequence[int], private_s: Sequence[float], shared_s: Sequence[float], copy_s: float
) -> dict[str, Any]:
    """§5.2 from the measured curves: r measured (``crossover``), the rates behind it (the
    matrix's bytes over the copy and over each fitted per-iteration time), the seed's formula
    (presets.reuse_threshold) fed those rates, `offload probe reuse`'s figures and the seed's 7."""
    matrix = n * n * 4
    cross = crossover(iterations, private_s, shared_s)
    dev_it, sh_it = cross["private_fit"]["per_iteration_s"], cross["shared_fit"]["per_iteration_s"]
    rates = {
        "dma_bps": matrix / copy_s,
        "device_bps": matrix / dev_it if dev_it > 0 else None,
        "shared_bps": matrix / sh_it if sh_it > 0 else None,
    }
    model = None
    if rates["device_bps"] and rates["shared_bps"]:
        model = presets.reuse_threshold(rates["dma_bps"], rates["device_bps"], rates["shared_bps"])
    return {
        "n": n, "matrix_bytes": matrix, "iterations": list(iterations), "private_s": list(private_s),
        "shared_s": list(shared_s), "copy_s": copy_s, "r_measured": cross["first"],
        "r_lines_cross": cross["line"],
        "fits": {"private": cross["private_fit"], "shared": cross["shared_fit"]}, "rates": rates,
        "r_model": model, "r_probe_reuse": probe_reuse_figures(), "r_seed": SEED_R,
    }  # fmt: skip


def unavailable(why: str) -> dict[str, Any]:
    return {**_header(), "available": False, "why": why}


def _header() -> dict[str, Any]:
    from offload import __version__

    return {
        "tool": "offload probe gpu-channels",
        "version": __version__,
        "date": datetime.now(UTC).isoformat(),
    }


def one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


PARTS = ("channels", "latency", "matmul", "matvec")


def failed(result: dict[str, Any]) -> list[str]:
    """The parts of a measurement that raised, each with its error."""
    return [f"{k}: {result[k]['error']}" for k in PARTS if "error" in result.get(k, {})]


# ------------------------------------------------------------------ rendering (no GPU)


def _bw(bps: float | None) -> str:
    if bps is None:
        return "-"
    return f"{bps / 1e9:,.1f} GB/s" if bps >= 1e9 else f"{bps / 1e6:,.0f} MB/s"


def _t(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.2f} µs" if s >= 1e-6 else f"{s * 1e9:.0f} ns"


def _size(n: int) -> str:
    for unit, b in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= b:
            return f"{n / b:g} {unit}"
    return f"{n} B"


def render(result: dict[str, Any]) -> list[Any]:
    """The tables (rich) and lines a person reads; the JSON is the result itself."""
    from rich.table import Table

    dev = result["device"]
    out: list[Any] = []
    ch = result["channels"]
    if "error" in ch:
        out.append(f"channels failed: {ch['error']}")
    else:
        t = Table(title=f"device-side channels on {dev['name']} ({result['mode']}; §3.2, Fig. 4)")
        for col in ("channel", "smallest", "peak (at)", "largest", "falloff (§3.2.2)"):
            t.add_column(col, justify="left" if col == "channel" else "right")
        for name, c in ch.items():
            pts, pk, f = c["points"], c["peak"], c["falloff"]
            fall = "none ≥ 25%" if f is None else f"−{f['drop']:.0%} at {_size(f['at_bytes'])}"
            if f is not None and (f["recovered_bps"] or 0) >= 0.9 * f["from_bps"]:
                fall += ", recovers"
            t.add_row(name, f"{_bw(pts[0]['bandwidth_bps'])} ({_size(pts[0]['bytes'])})",
                      f"{_bw(pk['bandwidth_bps'])} ({_size(pk['bytes'])})",
                      f"{_bw(pts[-1]['bandwidth_bps'])} ({_size(pts[-1]['bytes'])})", fall)  # fmt: skip
        out.append(t)
    out.append(_latency_table(result["latency"]))
    out.extend(_matmul_table(result["matmul"]))
    out.extend(_matvec_render(result["matvec"]))
    return out


def _latency_table(lat: dict[str, Any]) -> Any:
    from rich.table import Table

    if "error" in lat:
        return f"latency failed: {lat['error']}"
    t = Table(title="one 64 B access each way (Table 5's analogue)")
    for col in ("access", "median", "p10–p90", "the seed's Table 5"):
        t.add_column(col, justify="right" if col in ("median", "p10–p90") else "left")
    for name, e in lat.items():
        t.add_row(name, _t(e["per_access_s"]), f"{_t(e['p10_s'])}–{_t(e['p90_s'])}", e["seed"])
    return t


def _matmul_table(mm: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    if "error" in mm:
        return [f"matrix multiply failed: {mm['error']}"]
    t = Table(title="§5.1 matrix multiply (fp32, cuBLAS): inputs in device memory or mapped host memory")
    for col in ("n", "kernel alone", "copy in + multiply + copy back", "mapped host memory", "mapped / copy"):
        t.add_column(col, justify="right")
    for r in mm["rows"]:
        t.add_row(
            str(r["n"]),
            f"{_t(r['device_s'])} ({r['device_gflops']:,.0f} GFLOP/s)",
            f"{_t(r['copy_s'])} ({r['copy_gflops']:,.0f})",
            f"{_t(r['mapped_s'])} ({r['mapped_gflops']:,.0f})",
            f"{r['mapped_over_copy']:.2f}×",
        )
    return [t, matmul_verdict(mm["rows"])]


def matmul_verdict(rows: list[dict[str, Any]]) -> str:
    """What the largest n says of the seed's Fig. 6 (the same time on every platform: the
    multiply is computation-bound), read from the measured mapped / copy ratio."""
    last = max(rows, key=lambda r: r["n"])
    ratio, copies = last["mapped_over_copy"], 1 - last["device_s"] / last["copy_s"]
    seed = "The seed's Fig. 6: the same design takes the same time on every platform (computation-bound)."
    if ratio <= 1.25:
        return f"{seed} Here too: at n = {last['n']:,} mapped host memory takes {ratio:.2f}× the copies."
    return (f"{seed} Not here: at n = {last['n']:,} the multiply reading mapped host memory takes "
            f"{ratio:.1f}× copy + multiply, and the copies are {copies:.0%} of that: this device computes "
            "too fast for its link to keep up.")  # fmt: skip


def _matvec_render(mv: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    if "error" in mv:
        return [f"matrix-vector failed: {mv['error']}"]
    t = Table(
        title=f"§5.2 matrix-vector, iterated on one {mv['n']}² fp32 matrix ({_size(mv['matrix_bytes'])})"
    )
    for col in ("iterations", "copy once + device memory", "mapped host memory", "faster"):
        t.add_column(col, justify="right")
    for k, p, s in zip(mv["iterations"], mv["private_s"], mv["shared_s"], strict=True):
        t.add_row(str(k), _t(p), _t(s), "device" if p < s else "mapped")
    rr = mv["r_probe_reuse"]
    reuse = (
        f"`offload probe reuse` (the seed's FPGA pair): {rr['error']}"
        if "error" in rr
        else "`offload probe reuse` (the seed's FPGA pair): "
        + ", ".join(
            f"{s['r_threshold']:.1f} at {s['dma_gbps']} GB/s" for s in rr["stated"] if s["r_threshold"]
        )
        + f" (stated rates); {rr['fitted']:.1f} fitted"
    )
    first = mv["r_measured"]
    measured = f"never up to {mv['iterations'][-1]} iterations" if first is None else str(first)
    cross = "-" if mv["r_lines_cross"] is None else f"{mv['r_lines_cross']:.2f}"
    model = "never" if mv["r_model"] is None else f"{mv['r_model']:.2f}"
    r = mv["rates"]
    rates = f"copy {_bw(r['dma_bps'])}, device {_bw(r['device_bps'])}, mapped {_bw(r['shared_bps'])}"
    return [
        t,
        f"r measured: {measured} (the fewest iterations from which copying to device memory first wins at "
        f"every larger count measured; the fitted lines cross at {cross})",
        f"the seed's formula with this GPU's rates ({rates}): r_threshold {model}",
        reuse,
        f"the seed (§5.2, Fig. 7): {mv['r_seed']}",
    ]


def plot(result: dict[str, Any], path: Any) -> Any:
    """Bandwidth by size per channel (the seed's Fig. 4) and the matrix-vector curves (its Fig. 7)."""
    from offload.files import save_figure
    from offload.host.plots import pyplot

    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.6))
    for name, c in result["channels"].items() if "error" not in result["channels"] else ():
        a.plot(
            [p["bytes"] for p in c["points"]],
            [p["bandwidth_bps"] / 1e9 for p in c["points"]],
            "o-",
            ms=3,
            label=name,
        )
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("transfer size (bytes)")
    a.set_ylabel("GB/s")
    a.set_title("device-side channels (seed 004, Fig. 4)", fontsize=10)
    a.legend()
    mv = result["matvec"]
    if "error" not in mv:
        b.plot(
            mv["iterations"],
            [s * 1e3 for s in mv["private_s"]],
            "o-",
            label="copy once, iterate on device memory",
        )
        b.plot(
            mv["iterations"], [s * 1e3 for s in mv["shared_s"]], "s-", label="iterate over mapped host memory"
        )
        if mv["r_measured"] is not None:
            b.axvline(mv["r_measured"], color="C3", ls="--", label=f"r measured: {mv['r_measured']}")
        b.axvline(SEED_R, color="grey", ls=":", label=f"seed: r_threshold ≈ {SEED_R}")
        b.set_xlabel("iterations (device memory reuse ratio r)")
        b.set_ylabel("time (ms)")
        b.legend()
    b.set_title("matrix-vector iterated on one matrix (seed 004, Fig. 7)", fontsize=10)
    fig.suptitle(f"offload probe gpu-channels: {result['device']['name']}")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path


# ------------------------------------------------------------------ measuring (CuPy, a GPU)


def why_unavailable() -> str | None:
    """Why nothing can be measured here (one line), or None when CuPy sees a CUDA device."""
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception as e:  # ImportError, or a CuPy that fails to load its CUDA libraries
        if shutil.which("nvidia-smi") is None:
            return "no NVIDIA GPU here (nvidia-smi not found) and CuPy is not installed"
        return f"a GPU is present but CuPy cannot be imported ({one_line(e)}): pip install cupy-cuda12x"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device: CuPy raises its own runtime errors
        return f"CuPy found no usable CUDA device ({one_line(e)})"
    return None if count > 0 else "CuPy found no CUDA device"


@dataclass
class _Gpu:
    cp: Any
    dev_id: int
    props: dict[str, Any]
    read: Any
    chase: Any
    sum: Any  # one uint32 on the device: the read kernel's total

    def sync(self) -> None:
        self.cp.cuda.Device().synchronize()

    @property
    def sms(self) -> int:
        return int(self.props["multiProcessorCount"])

    @property
    def rt(self) -> Any:
        return self.cp.cuda.runtime

    def h2d(self, dst: int, src: int, n: int) -> None:
        self.rt.memcpy(dst, src, n, self.rt.memcpyHostToDevice)

    def d2h(self, dst: int, src: int, n: int) -> None:
        self.rt.memcpy(dst, src, n, self.rt.memcpyDeviceToHost)

    def free(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()


def _host_view(ptr: int, n: int, dtype: Any = np.uint8) -> np.ndarray:
    """A NumPy view of host-accessible memory at ``ptr`` (pinned or managed)."""
    return np.frombuffer((ctypes.c_uint8 * n).from_address(ptr), dtype=dtype)


def _device_view(g: _Gpu, ptr: int, n: int, owner: Any, dtype: Any = np.uint8) -> Any:
    """A CuPy array over any device-accessible address (mapped host memory, via UVA)."""
    cp = g.cp
    mem = cp.cuda.UnownedMemory(ptr, n, owner, g.dev_id)
    return cp.ndarray((n // np.dtype(dtype).itemsize,), dtype, cp.cuda.MemoryPointer(mem, 0))


@dataclass
class _Buffer:
    """Memory both sides reach: the allocation (kept alive), a host view, a device view."""

    mem: Any
    host: np.ndarray
    dev: Any

    @property
    def ptr(self) -> int:
        return int(self.mem.ptr)


def _mapped(g: _Gpu, n: int) -> _Buffer:
    """Pinned host memory mapped into the device; with unified addressing the device uses the
    host's pointer."""
    mem = g.cp.cuda.PinnedMemory(n, g.rt.hostAllocMapped | g.rt.hostAllocPortable)
    return _Buffer(mem, _host_view(mem.ptr, n), _device_view(g, mem.ptr, n, mem))


def _managed(g: _Gpu, n: int) -> _Buffer:
    mp = g.cp.cuda.malloc_managed(n)
    return _Buffer(mp, _host_view(mp.ptr, n), g.cp.ndarray((n,), g.cp.uint8, mp))


def _prefetch(g: _Gpu, ptr: int, n: int) -> None:
    """Managed pages onto the device; where prefetching is refused, a read of them moves them."""
    try:
        g.rt.memPrefetchAsync(ptr, n, g.dev_id, g.cp.cuda.get_current_stream().ptr)
    except Exception:  # builds or devices without prefetch (no concurrent managed access)
        _read_op(g, _device_view(g, ptr, n, None), n)()
    g.sync()


def _read_op(g: _Gpu, arr: Any, n: int) -> Callable[[], None]:
    n16 = n // 16
    blocks = max(1, min(-(-n16 // THREADS), g.sms * BLOCKS_PER_SM))
    args = (arr, np.uint64(n16), g.sum)
    return lambda: g.read((blocks,), (THREADS,), args)


def _check_read(g: _Gpu, arr: Any, n: int, where: str) -> None:
    """The read kernel adds every 32-bit word of a buffer of 1-bytes: a missed byte shows."""
    g.sum[...] = 0
    _read_op(g, arr, n)()
    g.sync()
    got, want = int(g.sum.get()[0]), (n // 4 * 0x01010101) & 0xFFFFFFFF
    if got != want:
        raise RuntimeError(f"the read kernel over {where} summed {got:#x}, expected {want:#x}")


def _time_each(
    op: Callable[[], None], sync: Callable[[], None], samples: int, setup: Callable[[], None] | None = None
) -> list[float]:
    """One operation per sample, after its set-up (not timed): for operations that change state."""
    out = []
    for _ in range(samples):
        if setup is not None:
            setup()
        sync()
        t0 = time.perf_counter()
        op()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def _entry(
    name: str, operation: str, sizes: list[int], timings: Callable[[int], list[float]]
) -> dict[str, Any]:
    from offload.probe import gpu

    c = gpu._channel(name, operation, [gpu._point(n, timings(n)) for n in sizes])
    return {**c, "peak": peak(c["points"]), "falloff": falloff(c["points"])}


@dataclass(frozen=True)
class Mode:
    sizes_to: int
    min_sample_s: float
    samples: int
    touch_samples: int
    chase_bytes: int
    chase_samples: int
    matmul_n: tuple[int, ...]
    matvec_n: int
    iterations: tuple[int, ...]
    matvec_samples: int


MODES = {  # quick: ~10-20 s on a GPU; full: 4 KiB to 1 GiB, about a minute
    True: Mode(64 * MIB, 0.5e-3, 5, 3, 64 * MIB, 3, (512, 1024, 2048), 2048, (1, 2, 3, 4, 6, 8, 12, 16), 3),
    False: Mode(
        GIB, 2e-3, 11, 5, 256 * MIB, 7, (1024, 2048, 4096), 4096, (*range(1, 11), 12, 14, 16, 20, 24, 32), 7
    ),
}


def _channels(g: _Gpu, m: Mode, say: Callable[[str], None]) -> dict[str, Any]:
    sizes = sweep_sizes(4 * KIB, m.sizes_to, limit=g.rt.memGetInfo()[0] // 4)
    out: dict[str, Any] = {}
    for kind, part in (
        ("device", _device_channels),
        ("mapped", _mapped_channels),
        ("managed", _managed_channels),
    ):
        say(f"channels: {kind} memory")
        out |= part(g, m, sizes)
        g.free()
    return out


def _device_channels(g: _Gpu, m: Mode, sizes: list[int]) -> dict[str, Any]:
    from offload.probe.gpu import _time

    cp, hi = g.cp, sizes[-1]
    src, dst = cp.ones(hi, cp.uint8), cp.empty(hi, cp.uint8)
    _check_read(g, src, hi, "device memory")

    def copy(n: int) -> list[float]:
        op = lambda: g.rt.memcpy(dst.data.ptr, src.data.ptr, n, g.rt.memcpyDeviceToDevice)  # noqa: E731
        return _time(op, g.sync, m.min_sample_s, m.samples)

    return {
        "device/copy": _entry("device/copy", "cudaMemcpy of n bytes within device memory (reads n, writes n)",
                              sizes, copy),
        "device/read": _entry("device/read", "a kernel reads n bytes of device memory", sizes,
                              lambda n: _time(_read_op(g, src, n), g.sync, m.min_sample_s, m.samples)),
    }  # fmt: skip


def _mapped_channels(g: _Gpu, m: Mode, sizes: list[int]) -> dict[str, Any]:
    from offload.probe.gpu import _time

    b = _mapped(g, sizes[-1])
    b.host[:] = 1
    _check_read(g, b.dev, sizes[-1], "mapped host memory")
    what = "a kernel reads n bytes of pinned host memory mapped into the device (zero-copy, over PCIe)"
    return {
        "mapped/read": _entry("mapped/read", what, sizes,
                              lambda n: _time(_read_op(g, b.dev, n), g.sync, m.min_sample_s, m.samples)),
    }  # fmt: skip


def _managed_channels(g: _Gpu, m: Mode, sizes: list[int]) -> dict[str, Any]:
    from offload.probe.gpu import _time

    hi = sizes[-1]
    b = _managed(g, hi)
    b.host[:] = 1

    def first_touch(n: int) -> list[float]:
        def setup() -> None:
            b.host[: n : 4 * KIB] = 1  # the host writes every page last: the pages move back to it

        return _time_each(_read_op(g, b.dev, n), g.sync, m.touch_samples, setup)

    out = {
        "managed/read-first-touch": _entry(
            "managed/read-first-touch",
            "a kernel reads n bytes of managed memory the host wrote last (pages migrate on its faults)",
            sizes, first_touch),
    }  # fmt: skip
    _check_read(g, b.dev, hi, "managed memory")
    _prefetch(g, b.ptr, hi)
    out["managed/read-resident"] = _entry(
        "managed/read-resident", "a kernel reads n bytes of managed memory already on the device", sizes,
        lambda n: _time(_read_op(g, b.dev, n), g.sync, m.min_sample_s, m.samples))  # fmt: skip
    return out


@dataclass(frozen=True)
class _Chain:
    """The links written into a buffer, and where each chase segment starts and must end."""

    blocks: np.ndarray
    nexts: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def make(cls, n_bytes: int, segments: int) -> _Chain:
        blocks, nexts = chain(n_bytes // 64, segments * CHASE_STEPS)
        starts = blocks[::CHASE_STEPS][:segments]
        return cls(blocks, nexts, starts, np.roll(blocks, -CHASE_STEPS)[::CHASE_STEPS][:segments])

    def write(self, words: np.ndarray) -> None:
        words[self.blocks.astype(np.int64)] = self.nexts

    def segment_bytes(self, i: int) -> np.ndarray:
        """Byte offsets of the last byte of each block of segment i (not the link word)."""
        return self.blocks[i * CHASE_STEPS : (i + 1) * CHASE_STEPS].astype(np.int64) * 8 + 63


def _chase(g: _Gpu, words: Any, c: _Chain, setup: Callable[[int], None] = lambda i: None) -> list[float]:
    """Per-access seconds of each chase segment (the first, a warm-up, dropped); checks each end."""
    cp, out = g.cp, g.cp.zeros(3, g.cp.uint64)
    flush = cp.empty(max(2 * int(g.props.get("l2CacheSize", 0)), 64 * MIB), cp.uint8)
    per: list[float] = []
    for i, (start, end) in enumerate(zip(c.starts, c.ends, strict=True)):
        setup(i)
        flush.fill(0)  # evicts L2, which the set-up's writes may have filled with the chain,
        _read_op(g, flush, flush.nbytes)()  # and leaves it full of other lines
        g.sync()
        g.chase((1,), (1,), (words, np.uint64(start), np.uint32(CHASE_STEPS), out))
        g.sync()
        ns, got, _ = (int(x) for x in out.get())
        if got != int(end):
            raise RuntimeError(f"the pointer chase ended at word {got}, expected {int(end)}")
        if i:
            per.append(ns * 1e-9 / CHASE_STEPS)
    return per


def _latency(g: _Gpu, m: Mode, say: Callable[[str], None]) -> dict[str, Any]:
    c = _Chain.make(m.chase_bytes, m.chase_samples + 1)
    steps = f"{CHASE_STEPS} dependent 64 B reads by one thread, random blocks of {_size(m.chase_bytes)}"
    out: dict[str, Any] = {}
    for kind, part in (
        ("device", _device_latency),
        ("mapped", _mapped_latency),
        ("managed", _managed_latency),
    ):
        say(f"latency: {kind} memory")
        out |= part(g, m, c, steps)
        g.free()
    return out


def _device_latency(g: _Gpu, m: Mode, c: _Chain, steps: str) -> dict[str, Any]:
    d = g.cp.zeros(m.chase_bytes // 8, g.cp.uint64)
    d[g.cp.asarray(c.blocks.astype(np.int64))] = g.cp.asarray(c.nexts)
    per = _chase(g, d, c)
    return {"device reads device memory": latency_entry(steps, per, CHASE_STEPS, SEED_TABLE5["device"])}


def _mapped_latency(g: _Gpu, m: Mode, c: _Chain, steps: str) -> dict[str, Any]:
    """The device reading mapped host memory; and the host's own 64 B copies each way."""
    from offload.probe.gpu import _time

    b = _mapped(g, m.chase_bytes)
    c.write(b.host.view(np.uint64))
    per = _chase(g, b.dev.view(g.cp.uint64), c)
    dev64 = g.cp.zeros(8, g.cp.uint64)
    h2d = _time(lambda: g.h2d(dev64.data.ptr, b.ptr, 64), g.sync, m.min_sample_s, m.samples)
    d2h = _time(lambda: g.d2h(b.ptr, dev64.data.ptr, 64), g.sync, m.min_sample_s, m.samples)
    pcie = SEED_TABLE5["pcie"]
    return {
        "device reads mapped host memory": latency_entry(steps, per, CHASE_STEPS, SEED_TABLE5["shared"]),
        "host writes device memory (cudaMemcpy 64 B)": latency_entry("pinned to device", h2d, 1, pcie),
        "host reads device memory (cudaMemcpy 64 B)": latency_entry("device to pinned", d2h, 1, pcie),
    }


def _managed_latency(g: _Gpu, m: Mode, c: _Chain, steps: str) -> dict[str, Any]:
    b = _managed(g, m.chase_bytes)
    h64 = b.host.view(np.uint64)
    c.write(h64)
    words = b.dev.view(g.cp.uint64)

    def host_touch(i: int) -> None:  # the pages of this segment's blocks back on the host
        b.host[c.segment_bytes(i)] = 1

    first = _chase(g, words, c, host_touch)
    _prefetch(g, b.ptr, m.chase_bytes)
    resident = _chase(g, words, c)
    reads = []
    for w in c.blocks[: m.samples].astype(np.int64):
        chunk = int(w) * 8 // (2 * MIB) * (2 * MIB)
        _prefetch(g, b.ptr + chunk, 2 * MIB)  # the block's 2 MiB back on the device
        t0 = time.perf_counter()
        int(h64[w : w + 8].sum())  # the host reads the 64 B block
        reads.append(time.perf_counter() - t0)
    host_read = "the host reads one 64 B block of managed memory on the device (its page migrates)"
    return {
        "device reads managed memory, first touch": latency_entry(
            steps + "; the host wrote each page last", first, CHASE_STEPS, SEED_TABLE5["shared"]),
        "device reads managed memory, resident": latency_entry(
            steps + "; the pages on the device", resident, CHASE_STEPS, SEED_TABLE5["device"]),
        "host reads managed memory on the device": latency_entry(host_read, reads, 1, "—"),
    }  # fmt: skip


def _matmul(g: _Gpu, m: Mode, say: Callable[[str], None]) -> dict[str, Any]:
    rows = []
    for n in m.matmul_n:
        say(f"matrix multiply n={n}")
        rows.append(_matmul_one(g, n, np.random.default_rng(5)))
        g.free()
    what = "C = A·B in fp32 with cuBLAS (cupy.dot); A and B start in host memory, C ends there"
    return {"rows": rows, "operation": what}


def _matmul_one(g: _Gpu, n: int, rng: np.random.Generator) -> dict[str, Any]:
    cp, nb = g.cp, n * n * 4
    a, b, c = (_mapped(g, nb) for _ in range(3))
    for x in (a, b):
        x.host.view(np.float32)[:] = rng.random(n * n, dtype=np.float32)
    am, bm, cm = (x.dev.view(cp.float32).reshape(n, n) for x in (a, b, c))
    ad, bd, cd = (cp.empty((n, n), cp.float32) for _ in range(3))

    def private() -> None:  # the private-memory platform: copy in, multiply, copy back
        g.h2d(ad.data.ptr, a.ptr, nb)
        g.h2d(bd.data.ptr, b.ptr, nb)
        cp.dot(ad, bd, out=cd)
        g.d2h(c.ptr, cd.data.ptr, nb)

    def shared() -> None:  # the shared one: the kernel reads and writes host memory
        cp.dot(am, bm, out=cm)

    private()
    g.sync()
    want = c.host.view(np.float32).copy()
    shared()
    g.sync()
    if not np.allclose(c.host.view(np.float32), want, rtol=1e-3, atol=1e-3):
        raise RuntimeError(f"matrix multiply n={n}: the mapped and the device results differ")
    samples = 3 if n >= 4096 else 5
    med = lambda op: statistics.median(_time_each(op, g.sync, samples))  # noqa: E731
    return matmul_row(n, med(lambda: cp.dot(ad, bd, out=cd)), med(private), med(shared))


def _matvec(g: _Gpu, m: Mode, say: Callable[[str], None]) -> dict[str, Any]:
    from offload.probe.gpu import _time

    cp, n = g.cp, m.matvec_n
    nb = n * n * 4
    say(f"matrix-vector n={n}")
    a = _mapped(g, nb)
    # Rows that sum to ~1 keep the iterated vector near 1: no overflow, no underflow.
    a.host.view(np.float32)[:] = np.random.default_rng(6).uniform(0, 2.0 / n, n * n).astype(np.float32)
    am = a.dev.view(cp.float32).reshape(n, n)
    ad = cp.empty((n, n), cp.float32)
    x0, x, y = cp.ones(n, cp.float32), cp.empty(n, cp.float32), cp.empty(n, cp.float32)
    res = cp.cuda.alloc_pinned_memory(n * 4)

    def iterate(mat: Any, k: int) -> None:
        u, v = x, y
        u[...] = x0
        for _ in range(k):
            cp.dot(mat, u, out=v)
            u, v = v, u
        g.d2h(res.ptr, u.data.ptr, n * 4)

    def private(k: int) -> Callable[[], None]:
        def op() -> None:
            g.h2d(ad.data.ptr, a.ptr, nb)
            iterate(ad, k)

        return op

    last = m.iterations[-1]
    private(last)()
    g.sync()
    want = np.frombuffer(res, np.float32, n).copy()
    iterate(am, last)
    g.sync()
    if not np.allclose(np.frombuffer(res, np.float32, n), want, rtol=1e-4):
        raise RuntimeError(
            f"matrix-vector n={n}: the mapped and device results differ after {last} iterations"
        )
    copy_s = statistics.median(
        _time(lambda: g.h2d(ad.data.ptr, a.ptr, nb), g.sync, m.min_sample_s, m.samples)
    )
    priv, shared = [], []
    for k in m.iterations:
        say(f"matrix-vector n={n}, {k} iterations")
        priv.append(statistics.median(_time_each(private(k), g.sync, m.matvec_samples)))
        shared.append(statistics.median(_time_each(lambda k=k: iterate(am, k), g.sync, m.matvec_samples)))
    what = ("x ← A·x in fp32 (cupy.dot), k times; private: copy A to device memory once, then iterate; "
            "shared: iterate reading A from mapped host memory; both copy x back")  # fmt: skip
    return {**matvec_summary(n, m.iterations, priv, shared, copy_s), "operation": what}


def _device(props: dict[str, Any], sms: int) -> dict[str, Any]:
    name = props["name"]
    return {
        "name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "sm_count": sms,
        "memory_bytes": int(props["totalGlobalMem"]),
        "l2_bytes": int(props.get("l2CacheSize", 0)),
        "can_map_host_memory": bool(props.get("canMapHostMemory", True)),
        "concurrent_managed_access": bool(props.get("concurrentManagedAccess", False)),
    }


def measure(quick: bool, say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every experiment on the current GPU; a part that raises is kept as {"error"} and the
    others still run."""
    import cupy as cp  # type: ignore[import-not-found]

    t0 = time.perf_counter()
    dev_id = cp.cuda.Device().id
    props = cp.cuda.runtime.getDeviceProperties(dev_id)
    g = _Gpu(cp, dev_id, props, cp.RawKernel(READ_KERNEL, "offload_read"),
             cp.RawKernel(CHASE_KERNEL, "offload_chase"), cp.zeros(1, cp.uint32))  # fmt: skip
    m = MODES[quick]
    method = (
        f"bandwidth: a warm-up, {m.samples} samples of repetitions lasting >= {m.min_sample_s * 1e3:g} ms "
        f"each, median and p10/p90 of the host's clock around launch + synchronise (first touch: "
        f"{m.touch_samples} single reads, each after the host wrote every page); latency: the device's "
        f"globaltimer around a one-thread chase of {CHASE_STEPS} links, L2 flushed before each sample"
    )
    result: dict[str, Any] = {
        **_header(), "available": True, "mode": "quick" if quick else "full",
        "device": _device(props, g.sms), "method": method,
    }  # fmt: skip
    for name, part in (
        ("channels", _channels),
        ("latency", _latency),
        ("matmul", _matmul),
        ("matvec", _matvec),
    ):
        try:
            result[name] = part(g, m, say)
        except Exception as e:  # keep what the other parts measure: device time is scarce
            result[name] = {"error": one_line(e)}
        g.free()
    result["seconds"] = time.perf_counter() - t0
    # NumPy scalars as plain numbers: the JSON must not fail after minutes of device time
    return json.loads(json.dumps(result, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
