"""cgroup v1 children of this process's own cgroups: where the machine lets us, a part holds a
process to a CPU quota or a memory limit for real (recsys' DRAM budget, a node's SmartNIC-like
budget); where it does not, the caller is told why and goes on unlimited, saying so.

A child is made under the process's own cgroup of that controller, so it nests under whatever
already limits the process.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 10_000
"""CFS period of the CPU quotas made here: 10 ms, so that a quarter-core quota runs 2.5 ms in
every 10 rather than 25 in every 100 (a short query would otherwise stall for up to 75 ms,
which is throttling, not a slower CPU)."""


def own(controller: str, root: Path = ROOT) -> Path | None:
    """The process's v1 cgroup directory for ``controller`` (``cpu``, ``memory``), or None."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                base = root / controller
                if not base.exists():  # cpu and cpuacct are often mounted together
                    base = root / controllers
                return base / path.lstrip("/")
    except OSError:
        return None
    return None


def unified(root: Path = ROOT) -> bool:
    """Whether ``root`` is a cgroup v2 (unified hierarchy) mount: budgets here are v1 only."""
    return (root / "cgroup.controllers").exists()


def unavailable_reason(controller: str, probe_file: str, root: Path = ROOT) -> str | None:
    """Why a child cgroup of ``controller`` cannot be made here (``probe_file`` is a file the
    controller must have, e.g. ``memory.limit_in_bytes``), or None where it can. A cgroup v2
    host is said to be one, not taken for a host without cgroups."""
    if unified(root):
        return "cgroup v2 host: not supported yet"
    d = own(controller, root)
    if d is None or not (d / probe_file).exists():
        return f"no cgroup v1 {controller} controller under {root}"
    if not os.access(d, os.W_OK):
        return f"{d} is not writable (root needed)"
    return None


def make_child(controller: str, name: str, settings: dict[str, str], root: Path = ROOT) -> Path:
    """Creates (or reuses) the child ``name`` of our ``controller`` cgroup with ``settings``
    (file -> value) and moves this whole process (every thread) into it."""
    parent = own(controller, root)
    if parent is None:
        raise OSError(f"no cgroup v1 {controller} controller")
    child = parent / name
    child.mkdir(exist_ok=True)
    for f, v in settings.items():
        (child / f).write_text(v)
    (child / "cgroup.procs").write_text(str(os.getpid()))
    return child


def leave_child(controller: str, child: Path, root: Path = ROOT) -> None:
    """Moves this process back to its parent cgroup and removes ``child`` (best effort)."""
    parent = child.parent
    try:
        (parent / "cgroup.procs").write_text(str(os.getpid()))
        if controller == "memory":
            try:  # drop the child's page cache so rmdir succeeds at once
                (child / "memory.force_empty").write_text("0")
            except OSError:
                pass
        child.rmdir()
    except OSError:
        pass


def sweep(controller: str, prefix: str, root: Path = ROOT) -> list[Path]:
    """Removes our children named ``prefix*`` that no process uses any more (left by processes
    that were killed before they could leave); returns those removed."""
    parent = own(controller, root)
    removed: list[Path] = []
    if parent is None or not parent.exists():
        return removed
    for d in parent.glob(f"{prefix}*"):
        try:
            if d.is_dir() and not (d / "cgroup.procs").read_text().strip():
                d.rmdir()
                removed.append(d)
        except OSError:
            continue
    return removed
