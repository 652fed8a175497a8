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

MEMORY_ROOT = Path("/sys/fs/cgroup/memory")
# Room for the process's own allocations while it runs (batches, sums, Python objects).
SLACK_BYTES = 64 << 20


def own_cgroup(root: Path = MEMORY_ROOT) -> Path | None:
    """The process's v1 memory cgroup directory, or None where there is none."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return root / path.lstrip("/")
    except OSError:
        return None
    return None


def unavailable_reason(root: Path = MEMORY_ROOT) -> str | None:
    """Why a memory cgroup cannot be made here, or None where it can."""
    own = own_cgroup(root)
    if own is None or not (own / "memory.limit_in_bytes").exists():
        return f"no cgroup v1 memory controller at {root}"
    if not os.access(own, os.W_OK):
        return f"{own} is not writable (root needed)"
    return None


def _anon_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def page_cache_budget(budget_bytes: int, root: Path = MEMORY_ROOT) -> Iterator[dict[str, Any]]:
    """Runs the body with this process's memory held to its anonymous memory + SLACK + budget.
    Yields a dict that is filled with what happened: method, limit, peak usage, failcnt."""
    why = unavailable_reason(root)
    info: dict[str, Any] = {"budget_bytes": int(budget_bytes)}
    if why is not None:
        yield info | {"method": "none", "reason": why}
        return
    own = own_cgroup(root)
    assert own is not None
    child = own / f"offload-recsys-{os.getpid()}"
    child.mkdir(exist_ok=True)
    limit = _anon_bytes() + SLACK_BYTES + int(budget_bytes)
    info.update(method="cgroup-v1-memory", cgroup=str(child), limit_bytes=limit)
    try:
        (child / "memory.limit_in_bytes").write_text(str(limit))
        (child / "cgroup.procs").write_text(str(os.getpid()))
        yield info
        info["max_usage_bytes"] = int((child / "memory.max_usage_in_bytes").read_text())
        info["failcnt"] = int((child / "memory.failcnt").read_text())
    finally:
        (own / "cgroup.procs").write_text(str(os.getpid()))
        # Drop what the child still holds (its page cache) so rmdir succeeds at once.
        try:
            (child / "memory.force_empty").write_text("0")
        except OSError:
            pass
        child.rmdir()
