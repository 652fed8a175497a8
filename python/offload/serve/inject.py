"""`offload serve inject`: replay a user-request trace against `offload serve` with P client
processes, closed loop (each process sends its next request when the previous is answered) or
open loop (Poisson arrivals at a target rate), and report throughput, latency percentiles and
the per-stage breakdown.

Frames are built before the clock starts, so the measured time is the service's, not the
trace reader's. Each process replays its share of the trace in a loop until the duration is
over (and sends at most MAX_REQUESTS). The client processes ignore SIGINT (a terminal's Ctrl-C
reaches the whole process group): the parent alone stops, ends them and says so in one line.
"""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
import queue
import signal
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from offload.files import save_figure, write_text
from offload.host.machine import machine
from offload.serve import CurveKeys, ServeError

# Requests one client process sends at most in a run.
MAX_REQUESTS = 1_000_000
# Closed loop (each process sends its next request when the previous is answered) or open loop
# (Poisson arrivals at a rate).
MODES = ("closed", "open")
# Client processes one run may start.
MAX_PROCESSES = 256
# The server-side stages of a reply, in pipeline order (docs/serve-protocol.md).
STAGES = ("queue", "encode", "kernel_queue", "match", "reply")
# Parts of `match` on a device matcher (CUDA event times of the batch): shown, never added up.
DEVICE_STAGES = ("h2d", "kernel", "d2h")


@dataclass(frozen=True)
class Trace:
    """Requests as (first query, count, wanted) over raw query columns (rule-type order), and
    optionally the same queries pre-encoded (then requests carry codes, not text)."""

    columns: list[list[str]]
    requests: list[tuple[int, int, int]]
    codes: np.ndarray | None = None
    # The criterion codes the columns follow (requests carry their fingerprint).
    criteria: list[str] = field(default_factory=list)

    def fixed_size(self, size: int) -> Trace:
        """The same queries cut into requests of `size` queries (for throughput runs)."""
        n = len(self.columns[0]) if self.columns else 0
        reqs = [(lo, min(size, n - lo), 0) for lo in range(0, n, max(size, 1))]
        return Trace(self.columns, reqs, self.codes, self.criteria)

    def encoded(self, codes: np.ndarray) -> Trace:
        """The same requests sent pre-encoded (`CompiledRules.encode` of all queries)."""
        return Trace(self.columns, self.requests, codes, self.criteria)


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message says which file, line and why."""


def load_trace(trace_dir: Path, criteria: list[str]) -> Trace:
    """Reads `queries.csv` + `requests.csv` as written by `offload rules synth`; a damaged or
    truncated file is a `TraceError` naming the file and line, never a wrong replay."""
    qpath, rpath = trace_dir / "queries.csv", trace_dir / "requests.csv"
    for path in (qpath, rpath):
        if not path.is_file():
            raise TraceError(f"{path}: no such file (a trace directory holds queries.csv and requests.csv)")
    with open(qpath, newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        missing = [c for c in criteria if header is None or c not in header]
        if header is None or missing:
            raise TraceError(f"{qpath}:1: the header lacks the rule type's criteria {', '.join(missing)}")
        idx = [header.index(c) for c in criteria]
        cols: list[list[str]] = [[] for _ in criteria]
        for row in r:
            if len(row) != len(header):
                raise TraceError(f"{qpath}:{r.line_num}: {len(row)} fields, the header has {len(header)}")
            for k, i in enumerate(idx):
                cols[k].append(row[i])
    n_queries = len(cols[0]) if cols else 0
    return Trace(cols, _load_requests(rpath, n_queries), criteria=list(criteria))


def _load_requests(path: Path, n_queries: int) -> list[tuple[int, int, int]]:
    reqs = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            try:
                first, n, wanted = (int(row[k]) for k in ("FIRST_QUERY", "N_QUERIES", "WANTED"))
            except (KeyError, TypeError, ValueError):
                raise TraceError(
                    f"{path}:{reader.line_num}: expected integers FIRST_QUERY, N_QUERIES, WANTED"
                ) from None
            if first < 0 or n < 0 or first + n > n_queries:
                raise TraceError(
                    f"{path}:{reader.line_num}: queries {first}..{first + n} lie outside queries.csv's "
                    f"{n_queries} (a truncated trace?)"
                )
            reqs.append((first, n, wanted))
    return reqs


# Statuses that make `offload serve inject` fail (exit 1): the request was not served. Busy and
# DeadlineExceeded are load outcomes a run may be measuring: counted, not failures.
FAILED = ("BadRequest", "Malformed", "ShuttingDown")
# Seconds to wait for the first reply (is a daemon there?) and, later, for any outstanding
# reply before the daemon counts as gone (`offload serve inject --connect-timeout`).
CONNECT_TIMEOUT_S = 5.0


def _frames(trace: Trace, which: list[int], early_stop: bool, fingerprint: int) -> list[tuple[int, bytes]]:
    from offload import _native

    out = []
    for k, i in enumerate(which):
        first, n, wanted = trace.requests[i]
        stop = wanted if early_stop else 0
        if trace.codes is not None:
            rows = np.ascontiguousarray(trace.codes[first : first + n])
            out.append((n, bytes(_native.encode_request_codes(k + 1, 0, stop, fingerprint, 1, rows))))
        else:
            cols = [c[first : first + n] for c in trace.columns]
            out.append((n, bytes(_native.encode_request(k + 1, 0, stop, fingerprint, cols))))
    return out


def _socket(
    ctx: zmq.Context[Any], endpoint: str, curve: CurveKeys | None, send_timeout_s: float
) -> zmq.Socket[Any]:
    """A DEALER whose sends wait at most `send_timeout_s` (zmq.Again then): a connection closed
    mid-handshake, or a full queue, would otherwise block a send for ever."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDTIMEO, max(1, int(send_timeout_s * 1000)))
    if curve is not None:
        curve.apply(s)
    s.connect(endpoint)
    return s


