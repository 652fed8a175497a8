"""`offload probe`: the effective numbers of the channels on this machine.

Runs the Rust probes (crates/probe) channel by channel, adds the environment, the io_uring
figures and the GPU section (skipped with a note when there is no GPU), relates every fitted
bandwidth to a named limit, and checks the orderings a sane machine must show. The profile is
one JSON document; :mod:`offload.probe.plot` draws it.

Where things live (docs/probe.md):

* this module — the profile: run the probes, environment, io_uring, orderings, unphysical figures;
* :mod:`~offload.probe.presets` — platform presets with sources, CTC and reuse-ratio what-ifs;
* :mod:`~offload.probe.gpu` — the GPU channels (pinned copies, launch) where a GPU is lent;
* :mod:`~offload.probe.plot` — the profile's figures (the seed's Figures 4 and 5, io_uring);
* :mod:`~offload.probe.cli` — ``offload probe ...``; the probes themselves are ``crates/probe``.

>>> from offload import probe
>>> profile = probe.run(quick=True, directory=".")
>>> profile["channels"]["ipc/pipe"]["fit"]["latency_s"]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import __version__, _native
from offload.host.machine import filesystem, machine

__all__ = ["CHANNELS", "check", "environment", "filesystem", "flag_unphysical", "gpu_section", "run"]

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
    """What the numbers depend on: the machine record (CPU, cores, VM or not, kernel, Python;
    :mod:`offload.host.machine`), the CPUs allowed, transparent huge pages, the memlock limit."""
    return machine() | {
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "transparent_hugepages": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "memlock_limit": _memlock(),
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


# A channel that delivers n bytes cannot beat copying them: memcpy reads and writes each byte,
# so a channel that only writes (or only reads) might approach twice its rate, never more.
PHYSICAL_FACTOR = 2.0


def flag_unphysical(channels: dict[str, Any]) -> dict[str, Any] | None:
    """Marks every IPC/ZeroMQ channel whose figures exceed PHYSICAL_FACTOR x the fastest memcpy
    measured in this run (any payload, caches included): ``channel["unphysical"]`` is the reason,
    or None. Such a figure is no transfer at all (ZeroMQ inproc hands over a pointer to the
    message). Returns the bound, or None when memory/memcpy was not measured (nothing flagged)."""
    mem = channels.get("memory/memcpy", {}).get("points")
    if not mem:
        return None
    best = max(mem, key=lambda p: p["bandwidth_bps"])
    bound = {
        "name": f"fastest memcpy measured here ({best['bytes']} B), x{PHYSICAL_FACTOR:g}",
        "memcpy_bps": best["bandwidth_bps"],
        "bandwidth_bps": PHYSICAL_FACTOR * best["bandwidth_bps"],
    }
    for name, ch in channels.items():
        ch["unphysical"] = None
        if not name.startswith(("ipc/", "zmq/")):  # memory/*: copies, by construction
            continue
        over = [p for p in ch.get("points", []) if p["bandwidth_bps"] > bound["bandwidth_bps"]]
        fit_bw = (ch.get("fit") or {}).get("bandwidth_bps")
        if over:
            p = max(over, key=lambda p: p["bandwidth_bps"])
            value, where = p["bandwidth_bps"], f" at {p['bytes']} B"
        elif fit_bw is not None and fit_bw > bound["bandwidth_bps"]:
            value, where = fit_bw, " (fitted B)"
        else:
            continue
        zero_copy = ": inproc hands over a pointer, no bytes move" if "inproc" in name else ""
        ch["unphysical"] = (
            f"{value / 1e9:,.0f} GB/s{where} is {value / best['bandwidth_bps']:,.0f}x the fastest memcpy "
            f"measured here ({best['bandwidth_bps'] / 1e9:.1f} GB/s){zero_copy}; not a transfer rate"
        )
    return bound


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
            if ch[name].get("unphysical"):
                detail += " (unphysical: no transfer, see the channel)"
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
        "directory": filesystem(directory),
        "channels": {},
    }
    for name in channels or CHANNELS:
        say(name)
        peer = ZMQ_PEER if name.startswith("zmq/") else None
        profile["channels"][name] = _native.probe_channel(name, quick, str(directory), None, peer)
    _limits(profile["channels"])
    profile["physical_bound"] = flag_unphysical(profile["channels"])
    if uring:
        say("io_uring")
        size, depths, secs = URING[quick]
        try:
            profile["io_uring"] = {
                "nop": _native.probe_uring_nop(quick),
                "random_reads": _native.probe_random_reads(str(directory), size, depths, secs),
            }
        except ValueError as e:
            fs = profile["directory"]
            on = f" ({fs['path']} is on {fs['type']})" if fs["memory_backed"] else ""
            profile["io_uring"] = {"skipped": f"{e}{on}"}
        else:
            fs = profile["directory"]
            reads = profile["io_uring"]["random_reads"]
            reads["memory_backed"] = fs["memory_backed"]
            if fs["memory_backed"]:
                reads["note"] = (
                    f"{fs['path']} is on {fs['type']}: memory, not a disk (give --dir on the disk to measure)"
                )
    say("gpu")
    profile["gpu"] = gpu_section(quick)
    profile["checks"] = check(profile)
    return profile
