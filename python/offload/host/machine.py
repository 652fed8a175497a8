"""The machine a figure was measured on: one record for every benchmark, probe and report.

:func:`machine` gives the dict (no host name: the records are committed), :func:`describe` the
same in one line of words. Keys are kept stable: readers (offload.report, the plots, the CLI tables)
read ``cpu``, ``cores``, ``cpus`` and ``memory_bytes``.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path
from typing import Any

# statfs(2) f_type of the file systems that live in memory, and of a few common disk ones (any
# other is given in hex).
MEMORY_FS = {0x01021994: "tmpfs", 0x858458F6: "ramfs"}
_DISK_FS = {
    0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x794C7630: "overlay", 0x2FC12FC1: "zfs",
    0x6969: "nfs", 0x65735546: "fuse", 0x4D44: "vfat", 0x5346544E: "ntfs", 0xF2F52010: "f2fs",
}  # fmt: skip


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` knows."""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def virtual_machine() -> bool:
    """Whether this runs under a hypervisor (the CPU flag, or /sys/hypervisor)."""
    if Path("/sys/hypervisor/type").exists():
        return True
    flags = next((ln for ln in _read("/proc/cpuinfo").splitlines() if ln.startswith("flags")), "")
    return " hypervisor" in flags


def memory_bytes() -> int:
    """MemTotal (the page cache's ceiling), 0 where unknown."""
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def filesystem(directory: str | Path) -> dict[str, Any]:
    """The file system `directory` is on (statfs f_type) and whether it lives in memory (tmpfs,
    ramfs). Linux >= 6.6 opens tmpfs files with O_DIRECT, so a disk probe alone cannot tell."""
    path = Path(directory).resolve()
    buf = ctypes.create_string_buffer(256)  # struct statfs (120 B on 64-bit Linux); f_type comes first
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return {
            "path": str(path),
            "type": f"unknown ({os.strerror(ctypes.get_errno())})",
            "memory_backed": None,
        }
    magic = ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF
    name = MEMORY_FS.get(magic) or _DISK_FS.get(magic) or f"0x{magic:x}"
    return {"path": str(path), "type": name, "memory_backed": magic in MEMORY_FS}


def machine(path: str | Path | None = None) -> dict[str, Any]:
    """What the numbers were measured on: CPU model, logical CPUs (``cores``, and ``cpus`` for
    the older records that read it), memory, kernel, system, architecture, VM or not, Python.
    With ``path``, also the disk under it: ``work_dir``, ``disk_free_bytes``, ``file_system``."""
    out: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cpus": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "kernel": platform.release(),
        "system": platform.system(),
        "platform": platform.platform(),
        "arch": platform.machine(),
        "virtual_machine": virtual_machine(),
        "python": platform.python_version(),
    }
    if path is not None:
        st = os.statvfs(path)
        out |= {"work_dir": str(path), "disk_free_bytes": st.f_bavail * st.f_frsize,
                "file_system": filesystem(path)["type"]}  # fmt: skip
    return out


def describe(m: dict[str, Any] | None = None) -> str:
    """The machine in one line of words (``m``: a record from :func:`machine`, else this one)."""
    m = m or machine()
    where = "VM" if m.get("virtual_machine") else "machine"
    return (f"{m['cores']} vCPU {where}, {m['cpu']}, {m['arch']}, "
            f"{m['memory_bytes'] / 2**30:.0f} GiB, {m['system']} {m['kernel']}")  # fmt: skip
