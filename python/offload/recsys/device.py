"""The RM-SSD device emulator as its own process: ``python -m offload.recsys.device SHM`` serves
the shared-memory channel SHM (the host engine's memfd, ``/proc/<pid>/fd/<n>``) until the host
closes it or is gone. The host (``Engine(..., device="process")``) starts it, pins it to its own
CPU and, where cgroup v1's memory controller is writable, holds it to a memory budget; the work
itself is ``crates/recsys/src/device.rs`` (``offload._native.recsys_device_serve``).
"""

from __future__ import annotations

import sys

from offload import _native


def command() -> list[str]:
    """The command line that starts a device process (the channel's path is appended)."""
    return [sys.executable, "-m", "offload.recsys.device"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m offload.recsys.device SHM", file=sys.stderr)
        return 2
    try:
        _native.recsys_device_serve(args[0])
    except _native.RecsysError as e:
        print(f"offload recsys device: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
