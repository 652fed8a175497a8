"""Holding the host's DRAM to a budget for ssd-s / ssd-m in `disk` mode: the process moves into a
child memory cgroup (v1 `memory` controller) whose limit is its own anonymous memory plus the
budget, so the kernel's page cache of the table files can hold only the budget — the seed's
"DRAM limited to 1/4 of the tables" for real. Where the controller is missing or not writable the
run goes on unlimited and says so (`method: "none"` and the reason in the results).

The cgroup is a child of the process's own memory cgroup, so it nests under whatever already
limits the process; the process moves back and the child is removed afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from offload.host import cgroups

# Room for the process's own allocations while it runs (batches, sums, Python objects).
SLACK_BYTES = 64 << 20


def own_cgroup() -> Path | None:
    """The process's memory cgroup directory (v1 or v2), or None where there is none."""
    return cgroups.own("memory")


def unavailable_reason() -> str | None:
    """Why a memory cgroup cannot be made here, or None where it can."""
    return cgroups.unavailable_reason("memory", "memory.limit_in_bytes")


def _anon_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def page_cache_budget(budget_bytes: int) -> Iterator[dict[str, Any]]:
    """Runs the body with this process's memory held to its anonymous memory + SLACK + budget.
    Yields a dict that is filled with what happened: method, limit, peak usage, failcnt."""
    why = unavailable_reason()
    info: dict[str, Any] = {"budget_bytes": int(budget_bytes)}
    if why is not None:
        yield info | {"method": "none", "reason": why}
        return
    limit = _anon_bytes() + SLACK_BYTES + int(budget_bytes)
    child = cgroups.make_child(
        "memory", f"offload-recsys-{os.getpid()}", {"memory.limit_in_bytes": str(limit)}
    )
    info.update(method=f"cgroup-v{cgroups.version()}-memory", cgroup=str(child), limit_bytes=limit)
    try:
        yield info
        info["max_usage_bytes"], info["failcnt"] = cgroups.memory_peak_and_failures(child)
    finally:
        cgroups.leave_child("memory", child)
