"""The RM-SSD device emulator as its own process: ``python -m offload.recsys.device
[--memory-cgroup NAME --memory-bytes N] SHM`` serves the shared-memory channel SHM (the host
engine's memfd, ``/proc/<pid>/fd/<n>``) until the host closes it or is gone. The host
(``Engine(..., device="process")``) starts it and pins it to its own CPU; where cgroup v1's
memory controller is writable, the device first joins a child memory cgroup NAME of its own
(the host's) cgroup, made by ``offload.host.cgroups`` with a limit of N bytes. The work itself
is ``crates/recsys/src/device/`` (``offload._native.recsys_device_serve``).

The device ends when its host closes the channel or dies (``PR_SET_PDEATHSIG``), never on its
own at Ctrl-C: the host starts it in a process group of its own, so a terminal's SIGINT reaches
only the host (which ends the run with one line, "interrupted", and closes the device), and it
ignores SIGINT sent to it directly, so it never prints a ``KeyboardInterrupt`` traceback.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
from pathlib import Path
from typing import Any

from offload import _native
from offload.host import cgroups

CGROUP_PREFIX = "offload-recsys-device-"
_budgets = itertools.count()


def budget_cgroup(memory_bytes: int | None) -> tuple[Path | None, dict[str, Any]]:
    """The memory cgroup a device process started by this host joins to be held to
    ``memory_bytes`` (None where there is none), and what ``device_info`` reports of it:
    ``memory_limit_bytes`` and ``memory_cgroup``, or ``memory_reason`` saying why no limit."""
    if memory_bytes is None:
        return None, {
            "memory_limit_bytes": None,
            "memory_cgroup": None,
            "memory_reason": "no memory limit asked",
        }
    why = cgroups.unavailable_reason("memory", "memory.limit_in_bytes")
    own = cgroups.own("memory")
    if why is not None or own is None:
        reason = why or "no cgroup v1 memory controller"
        return None, {"memory_limit_bytes": None, "memory_cgroup": None, "memory_reason": reason}
    # The device inherits the host's cgroup, so its own child is this path.
    path = own / f"{CGROUP_PREFIX}{os.getpid()}-{next(_budgets)}"
    return path, {"memory_limit_bytes": int(memory_bytes), "memory_cgroup": str(path), "memory_reason": None}


def command(cgroup: Path | None = None, memory_bytes: int | None = None) -> list[str]:
    """The command line that starts a device process (the channel's path is appended), held to
    ``memory_bytes`` in ``cgroup`` where both are given."""
    cmd = [sys.executable, "-m", "offload.recsys.device"]
    if cgroup is not None and memory_bytes is not None:
        cmd += ["--memory-cgroup", cgroup.name, "--memory-bytes", str(int(memory_bytes))]
    return cmd


def release(cgroup: Path) -> None:
    """Removes a device's memory cgroup once its process is gone (best effort). The host never
    joined it, so `leave_child` moving the host to the cgroup's parent changes nothing."""
    cgroups.leave_child("memory", cgroup)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when the device ends
    p = argparse.ArgumentParser(prog="python -m offload.recsys.device")
    p.add_argument("--memory-cgroup", help="a child memory cgroup (of this process's) to join")
    p.add_argument("--memory-bytes", type=int, help="its memory.limit_in_bytes")
    p.add_argument("shm", help="the channel: the host's memfd, /proc/<pid>/fd/<n>")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.memory_cgroup is not None and args.memory_bytes is not None:
        limit = {"memory.limit_in_bytes": str(args.memory_bytes)}
        try:
            cgroups.make_child("memory", args.memory_cgroup, limit)
        except OSError as e:
            print(
                f"offload recsys device: cannot join memory cgroup {args.memory_cgroup}: {e}", file=sys.stderr
            )
            return 1
    try:
        _native.recsys_device_serve(args.shm)
    except _native.RecsysError as e:
        print(f"offload recsys device: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
