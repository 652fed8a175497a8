"""Running `offload serve` as a child process (for sweeps, benchmarks and tests)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

# What each running daemon printed before it said it was serving (pid → text).
_STARTUP: dict[int, str] = {}


def rule_flags(ruletype: str | Path, rules: str | Path) -> list[str]:
    return ["--ruletype", str(ruletype), "--rules", str(rules)]


def start(*flags: str, timeout_s: float = 120.0, cpus: set[int] | None = None) -> subprocess.Popen[str]:
    """Starts `offload serve` with these CLI flags and returns once it says it is serving. With
    `cpus`, the daemon and all its threads run only on those CPUs. What it printed up to then is
    kept for `stop`."""
    cmd = [sys.executable, "-m", "offload.cli", "serve", *flags]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=pin)
    try:
        _STARTUP[proc.pid] = wait_for_word(proc, "serving", timeout_s)
    except RuntimeError as e:
        raise RuntimeError(f"offload serve {' '.join(flags)} {e}") from None
    return proc


def wait_for_word(proc: subprocess.Popen[str], word: str, timeout_s: float) -> str:
    """Reads the child's stderr until `word` appears; returns what it printed so far. Raw reads
    of the pipe, not readline: a child prints its start-up lines together, and a buffered
    readline would hold the word in its buffer while select waits on an empty pipe."""
    assert proc.stderr is not None
    fd, said = proc.stderr.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        chunk = os.read(fd, 65536) if ready else b""
        said += chunk
        if word.encode() in said:
            return said.decode(errors="replace")
        if (ready and not chunk) or proc.poll() is not None:
            raise RuntimeError(f"exited during start-up:\n{said.decode(errors='replace')}")
    proc.kill()
    raise RuntimeError(f"did not start within {timeout_s} s:\n{said.decode(errors='replace')}")


def stop(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """SIGTERM (queued requests are answered first); returns what the daemon printed."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout_s)
    return _STARTUP.pop(proc.pid, "") + err
