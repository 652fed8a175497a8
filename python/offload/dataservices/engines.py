"""Where a node runs offloaded queries: engine processes it can stop.

A DataFusion query runs in native threads that do not yield while they compute (a three-way
cross join stayed in one poll for minutes, its client long gone: cancelling its future, dropping
its stream, SIGTERM to the node, none of them stopped it). So a node runs each offloaded plan in
an engine process of its own pool, and stops a query by killing its process:

    Flight thread ──request──▶ engine process (warm: DataFusion loaded, tables memory-mapped)
         ▲                          │ Arrow IPC stream on its stdout
         └── bounded queue ◀── reader thread

* the node keeps each data set version as an Arrow IPC file in a spool directory of its own
  (:class:`Spool`), which engines memory-map: no copy per query;
* a query waits for its next batch in slices of :data:`POLL_S`, and between them asks whether
  to stop: its time limit (``--query-timeout``), its client gone (the call cancelled), the node
  shutting down past its drain time. Stopping kills the engine (SIGKILL: it ends at once,
  whatever it computes) and a fresh one takes its place;
* a pool of at most ``engines`` processes, so a runaway query holds one of them and the others
  serve other clients; a query that finds them all busy waits for one within its time limit;
* an engine ignores SIGINT (a Ctrl-C at the terminal is the node's to handle) and ends once
  the node is gone (a watchdog on its parent), so an orphan never computes on.

What it costs a query is in docs/dataservices.md (the request to the engine and the result
through a pipe).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

POLL_S = 0.05
"""How often a query waiting for its next batch asks whether to stop."""
START_S = 60.0
"""The most an engine process may take to start (imports, DataFusion's first run)."""
QUEUED = 4
"""Batches an engine may have sent ahead of the Flight stream."""


class Stopped(Exception):
    """A query stopped before its end; the message says why (its time limit, its client gone,
    the node shutting down), in words for its client."""


class EngineError(Exception):
    """The engine could not run a plan (the message is DataFusion's first line) or died."""


class Spool:
    """A node's directory of data set files (Arrow IPC, one per data set version), removed when
    the node stops; engines memory-map them. It names its owner (``owner``: the node's pid), so
    that the directory of a node killed before it could remove its own is removed by the next
    node that starts (:func:`sweep`)."""

    PREFIX = "offload-node-"

    def __init__(self, tag: str) -> None:
        sweep()
        self.path = Path(tempfile.mkdtemp(prefix=f"{self.PREFIX}{tag}-"))
        (self.path / "owner").write_text(f"{os.getpid()}\n")

    def put(self, name: str, version: int, table: pa.Table) -> Path:
        """Writes ``table`` as the file of ``name`` at ``version`` (temp name, then renamed: an
        engine never maps half a file)."""
        path = self.path / f"{name}.{version}.arrow"
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        tmp.rename(path)
        return path

    def drop(self, path: Path | None) -> None:
        if path is not None:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def sweep() -> list[Path]:
    """Removes the spool directories (of this user's temporary directory) whose owner is no
    longer running; returns them. A directory without an owner file, or whose owner runs, stays."""
    gone = []
    for d in Path(tempfile.gettempdir()).glob(f"{Spool.PREFIX}*"):
        try:
            pid = int((d / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not _running(pid):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    return gone


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class Engine:
    """One engine process and the pipes to it."""

    def __init__(self, threads: int) -> None:
        env = {**os.environ, "TOKIO_WORKER_THREADS": str(max(1, threads))}
        argv = [sys.executable, "-m", "offload.dataservices.engines", str(max(1, threads))]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.ready = False

    def wait_ready(self, deadline: float) -> None:
        """Until the engine says it is ready (one byte), or EngineError."""
        assert self.proc.stdout is not None
        if self.ready:
            return
        got = _read_within(self.proc.stdout, 1, deadline)
        if got != b"R":
            self.kill()
            raise EngineError(f"an engine process did not start (exit {self.proc.poll()})")
        self.ready = True

    def send(self, plan: bytes, tables: dict[str, str]) -> None:
        assert self.proc.stdin is not None
        line = json.dumps({"plan": base64.b64encode(plan).decode(), "tables": tables})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def _read_within(f: IO[bytes], n: int, deadline: float) -> bytes:
    """``n`` bytes of ``f`` read on a thread, given up (b"") at ``deadline``."""
    box: list[bytes] = []
    t = threading.Thread(target=lambda: box.append(f.read(n)), daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    return box[0] if box else b""


class Pool:
    """At most ``size`` engine processes of ``threads`` engine threads each, started when first
    needed (after the node's budget is applied, so they are held to it too: :meth:`warm`)."""

    def __init__(self, size: int, threads: int) -> None:
        self.size, self.threads = max(1, size), threads
        self._idle: list[Engine] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        self.killed = 0
        """Engines killed to stop a query (counted in status)."""

    def warm(self) -> None:
        """Starts an engine now, where none is idle and fewer than ``size`` run, so that the next
        query does not wait for one (~1 s)."""
        with self._cond:
            if self._closed or self._idle or self._count >= self.size:
                return
            self._count += 1
        try:
            e = Engine(self.threads)
            e.wait_ready(time.monotonic() + START_S)
        except (EngineError, OSError):
            self._forget()
            return
        self.release(e, True)

    def acquire(self, stop: Callable[[], str | None], deadline: float) -> Engine:
        """An idle engine, or a new one while fewer than ``size`` run, or the first one freed
        before ``deadline``; Stopped where ``stop`` says why first."""
        with self._cond:
            while True:
                if self._closed:
                    raise Stopped("the node is shutting down")
                while self._idle:
                    e = self._idle.pop()
                    if e.alive:
                        return e
                    self._count -= 1
                if self._count < self.size:
                    self._count += 1
                    break
                why = stop()
                if why is not None:
                    raise Stopped(why)
                if time.monotonic() >= deadline:
                    raise Stopped(f"all {self.size} engines stayed busy")
                self._cond.wait(POLL_S)
        try:
            e = Engine(self.threads)
            e.wait_ready(time.monotonic() + START_S)
            return e
        except BaseException:
            self._forget()
            raise

    def release(self, e: Engine, ok: bool) -> None:
        """Gives ``e`` back: idle if ``ok`` and alive, else killed."""
        if ok and e.alive and not self._closed:
            with self._cond:
                self._idle.append(e)
                self._cond.notify()
            return
        e.kill()
        self._forget()
        if not self._closed:  # its replacement starts now, not when the next query needs it
            threading.Thread(target=self.warm, name="engine-replace", daemon=True).start()

    def _forget(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def close(self) -> None:
        """Kills every idle engine; engines still running a query are killed as they are released."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for e in idle:
            e.kill()

    def execute(
        self, plan: bytes, tables: dict[str, str], stop: Callable[[], str | None], deadline: float
    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """``plan`` run by an engine over the data set files ``tables``: its result's schema and
        batches. Waiting, it asks ``stop`` every POLL_S (and checks ``deadline``): Stopped says
        why, and the engine is killed. EngineError where the engine cannot run the plan."""
        e = self.acquire(stop, deadline)
        q: queue.Queue[tuple[str, Any]] = queue.Queue(QUEUED)
        try:
            e.send(plan, tables)
        except OSError:
            self.release(e, False)
            raise EngineError("its engine process died (out of memory, or killed)") from None
        threading.Thread(target=_pump, args=(e, q), name="engine-reader", daemon=True).start()
        try:
            kind, schema = _next(q, stop, deadline)
        except BaseException:
            self.killed += 1
            self.release(e, False)
            raise
        if kind == "error":
            self.release(e, True)
            raise EngineError(schema)
        return schema, self._batches(e, q, stop, deadline)

    def _batches(
        self, e: Engine, q: queue.Queue[tuple[str, Any]], stop: Callable[[], str | None], deadline: float
    ) -> Iterator[pa.RecordBatch]:
        finished = False
        try:
            while True:
                kind, item = _next(q, stop, deadline)
                if kind == "end":
                    finished = True
                    return
                if kind == "error":
                    raise EngineError(item)
                yield item
        finally:  # a query stopped, failed or abandoned (its client gone): its engine goes
            if not finished:
                self.killed += 1
            self.release(e, finished)


def _next(
    q: queue.Queue[tuple[str, Any]], stop: Callable[[], str | None], deadline: float
) -> tuple[str, Any]:
    """The engine's next item, asking ``stop`` and checking ``deadline`` every POLL_S."""
    while True:
        try:
            return q.get(timeout=POLL_S)
        except queue.Empty:
            pass
        why = stop()
        if why is None and time.monotonic() >= deadline:
            why = "its time limit"
        if why is not None:
            raise Stopped(why)


def _pump(e: Engine, q: queue.Queue[tuple[str, Any]]) -> None:
    """Reads one answer of ``e`` into ``q``: ("schema", s), ("batch", b)..., ("end", None), or
    ("error", why). Ends when the engine does (killed: its pipe closes)."""
    f = e.proc.stdout
    assert f is not None
    try:
        head = f.read(1)
        if head == b"E":
            (n,) = struct.unpack("<I", f.read(4))
            q.put(("error", f.read(n).decode(errors="replace")))
            return
        if head != b"S":
            q.put(("error", "its engine process died (out of memory, or killed)"))
            return
        reader = pa.ipc.open_stream(f)
        q.put(("schema", reader.schema))
        for b in reader:
            if not _put(q, ("batch", b), e):
                return
        _put(q, ("end", None), e)
    except (OSError, ValueError, pa.ArrowException):
        with contextlib.suppress(queue.Full):
            q.put_nowait(("error", "its engine process died (out of memory, or killed)"))


def _put(q: queue.Queue[tuple[str, Any]], item: tuple[str, Any], e: Engine) -> bool:
    """Puts ``item`` once there is room; False if the engine is gone meanwhile (its query was
    stopped: nobody reads ``q`` any more)."""
    while True:
        try:
            q.put(item, timeout=0.5)
            return True
        except queue.Full:
            if not e.alive:
                return False


# ------------------------------------------------------------------------------ the engine side


def _die_with_parent() -> None:
    """Ends this process as soon as the node that started it is gone (a watchdog thread: the
    parent's pid changes when it dies), so an engine never computes on as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def main() -> None:
    """An engine process: reads requests (one JSON line each) on stdin, answers each on stdout
    with ``S`` and an Arrow IPC stream, or ``E``, a length and the error's first line. Its
    stdout is the protocol's alone (anything printed goes to stderr)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        _serve(out)
    except (BrokenPipeError, KeyboardInterrupt):  # the node went away: nothing to say
        os._exit(0)


def _serve(out: IO[bytes]) -> None:
    from offload.dataservices import plans

    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    warm = pa.table({"x": [1.0, 2.0]})  # DataFusion's first run, paid before the first query
    plans.execute(plans.to_substrait("select sum(x) from w where x > 1", {"w": warm.schema}), {"w": warm}, 1)
    out.write(b"R")
    out.flush()
    mapped: dict[str, pa.Table] = {}
    for line in sys.stdin.buffer:
        _answer(out, json.loads(line), mapped, threads)


def _tables(req: dict[str, Any], mapped: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The request's data sets, memory-mapped (kept by path while their files exist)."""
    for path in [p for p in mapped if not Path(p).exists()]:
        del mapped[path]
    tables = {}
    for name, path in req["tables"].items():
        if path not in mapped:
            with pa.memory_map(path) as src:
                mapped[path] = pa.ipc.open_file(src).read_all()
        tables[name] = mapped[path]
    return tables


def _answer(out: IO[bytes], req: dict[str, Any], mapped: dict[str, pa.Table], threads: int) -> None:
    """One request's answer: ``S`` and the result's stream, or ``E`` and why. An error once the
    stream has begun ends the process (the node sees the engine die; nothing half-sent is taken)."""
    from offload.dataservices import plans

    try:
        tables = _tables(req, mapped)
        schema, batches = plans.execute_batches(base64.b64decode(req["plan"]), tables, threads)
        first = next(batches, None)
    except Exception as e:  # the plan cannot be run (or a data set's file went): its first line goes back
        msg = (str(e) if isinstance(e, plans.PlanError) else plans.first_line(e)).encode()
        out.write(b"E" + struct.pack("<I", len(msg)) + msg)
        out.flush()
        return
    out.write(b"S")
    try:
        with pa.ipc.new_stream(out, schema) as w:
            for b in [first] if first is not None else []:
                w.write_batch(b)
                out.flush()
            for b in batches:
                w.write_batch(b)
                out.flush()
        out.flush()
    except Exception:  # mid-stream: the node reads a broken stream and says the engine died
        os._exit(1)


if __name__ == "__main__":
    main()