@dataclass(frozen=True)
class _ClientArgs:
    """What one client process is given."""

    endpoint: str
    trace: Trace
    which: list[int]  # its share of the trace's requests
    mode: str  # "closed" or "open"
    rate: float  # requests/s of this process (open loop)
    duration: float
    early_stop: bool
    queue: Any  # results go back on it
    go: Any  # the event that starts every process at once
    cpus: list[int] | None
    curve: CurveKeys | None
    fingerprint: int  # of the criteria the columns follow
    wait_s: float  # reply timeout: longer without one, the daemon counts as gone


class _Replies:
    """The replies one client process takes on its socket, and the requests it still waits for."""

    def __init__(self, s: zmq.Socket[Any], wait_s: float) -> None:
        from offload import _native

        self._decode = _native.decode_reply
        self._s = s
        self._wait_s = wait_s
        # Per reply: rtt_s, n, answered, status, stages.
        self.records: list[tuple[float, int, int, str, dict[str, int]]] = []
        self.sent: dict[int, tuple[float, int]] = {}  # in sending order: the first is the oldest outstanding
        self.messages: dict[str, str] = {}  # the first message of each status other than Ok
        self.stopped: str | None = None  # why this process stopped before the duration was over
        self.last_reply = 0.0

    def take(self, timeout_ms: int) -> bool:
        """Takes one reply if one comes within `timeout_ms`; False if none came."""
        if not self._s.poll(timeout_ms):
            return False
        rid, status, _v, rule, _c, stages, message = self._decode(self._s.recv())
        last_reply = self.last_reply = time.perf_counter()
        t0, n = self.sent.pop(rid, (last_reply, 0))
        self.records.append((last_reply - t0, n, len(rule), status, dict(stages)))
        if status != "Ok":
            self.messages.setdefault(status, message)
        if status == "ShuttingDown" and self.stopped is None:
            self.stopped = "the daemon is shutting down"
        return True

    def gone(self, now: float) -> bool:
        """No reply to the oldest outstanding request within `wait_s`: the daemon is gone."""
        sent = self.sent
        if sent and now - next(iter(sent.values()))[0] > self._wait_s and self.stopped is None:
            self.stopped = f"no reply within {self._wait_s:g} s (the daemon is gone or stuck)"
        return self.stopped is not None


