"""Running `offload serve` as a child process (for sweeps, benchmarks and tests)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path


def rule_flags(ruletype: str | Path, rules: str | Path) -> list[str]:
    return ["--ruletype", str(ruletype), "--rules", str(rules)]


def start(*flags: str, timeout_s: float = 120.0, cpus: set[int] | None = None) -> subprocess.Popen[str]:
    """Starts `offload serve` with these CLI flags and returns once it says it is serving. With
    `cpus`, the daemon and all its threads run only on those CPUs."""
    cmd = [sys.executable, "-m", "offload.cli", "serve", *flags]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=pin)
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready and "serving" in proc.stderr.readline():
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"offload serve {' '.join(flags)} exited during start-up")
    proc.kill()
    raise RuntimeError(f"offload serve {' '.join(flags)} did not start within {timeout_s} s")


def stop(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """SIGTERM (queued requests are answered first); returns what the daemon printed."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout_s)
    return err
