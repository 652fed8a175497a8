"""Running `offload serve` as a child process (for sweeps, benchmarks and tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from offload.host.children import wait_ready

# What each running daemon printed before it said it was serving (pid → text).
_STARTUP: dict[int, str] = {}


def rule_flags(ruletype: str | Path, rules: str | Path) -> list[str]:
    return ["--ruletype", str(ruletype), "--rules", str(rules)]


def start(
    *flags: str, timeout_s: float = 120.0, cpus: set[int] | None = None, program: list[str] | None = None
) -> subprocess.Popen[str]:
    """Starts `offload serve` (or `program`, e.g. an `offload-serve` binary, which takes the same
    flags) with these CLI flags and returns once it says it is serving. With `cpus`, the daemon
    and all its threads run only on those CPUs. What it printed up to then is kept for `stop`."""
    cmd = [*(program or [sys.executable, "-m", "offload.cli", "serve"]), *flags]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=pin)
    _STARTUP[proc.pid] = wait_ready(proc, "serving", timeout_s, f"offload serve {' '.join(flags)}", "stderr")
    return proc


def wait_for_word(proc: subprocess.Popen[str], word: str, timeout_s: float) -> str:
    """Reads the child's stderr until `word` appears; returns what it printed so far
    (:func:`offload.host.children.wait_ready`: raw reads, a deadline that fires)."""
    return wait_ready(proc, word, timeout_s, "offload serve", stream="stderr")


def stop(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """SIGTERM (queued requests are answered first); returns what the daemon printed."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout_s)
    return _STARTUP.pop(proc.pid, "") + err