def _client(a: _ClientArgs) -> None:
    # Ctrl-C is the parent's to handle (it ends this process): no traceback from here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if a.cpus:
        os.sched_setaffinity(0, a.cpus)

    frames = _frames(a.trace, a.which, a.early_stop, a.fingerprint)
    ctx = zmq.Context()
    s = _socket(ctx, a.endpoint, a.curve, a.wait_s)
    r = _Replies(s, a.wait_s)
    rng = np.random.default_rng(len(a.which))
    # Every process starts sending at once (after all have built their frames and connected),
    # so they overlap for the whole duration and their rates add up.
    a.queue.put("ready")
    a.go.wait()
    start = time.perf_counter()
    cpu0 = time.process_time()  # this process's CPU, all its threads (ZeroMQ's I/O thread too)
    last_send = _replay(a, s, frames, r, rng, start)
    # Replies still owed: a daemon that shuts down answers them at once; one that is gone never
    # will (then they are counted unanswered without waiting again).
    deadline = time.perf_counter() + (0.0 if r.stopped and r.stopped.startswith("no reply") else a.wait_s)
    while r.sent and time.perf_counter() < deadline:
        r.take(50)
    cpu = time.process_time() - cpu0
    # The window requests really ran in: to the last reply (or the last send, if none came).
    active = max(r.last_reply, last_send if not r.records else 0.0) - start
    a.queue.put({"records": r.records, "start": start, "elapsed": max(active, 0.0),
                 "wall": time.perf_counter() - start, "unanswered": len(r.sent), "cpu_s": cpu,
                 "messages": r.messages, "stopped": r.stopped})  # fmt: skip
    s.close()
    ctx.term()


def _replay(
    a: _ClientArgs,
    s: zmq.Socket[Any],
    frames: list[tuple[int, bytes]],
    r: _Replies,
    rng: np.random.Generator,
    start: float,
) -> float:
    """Sends `frames` on `s` from `start`, closed or open loop as `a` says, taking the replies
    into `r`; returns when the last request was sent. The trace is replayed in a loop until the
    duration is over (at most MAX_REQUESTS), or until the daemon shuts down or stops answering."""
    mode, rate, wait_s = a.mode, a.rate, a.wait_s
    take, gone, sent = r.take, r.gone, r.sent
    end = start + a.duration
    next_at = start
    last_send = start
    for k in range(MAX_REQUESTS if frames else 0):
        n, frame = frames[k % len(frames)]
        now = time.perf_counter()
        if now >= end or gone(now):
            break
        if mode == "open":
            while now < next_at and r.stopped is None:  # take replies while waiting for the next arrival
                take(max(1, int((next_at - now) * 1000)))
                now = time.perf_counter()
            if gone(now):
                break
            next_at += rng.exponential(1.0 / rate)
        rid = k + 1
        last_send = time.perf_counter()
        sent[rid] = (last_send, n)
        if not _try_send(s, frame[:4] + rid.to_bytes(8, "little") + frame[12:]):  # a fresh id per send
            sent.pop(rid)
            r.stopped = f"could not send within {a.wait_s:g} s (the daemon is gone or stuck)"
            break
        if mode == "closed" and not take(int(wait_s * 1000)):
            gone(time.perf_counter() + wait_s)
    return last_send


def _try_send(s: zmq.Socket[Any], frame: bytes) -> bool:
    """Sends within the socket's SNDTIMEO; False when it could not."""
    try:
        s.send(frame)
    except zmq.Again:
        return False
    return True


