"""Children of this process's cgroups, on cgroup v1 and v2: where the machine lets us, a part holds
a process to a CPU quota or a memory limit for real (recsys' DRAM budget, a node's SmartNIC-like
budget); where it does not, the caller is told why and goes on unlimited, saying so.

Callers speak v1's file names (``memory.limit_in_bytes``, ``cpu.cfs_quota_us`` with
``cpu.cfs_period_us``); on a v2 (unified) host they are written as ``memory.max`` and ``cpu.max``.

Where the child goes:

* v1: under the process's own cgroup of that controller, so it nests under whatever already
  limits the process;
* v2: under the nearest ancestor of the process's cgroup that delegates the controller (lists it
  in ``cgroup.subtree_control``): v2 lets no process sit in a cgroup whose children have
  controllers, so the process's own cgroup usually cannot get children, and the tool does not
  rewire a cgroup other processes live in. A process is in one v2 cgroup only: a CPU and a
  memory child of the same name are one directory, holding both limits.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 10_000
"""CFS period of the CPU quotas made here: 10 ms, so that a quarter-core quota runs 2.5 ms in
every 10 rather than 25 in every 100 (a short query would otherwise stall for up to 75 ms,
which is throttling, not a slower CPU)."""

V2_FILES = {"memory.limit_in_bytes": "memory.max", "cpu.cfs_quota_us": "cpu.max"}
"""The v2 file that holds what a v1 file holds (the CPU period goes into ``cpu.max`` too)."""

_came_from: dict[Path, Path] = {}
"""v2: the cgroup this process left for each child it entered (where :func:`leave_child` goes)."""


def _self_cgroup_lines() -> list[str]:
    """``/proc/self/cgroup`` (a function so that tests can give another process's view)."""
    return Path("/proc/self/cgroup").read_text().splitlines()


def unified(root: Path = ROOT) -> bool:
    """Whether ``root`` is a cgroup v2 (unified hierarchy) mount."""
    return (root / "cgroup.controllers").exists()


def version(root: Path = ROOT) -> int:
    """1 or 2: the cgroup hierarchy the budgets here are made in."""
    return 2 if unified(root) else 1


def _own_v2(root: Path) -> Path | None:
    for line in _self_cgroup_lines():
        if line.startswith("0::"):
            return root / line[3:].lstrip("/")
    return None


def own(controller: str, root: Path = ROOT) -> Path | None:
    """The process's cgroup directory for ``controller`` (``cpu``, ``memory``), or None. On v2
    the one cgroup the process is in, whatever the controller."""
    try:
        if unified(root):
            return _own_v2(root)
        for line in _self_cgroup_lines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                base = root / controller
                if not base.exists():  # cpu and cpuacct are often mounted together
                    base = root / controllers
                return base / path.lstrip("/")
    except (OSError, ValueError):
        return None
    return None


def _delegates(d: Path, controller: str) -> bool:
    try:
        return controller in (d / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def parent_for(controller: str, root: Path = ROOT) -> Path | None:
    """Where a child limiting ``controller`` is made (see the module docstring), or None."""
    d = own(controller, root)
    if d is None or not unified(root):
        return d
    while True:
        if _delegates(d, controller):
            return d
        if d == root or root not in d.parents:
            return None
        d = d.parent


def _file(name: str, root: Path) -> str:
    return V2_FILES.get(name, name) if unified(root) else name


def unavailable_reason(controller: str, probe_file: str, root: Path = ROOT) -> str | None:
    """Why a child cgroup of ``controller`` cannot be made here (``probe_file`` is a v1 file the
    controller must have, e.g. ``memory.limit_in_bytes``), or None where it can."""
    v = version(root)
    d = parent_for(controller, root)
    if d is None:
        where = "no ancestor delegates it" if v == 2 else "no such controller"
        return f"no cgroup v{v} {controller} controller under {root} ({where})"
    if v == 1 and not (d / probe_file).exists():
        return f"no cgroup v1 {controller} controller under {root}"
    if not os.access(d, os.W_OK):
        return f"{d} is not writable (root needed)"
    return None


def _settings_for(settings: dict[str, str], root: Path) -> dict[str, str]:
    """``settings`` (v1 names) as the files to write on this host."""
    if not unified(root):
        return dict(settings)
    out: dict[str, str] = {}
    for name, value in settings.items():
        if name == "cpu.cfs_period_us":
            continue
        if name == "cpu.cfs_quota_us":
            period = settings.get("cpu.cfs_period_us", "100000")
            value = f"{'max' if int(value) < 0 else value} {period}"
        elif name == "memory.limit_in_bytes" and int(value) < 0:
            value = "max"
        out[_file(name, root)] = value
    return out


def make_child(controller: str, name: str, settings: dict[str, str], root: Path = ROOT) -> Path:
    """Creates (or reuses) the child ``name`` for ``controller`` with ``settings`` (v1 file ->
    value) and moves this whole process (every thread) into it."""
    parent = parent_for(controller, root)
    if parent is None:
        raise OSError(f"no cgroup v{version(root)} {controller} controller to make {name} in")
    came_from = own(controller, root)
    child = parent / name
    child.mkdir(exist_ok=True)
    for f, v in _settings_for(settings, root).items():
        (child / f).write_text(v)
    (child / "cgroup.procs").write_text(str(os.getpid()))
    if unified(root) and came_from is not None and came_from != child:
        _came_from.setdefault(child, came_from)
    return child


def leave_child(controller: str, child: Path, root: Path = ROOT) -> None:
    """Moves this process back where it was before :func:`make_child` and removes ``child``
    (best effort)."""
    back = _came_from.pop(child, child.parent)
    if not child.exists():  # v2: the CPU and memory children were one, and it is left already
        return
    try:
        (back / "cgroup.procs").write_text(str(os.getpid()))
        if controller == "memory" and not unified(root):
            try:  # drop the child's page cache so rmdir succeeds at once
                (child / "memory.force_empty").write_text("0")
            except OSError:
                pass
        child.rmdir()
    except OSError:
        pass


def memory_peak_and_failures(child: Path) -> tuple[int, int]:
    """A memory child's peak usage in bytes and how often it hit its limit (v1: ``failcnt``;
    v2: ``memory.events``' ``max``; a v2 kernel before 5.19 has no ``memory.peak``: -1)."""
    if (child / "memory.max_usage_in_bytes").exists():
        peak = int((child / "memory.max_usage_in_bytes").read_text())
        return peak, int((child / "memory.failcnt").read_text())
    peak_file = child / "memory.peak"
    peak = int(peak_file.read_text()) if peak_file.exists() else -1
    events = dict(line.split() for line in (child / "memory.events").read_text().splitlines() if line)
    return peak, int(events.get("max", 0))


def sweep(controller: str, prefix: str, root: Path = ROOT) -> list[Path]:
    """Removes our children named ``prefix*`` that no process uses any more (left by processes
    that were killed before they could leave); returns those removed."""
    parent = parent_for(controller, root)
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
