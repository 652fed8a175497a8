"""`offload probe`: the effective numbers of the channels on this machine.

Runs the Rust probes (crates/probe) channel by channel, adds the environment, the io_uring
figures and the GPU section (skipped with a note when there is no GPU), relates every fitted
bandwidth to a named limit, and checks the orderings a sane machine must show. The profile is
one JSON document; :mod:`offload.probe.plot` draws it.

>>> from offload import probe
>>> profile = probe.run(quick=True, directory=".")
>>> profile["channels"]["ipc/pipe"]["fit"]["latency_s"]
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import __version__, _native

__all__ = ["CHANNELS", "check", "environment", "gpu_section", "run"]

CHANNELS: list[str] = list(_native.probe_channels())

# The ZeroMQ peer runs in its own process, like libzmq's perf tools (the Rust side appends
# `zmq-peer ROLE DATA CONTROL CPU`).
ZMQ_PEER = [
    sys.executable,
    "-c",
    "import sys; from offload import _native; _native.probe_zmq_peer(*sys.argv[2:])",
]

# io_uring random reads: (file size, queue depths, seconds per depth) per mode.
URING = {
    True: (64 << 20, [1, 4, 16, 64], 0.25),
    False: (1 << 30, [1, 2, 4, 8, 16, 32, 64, 128], 2.0),
}


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def environment() -> dict[str, Any]:
    """What the numbers depend on: CPU, cores, VM or not, kernel, transparent huge pages."""
    cpuinfo = _read("/proc/cpuinfo")
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line), "")
    flags = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    return {
        "cpu": model or platform.processor(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "virtual_machine": " hypervisor" in flags,
        "kernel": platform.release(),
        "transparent_hugepages": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "memlock_limit": _memlock(),
        "python": platform.python_version(),
    }


def _memlock() -> str:
    for line in _read("/proc/self/limits").splitlines():
        if line.startswith("Max locked memory"):
            return " ".join(line.split()[3:5])
    return ""


def gpu_section(quick: bool = True) -> dict[str, Any]:
    """The GPU section: measured with CuPy when a GPU is usable, else why it was skipped."""
    from offload.probe import gpu as gpu_probe

    smi = shutil.which("nvidia-smi")
    link = ""
    if smi is not None:
        try:
            link = subprocess.run(
                [smi, "--query-gpu=name,pcie.link.gen.max,pcie.link.width.max", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout.strip()  # fmt: skip
        except (subprocess.SubprocessError, OSError) as e:
            link = f"nvidia-smi failed: {e}"
    if gpu_probe.available():
        return {**gpu_probe.measure(quick), "nvidia_smi": link}
    if smi is None:
        return {"present": False, "note": "no NVIDIA GPU (nvidia-smi not found): GPU channels skipped"}
    return {
        "present": False,
        "nvidia_smi": link,
        "note": "a GPU is present but CuPy is not installed (pip install cupy-cuda12x): GPU channels skipped",
    }


def _limits(channels: dict[str, Any]) -> None:
    """Relates each fitted bandwidth to a named limit: for CPU-side channels, the DRAM copy
    bandwidth measured here (no IPC can beat memcpy for long)."""
    mem = channels.get("memory/memcpy", {})
    fit = mem.get("fit") or {}
    if mem.get("points"):
        # The fit (DRAM-sized copies) or, in quick mode, the largest copy measured.
        bps = fit.get("bandwidth_bps") or mem["points"][-1]["bandwidth_bps"]
        limit = {"name": "memcpy on this machine (largest payloads)", "bandwidth_bps": bps}
        for ch in channels.values():
            b = (ch.get("fit") or {}).get("bandwidth_bps")
            ch["limit"] = limit
            ch["fraction_of_limit"] = b / bps if b and bps else None  # b null: unbounded


def check(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """The orderings and ratios every machine should show (never absolute values)."""
    ch = profile["channels"]
    out: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str) -> None:
        out.append({"check": name, "ok": bool(ok), "detail": detail})

    def point(name: str, n: int) -> dict[str, Any] | None:
        return next((p for p in ch.get(name, {}).get("points", []) if p["bytes"] == n), None)

    fresh, pre = ch.get("memory/copy-fresh"), ch.get("memory/copy-prefaulted")
    if fresh and pre:
        n = max(set(p["bytes"] for p in fresh["points"]) & set(p["bytes"] for p in pre["points"]))
        f, p = point("memory/copy-fresh", n), point("memory/copy-prefaulted", n)
        if f and p:
            r = p["bandwidth_bps"] / f["bandwidth_bps"]
            add("copy into a prefaulted buffer >= 2x a copy into a fresh mapping", r >= 2,
                f"{n >> 20} MiB: {r:.1f}x")  # fmt: skip
    # Shared memory across two cores (spinning needs both), the kernel channels on one core: on
    # a VM a cross-core wake-up (tens of µs) would hide each channel's own cost.
    lat = {k: point(k, 64) for k in ("ipc/shared-memory", "ipc/pipe-1cpu", "ipc/tcp-loopback-1cpu")}
    if all(lat.values()):
        # The 10th percentile: wake-up noise on a shared machine only ever adds time.
        s, pp, t = (lat[k]["p10_s"] for k in lat)  # type: ignore[index]
        add("64 B round trip: shared memory < pipe < TCP loopback (kernel channels on one core)", s < pp < t,
            f"p10 {s * 1e6:.2f} < {pp * 1e6:.1f} < {t * 1e6:.1f} µs")  # fmt: skip
    for name in [k for k in ch if k.startswith(("ipc/", "zmq/"))]:
        pts = ch[name]["points"]
        if len(pts) >= 2:
            lo, hi = pts[0]["bandwidth_bps"], pts[-1]["bandwidth_bps"]
            detail = f"{pts[0]['bytes']} B: {lo / 1e6:.1f} -> {pts[-1]['bytes']} B: {hi / 1e6:.0f} MB/s"
            add(f"{name}: bandwidth rises with message size", hi > 2 * lo, detail)
    rr = profile.get("io_uring", {}).get("random_reads")
    if rr and len(rr["points"]) >= 2:
        a, b = rr["points"][0], rr["points"][-1]
        detail = f"QD{a['queue_depth']} {a['iops']:,.0f} -> QD{b['queue_depth']} {b['iops']:,.0f} IOPS"
        add("io_uring random reads: more IOPS at a deeper queue", b["iops"] > a["iops"], detail)
    return out


def run(
    quick: bool = False,
    directory: str | Path = ".",
    channels: Sequence[str] | None = None,
    uring: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measures the channels (all by default) and io_uring; returns the profile."""
    say = progress or (lambda _m: None)
    directory = Path(directory)
    profile: dict[str, Any] = {
        "tool": "offload probe",
        "version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if quick else "full",
        "environment": environment(),
        "method": "median of timed samples (each >= 0.5 ms quick / 2 ms full, batched); two-party "
        "channels run on two different CPUs (ZeroMQ ipc/tcp peers in their own process); "
        "fit T(n) = L + n/B minimising relative error",
        "channels": {},
    }
    for name in channels or CHANNELS:
        say(name)
        peer = ZMQ_PEER if name.startswith("zmq/") else None
        profile["channels"][name] = json.loads(_native.probe_channel(name, quick, str(directory), None, peer))
    _limits(profile["channels"])
    if uring:
        say("io_uring")
        size, depths, secs = URING[quick]
        try:
            profile["io_uring"] = {
                "nop": json.loads(_native.probe_uring_nop(quick)),
                "random_reads": json.loads(_native.probe_random_reads(str(directory), size, depths, secs)),
            }
        except ValueError as e:
            profile["io_uring"] = {"skipped": str(e)}
    say("gpu")
    profile["gpu"] = gpu_section(quick)
    profile["checks"] = check(profile)
    return profile