def probe(
    endpoint: str, frame: bytes, curve: CurveKeys | None = None, timeout_s: float = CONNECT_TIMEOUT_S
) -> None:
    """Sends one request and waits `timeout_s` for any reply: raises ServeError when nothing
    answers (no daemon there, a wrong endpoint, or CURVE keys it does not admit)."""
    ctx = zmq.Context()
    s = _socket(ctx, endpoint, curve, timeout_s)
    try:
        sent = _try_send(s, frame)
        if not sent or not s.poll(int(timeout_s * 1000)):
            keys = " or does it refuse these CURVE keys?" if curve is not None else ""
            raise ServeError(
                f"no reply from {endpoint} within {timeout_s:g} s: is `offload serve` running there{keys} "
                "(inject --connect-timeout)"
            )
    finally:
        s.close(linger=0)
        ctx.term()


def run(
    endpoint: str,
    trace: Trace,
    processes: int = 2,
    mode: str = "closed",
    rate: float = 1000.0,
    duration: float = 5.0,
    early_stop: bool = False,
    cpus: list[int] | None = None,
    curve: CurveKeys | None = None,
    criteria: Sequence[str] | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> dict[str, Any]:
    """Replays the trace; `rate` is requests/s over all processes (open loop). With `cpus`, the
    client processes run only on those CPUs (to keep them off the daemon's); with `curve`, they
    connect with CURVE (for data endpoints that require it). `criteria`: the criterion codes the
    trace's columns follow (requests carry their fingerprint; default: the trace's own
    `criteria`). Fails with ServeError when no reply comes within `connect_timeout_s`; a daemon
    that shuts down or stops answering (nothing for `connect_timeout_s`) ends the run early
    (`stopped`), with the requests it never answered counted as `unanswered`."""
    from offload import _native

    _check_load(processes, mode, rate, duration)
    names = list(criteria if criteria is not None else trace.criteria)
    if not names:
        raise ValueError("the criterion codes the trace's columns follow are needed (criteria=...)")
    if not trace.requests:
        raise ValueError("the trace holds no requests")
    fingerprint = int(_native.criteria_fingerprint(names))
    probe(endpoint, _frames(trace, [0], False, fingerprint)[0][1], curve, connect_timeout_s)
    p = processes
    order = list(range(len(trace.requests)))
    shares = [order[i::p] for i in range(p)]
    # Each process's share, queue and start event are set by _run_clients.
    each = _ClientArgs(endpoint, trace, [], mode, rate / p, duration, early_stop, None, None, cpus, curve,
                       fingerprint, connect_timeout_s)  # fmt: skip
    parts = _run_clients(each, shares, duration + 2 * connect_timeout_s + 120)
    return _result(
        parts, endpoint=endpoint, curve=curve, processes=p, mode=mode, rate=rate, early_stop=early_stop
    )


def _check_load(processes: int, mode: str, rate: float, duration: float) -> None:
    """Refuses a load that cannot run (ValueError naming the value): the CLI states the same
    domains on its options."""
    if mode not in MODES:
        raise ValueError(f"mode is one of {', '.join(MODES)}, not {mode!r}")
    if not 1 <= processes <= MAX_PROCESSES:
        raise ValueError(f"processes is 1 to {MAX_PROCESSES}, not {processes}")
    if mode == "open" and not 0 < rate < float("inf"):
        raise ValueError(f"the open loop's rate is a number of requests/s above 0, not {rate}")
    if not 0 < duration < float("inf"):
        raise ValueError(f"the duration is a number of seconds above 0, not {duration}")


def _run_clients(each: _ClientArgs, shares: list[list[int]], result_timeout_s: float) -> list[dict[str, Any]]:
    """Starts one client process per share of the trace (`each` with that share), starts them
    sending at once when all are ready, and returns what each sent back (within
    `result_timeout_s`). A process that dies without its result is an error at once, not a
    wait; whatever ends this (Ctrl-C too), no client process outlives it."""
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Event()
    args = [replace(each, which=share, queue=q, go=go) for share in shares]
    procs = [ctx.Process(target=_client, args=(a,)) for a in args]
    try:
        _start(procs)
        for _ in procs:
            if _take(q, procs, 300) != "ready":
                raise ServeError("a client process failed to start")
        go.set()
        parts = [_take(q, procs, result_timeout_s) for _ in procs]
        for pr in procs:
            pr.join(timeout=30)
        return parts
    finally:
        _end(procs)


def _start(procs: list[Any]) -> None:
    """Starts the client processes; a Ctrl-C meanwhile is kept and raised once all are started
    (raised inside a start, it left a child reading its set-up from a closed pipe: a traceback),
    and the caller ends them. SIGINT is blocked in this thread meanwhile, a mask each child keeps
    across its exec: a Ctrl-C while Python starts in a child waits there, unseen, until `_client`
    ignores SIGINT (which drops it). The handler here records rather than ignores: the kernel may
    hand the signal to another of this process's threads (OpenBLAS's), and an ignored one is lost."""
    caught: list[int] = []
    old = signal.getsignal(signal.SIGINT)
    if old is not signal.SIG_IGN:  # ignored by whoever started us (`nohup`, a background job): stays so
        signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for pr in procs:
            pr.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, old)
    if caught:
        raise KeyboardInterrupt


