"""Starting a child and waiting until it says it is ready, with a deadline that fires.

Raw reads of the pipe under ``select``, lines buffered here: a blocking ``readline`` would wait
past any deadline for a child that prints nothing, and a buffered one would hold the ready line
in its buffer while ``select`` waits on an empty pipe (a child often prints its start-up lines
in one write).
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from typing import IO, Any

Ready = str | Callable[[str], bool]
"""A word that must appear in a complete line, or a predicate on the complete lines so far."""


class LineReader:
    """The lines of one pipe of a child, read without blocking past a deadline. What was read
    beyond the line asked for is kept for the next call."""

    def __init__(self, proc: subprocess.Popen[Any], stream: IO[Any] | None, what: str) -> None:
        assert stream is not None, f"{what}: the pipe to read is not a pipe"
        self.proc, self.fd, self.what = proc, stream.fileno(), what
        self.buf = b""
        self.said = ""
        """Everything returned so far (for error messages)."""

    def _tail(self) -> str:
        text = (self.said + self.buf.decode(errors="replace")).strip()
        return text[-400:] or "nothing"

    def until(self, ready: Ready, deadline_s: float) -> str:
        """The complete lines read up to the first at which ``ready`` holds (a word in that line,
        or a predicate on all the lines so far); RuntimeError naming the child and what it
        printed last when ``deadline_s`` passes (the child is killed) or it exits first."""
        deadline = time.monotonic() + deadline_s
        done = (lambda text: ready in text) if isinstance(ready, str) else ready
        tested = 0  # buf[:tested] is whole lines at none of which `ready` held
        while True:
            while (nl := self.buf.find(b"\n", tested)) >= 0:  # one line at a time: stop at the first
                tested = nl + 1
                text = self.buf[:tested].decode(errors="replace")
                if done(text):
                    self.buf, self.said = self.buf[tested:], self.said + text
                    return text
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise RuntimeError(
                    f"{self.what} did not start within {deadline_s:g} s; it printed last: {self._tail()}"
                )
            readable, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            chunk = os.read(self.fd, 65536) if readable else b""
            self.buf += chunk
            if (readable and not chunk) or (not readable and self.proc.poll() is not None):
                try:
                    code: int | None = self.proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    code = None
                how = "closed its output" if code is None else f"exited with code {code}"
                raise RuntimeError(
                    f"{self.what} did not start: it {how} before saying it was ready; "
                    f"it printed last: {self._tail()}"
                )

    def rest(self) -> str:
        """What was read beyond the last answer (taken: it is not returned again)."""
        text, self.buf = self.buf.decode(errors="replace"), b""
        self.said += text
        return text


def wait_ready(
    proc: subprocess.Popen[Any], ready: Ready, deadline_s: float, what: str, stream: str = "stdout"
) -> str:
    """Waits until the child ``proc`` says it is ready on its ``stream`` ("stdout" or "stderr"):
    ``ready`` is a word that must appear in a complete line, or a predicate on the complete lines
    so far. Returns everything read (the ready line and any read with it). RuntimeError naming
    ``what`` and the child's last output when ``deadline_s`` passes (the child is killed) or the
    child exits first (with its exit code)."""
    r = LineReader(proc, getattr(proc, stream), what)
    return r.until(ready, deadline_s) + r.rest()
