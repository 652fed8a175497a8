"""A node's resource budget — what makes a process on this machine a believable SmartNIC: a CPU
quota and a thread count, a memory limit, and a link (:mod:`~offload.host.links`).

A budget is a named profile or explicit numbers. ``core`` is one whole core of this machine.
``bluefield2`` follows the seed (003): the
host is about 4x faster than a BlueField-2 at the same thread count, so the node gets a quarter
of a core per thread; 16 GB of DRAM on the card (a 4 GiB share here, the machine is small);
its 100 GbE port shaped to 10 Gbit/s and 50 µs here, as loopback cannot carry more reliably.

CPU and memory limits are cgroup children (:mod:`offload.host.cgroups`, v1 or v2) where the
controllers are writable; else the node pins itself to its thread count of CPUs and says the quota is
missing. :func:`apply` reports what was done.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from offload.host import cgroups
from offload.host.links import Link


@dataclass(frozen=True)
class Profile:
    """A node's budget. ``cpu_per_thread``: the share of one core each thread gets (1.0: a whole
    core; None: no quota); ``memory_bytes``: None for no limit."""

    name: str
    threads: int
    cpu_per_thread: float | None
    memory_bytes: int | None
    link: Link

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.cpu_per_thread is not None and not 0 < self.cpu_per_thread <= 1:
            raise ValueError(f"cpu per thread must be in (0, 1], got {self.cpu_per_thread}")

    def with_(self, **changes: Any) -> Profile:
        return replace(self, **changes)

    def system(self, base: Profile) -> str:
        """The system type the time models know this node by: the profile's name, or with the
        compute it was given where that differs from ``base`` (links and memory do not count)."""
        if (self.threads, self.cpu_per_thread) == (base.threads, base.cpu_per_thread):
            return self.name
        return f"{self.name}-{self.threads}x{self.cpu_per_thread or 1:g}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PROFILES: dict[str, Profile] = {
    "host": Profile("host", threads=os.cpu_count() or 1, cpu_per_thread=None, memory_bytes=None, link=Link()),
    "bluefield2": Profile("bluefield2", 1, 0.25, 4 << 30, Link(10_000, 0.05)),
    "core": Profile("core", 1, 1.0, 4 << 30, Link()),
}
"""Named budgets. ``bluefield2``'s figures and their sources are in the module docstring."""


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; one of {', '.join(PROFILES)}")
    return PROFILES[name]


def apply(p: Profile, tag: str) -> dict[str, Any]:
    """Holds this process to ``p``'s CPU and memory (for good: a node keeps its budget until it
    exits). Returns what was done: ``cpu`` and ``memory`` each a method and details or a reason.
    ``tag`` names the cgroups (``offload-node-<tag>``)."""
    out: dict[str, Any] = {"profile": p.name, "threads": p.threads}
    for controller in ("cpu", "memory"):
        cgroups.sweep(controller, "offload-node-")
    name = f"offload-node-{tag}-{os.getpid()}"
    out["cpu"] = _cpu(p, name)
    out["memory"] = _memory(p, name)
    return out


def _cpu(p: Profile, name: str) -> dict[str, Any]:
    if p.cpu_per_thread is None:
        return {"method": "none", "reason": "the profile sets no CPU quota"}
    quota = max(1000, round(p.threads * p.cpu_per_thread * cgroups.PERIOD_US))
    why = cgroups.unavailable_reason("cpu", "cpu.cfs_quota_us")
    if why is None:
        settings = {"cpu.cfs_period_us": str(cgroups.PERIOD_US), "cpu.cfs_quota_us": str(quota)}
        child = cgroups.make_child("cpu", name, settings)
        return {
            "method": f"cgroup-v{cgroups.version()}-cpu",
            "cgroup": str(child),
            "quota_us": quota,
            "period_us": cgroups.PERIOD_US,
        }
    cpus = sorted(os.sched_getaffinity(0))[-p.threads :]
    os.sched_setaffinity(0, cpus)
    return {"method": "pinned", "cpus": cpus, "reason": f"no CPU quota: {why}"}


def _memory(p: Profile, name: str) -> dict[str, Any]:
    if p.memory_bytes is None:
        return {"method": "none", "reason": "the profile sets no memory limit"}
    why = cgroups.unavailable_reason("memory", "memory.limit_in_bytes")
    if why is not None:
        return {"method": "none", "reason": why}
    child = cgroups.make_child("memory", name, {"memory.limit_in_bytes": str(p.memory_bytes)})
    return {
        "method": f"cgroup-v{cgroups.version()}-memory",
        "cgroup": str(child),
        "limit_bytes": p.memory_bytes,
    }


def release(applied: dict[str, Any]) -> None:
    """Leaves the cgroups :func:`apply` made (at node shutdown)."""
    for controller in ("cpu", "memory"):
        info = applied.get(controller, {})
        if "cgroup" in info:
            cgroups.leave_child(controller, Path(info["cgroup"]))