def _take(q: Any, procs: list[Any], timeout_s: float) -> Any:
    """The next message of the client processes, waiting `timeout_s` at most; ServeError when
    a process died before sending what it owed, or nothing came in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            dead = [pr for pr in procs if pr.exitcode not in (None, 0)]
            if dead:
                raise ServeError(f"a client process ended with exit code {dead[0].exitcode}") from None
    raise ServeError(f"the client processes sent nothing within {timeout_s:g} s")


def _end(procs: list[Any]) -> None:
    """Ends the client processes still running (SIGTERM, then SIGKILL after 5 s)."""
    procs = [pr for pr in procs if pr.pid is not None]  # those started
    for pr in procs:
        if pr.is_alive():
            pr.terminate()
    for pr in procs:
        pr.join(timeout=5)
        if pr.is_alive():
            pr.kill()
            pr.join(timeout=5)


def _result(
    parts: list[dict[str, Any]],
    *,
    endpoint: str,
    curve: CurveKeys | None,
    processes: int,
    mode: str,
    rate: float,
    early_stop: bool,
) -> dict[str, Any]:
    """The run's result from what its client processes sent back (`parts`)."""
    recs = [r for part in parts for r in part["records"]]
    ok = [r for r in recs if r[3] == "Ok"]
    elapsed = max((part["elapsed"] for part in parts), default=0.0)
    lat = [r[0] for r in ok]
    messages: dict[str, str] = {}
    for part in parts:
        for k, v in part["messages"].items():
            messages.setdefault(k, v)

    stages = sorted({k for r in ok for k in r[4]})
    return {
        "benchmark": "inject",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "endpoint": endpoint,
        "curve": curve is not None,
        "processes": processes,
        "mode": mode,
        "target_rate_rps": rate if mode == "open" else None,
        "early_stop": early_stop,
        # The window requests ran in (start to the last reply): the rates are over it.
        "elapsed_s": elapsed,
        "wall_s": max((part["wall"] for part in parts), default=0.0),
        # CLOCK_MONOTONIC is system-wide: how far apart the processes began sending.
        "start_spread_s": max(x["start"] for x in parts) - min(x["start"] for x in parts),
        "requests": len(recs),
        "unanswered": sum(part["unanswered"] for part in parts),
        "stopped": next((part["stopped"] for part in parts if part["stopped"]), None),
        "client_cpu_s": sum(part.get("cpu_s", 0.0) for part in parts),
        "status": {s: sum(1 for r in recs if r[3] == s) for s in sorted({r[3] for r in recs})},
        "messages": messages,
        "requests_per_s": len(ok) / elapsed if elapsed else 0.0,
        "queries_per_s": sum(r[2] for r in ok) / elapsed if elapsed else 0.0,
        "latency_us": latency_us(lat),
        "stage_median_us": {k: _median_ns(ok, k) / 1e3 for k in stages} if ok else {},
        "by_size": _by_size(ok),
    }


def latency_us(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50, p90, p99 and max in µs; None each when no request was answered (a latency of 0 µs
    would read as a fast service). Percentiles are the simulator's (offload.plan.simulate:
    np.percentile, linear between the two nearest ranks), so calibration compares like with
    like."""
    if not len(latencies_s):
        return {"p50": None, "p90": None, "p99": None, "max": None}
    us = np.asarray(latencies_s, dtype=float) * 1e6
    return {**{f"p{q}": float(np.percentile(us, q)) for q in (50, 90, 99)}, "max": float(us.max())}


def latency_line(lat: dict[str, float | None]) -> str:
    """The latency percentiles as the CLI prints them, or that there are none."""
    if lat["p50"] is None:
        return "latency: none (no request was answered Ok)"
    return (
        f"latency p50 {lat['p50']:.0f} µs, p90 {lat['p90']:.0f}, p99 {lat['p99']:.0f}, max {lat['max']:.0f}"
    )


def failures(result: dict[str, Any]) -> str | None:
    """One line saying which requests failed (statuses of FAILED, and unanswered ones) and why,
    or None when every request was served: `offload serve inject` then exits 1."""
    status: dict[str, int] = result["status"]
    bad = {k: v for k, v in status.items() if k in FAILED and v}
    unanswered = int(result.get("unanswered", 0))
    if not bad and not unanswered:
        return None
    sent = int(result["requests"]) + unanswered
    n = sum(bad.values()) + unanswered
    parts = ", ".join([*(f"{k} {v:,}" for k, v in sorted(bad.items())), f"{unanswered:,} unanswered"])
    lead = ""
    if "ShuttingDown" in bad:
        lead = "the daemon shut down during the run: "
    elif result.get("stopped"):
        lead = f"the run stopped early ({result['stopped']}): "
    line = f"{lead}{n:,} of {sent:,} requests failed ({parts})"
    first = next((k for k in ("BadRequest", "Malformed") if k in bad), None)
    if first and result.get("messages", {}).get(first):
        line += f"; first {first}: {result['messages'][first]}"
    return line


def _median_ns(rs: list[tuple[float, int, int, str, dict[str, int]]], stage: str) -> float:
    return float(statistics.median(r[4].get(stage, 0) for r in rs))


def _by_size(ok: list[tuple[float, int, int, str, dict[str, int]]]) -> list[dict[str, Any]]:
    """Median round trip and stages per request-size bucket (powers of 4), for the plot."""
    buckets: dict[int, list[tuple[float, int, int, str, dict[str, int]]]] = {}
    for r in ok:
        b = 1
        while b < max(r[1], 1):
            b *= 4
        buckets.setdefault(b, []).append(r)
    out = []
    for b in sorted(buckets):
        rs = buckets[b]
        stages = {k: _median_ns(rs, k) / 1e3 for k in STAGES}
        rtt = statistics.median(r[0] for r in rs) * 1e6
        n = statistics.median(r[1] for r in rs)
        outside = max(0.0, rtt - sum(stages.values()))
        row = {"size_up_to": b, "requests": len(rs), "median_queries": n, "round_trip_us": rtt,
               "stages_us": stages, "outside_server_us": outside}  # fmt: skip
        if any(k in r[4] for r in rs for k in DEVICE_STAGES):
            row["device_stages_us"] = {k: _median_ns(rs, k) / 1e3 for k in DEVICE_STAGES}
        out.append(row)
    return out


def plot(result: dict[str, Any], path: Path) -> Path:
    """Stacked per-stage latency by request size (like the seed's Figure 2)."""
    from offload.host.plots import pyplot

    plt = pyplot()

    rows = result["by_size"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for k in STAGES:
        v = np.array([r["stages_us"].get(k, 0.0) for r in rows])
        ax.bar(x, v, bottom=bottom, label=k)
        bottom += v
    v = np.array([r["outside_server_us"] for r in rows])
    ax.bar(x, v, bottom=bottom, label="client + ZeroMQ + broker")
    ax.set_xticks(x, [f"≤{r['size_up_to']}" for r in rows])
    ax.set_xlabel("queries per request")
    ax.set_ylabel("median time per request (µs)")
    ax.set_title(f"{result['mode']} loop, {result['processes']} client process(es): where the time goes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def write(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(result, indent=2))
    return out, plot(result, out.with_suffix(".png"))
