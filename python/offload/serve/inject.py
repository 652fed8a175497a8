"""`offload inject`: replay a user-request trace against `offload serve` with P client
processes, closed loop (each process sends its next request when the previous is answered) or
open loop (Poisson arrivals at a target rate), and report throughput, latency percentiles and
the per-stage breakdown.

Frames are built before the clock starts, so the measured time is the service's, not the
trace reader's. Each process replays its share of the trace in a loop until the duration is
over (and sends at most MAX_REQUESTS).
"""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from offload.rules.bench import machine
from offload.serve import CurveKeys

# Requests one client process sends at most in a run.
MAX_REQUESTS = 1_000_000
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

    def fixed_size(self, size: int) -> Trace:
        """The same queries cut into requests of `size` queries (for throughput runs)."""
        n = len(self.columns[0]) if self.columns else 0
        reqs = [(lo, min(size, n - lo), 0) for lo in range(0, n, max(size, 1))]
        return Trace(self.columns, reqs, self.codes)

    def encoded(self, codes: np.ndarray) -> Trace:
        """The same requests sent pre-encoded (`CompiledRules.encode` of all queries)."""
        return Trace(self.columns, self.requests, codes)


def load_trace(trace_dir: Path, criteria: list[str]) -> Trace:
    """Reads `queries.csv` + `requests.csv` as written by `offload rules synth`."""
    with open(trace_dir / "queries.csv", newline="") as f:
        r = csv.reader(f)
        header = next(r)
        idx = [header.index(c) for c in criteria]
        cols: list[list[str]] = [[] for _ in criteria]
        for row in r:
            for k, i in enumerate(idx):
                cols[k].append(row[i])
    with open(trace_dir / "requests.csv", newline="") as f:
        reqs = [(int(x["FIRST_QUERY"]), int(x["N_QUERIES"]), int(x["WANTED"])) for x in csv.DictReader(f)]
    return Trace(cols, reqs)


def _frames(trace: Trace, which: list[int], early_stop: bool) -> list[tuple[int, bytes]]:
    from offload import _native

    out = []
    for k, i in enumerate(which):
        first, n, wanted = trace.requests[i]
        stop = wanted if early_stop else 0
        if trace.codes is not None:
            rows = np.ascontiguousarray(trace.codes[first : first + n])
            out.append((n, bytes(_native.encode_request_codes(k + 1, 0, stop, 1, rows))))
        else:
            cols = [c[first : first + n] for c in trace.columns]
            out.append((n, bytes(_native.encode_request(k + 1, 0, stop, cols))))
    return out


def _client(
    args: tuple[str, Trace, list[int], str, float, float, bool, Any, Any, list[int] | None, CurveKeys | None],
) -> None:
    endpoint, trace, which, mode, rate, duration, early_stop, queue, go, cpus, curve = args
    from offload import _native

    if cpus:
        os.sched_setaffinity(0, cpus)

    frames = _frames(trace, which, early_stop)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.apply(s)
    s.connect(endpoint)
    records: list[tuple[float, int, int, str, dict[str, int]]] = []  # rtt_s, n, answered, status, stages
    sent: dict[int, tuple[float, int]] = {}

    def take(timeout_ms: int) -> None:
        if s.poll(timeout_ms):
            rid, status, _v, rule, _c, stages, _m = _native.decode_reply(s.recv())
            t0, n = sent.pop(rid, (time.perf_counter(), 0))
            records.append((time.perf_counter() - t0, n, len(rule), status, dict(stages)))

    rng = np.random.default_rng(len(which))
    # Every process starts sending at once (after all have built their frames and connected),
    # so they overlap for the whole duration and their rates add up.
    queue.put("ready")
    go.wait()
    start = time.perf_counter()
    cpu0 = time.process_time()  # this process's CPU, all its threads (ZeroMQ's I/O thread too)
    end = start + duration
    next_at = start
    # The trace is replayed in a loop until the duration is over (at most MAX_REQUESTS).
    for k in range(MAX_REQUESTS if frames else 0):
        n, frame = frames[k % len(frames)]
        now = time.perf_counter()
        if now >= end:
            break
        if mode == "open":
            while now < next_at:  # take replies while waiting for the next arrival
                take(max(1, int((next_at - now) * 1000)))
                now = time.perf_counter()
            next_at += rng.exponential(1.0 / rate)
        rid = k + 1
        sent[rid] = (time.perf_counter(), n)
        s.send(frame[:4] + rid.to_bytes(8, "little") + frame[12:])  # a fresh id per send
        if mode == "closed":
            take(60_000)
    deadline = time.perf_counter() + 30
    while sent and time.perf_counter() < deadline:
        take(100)
    cpu = time.process_time() - cpu0
    elapsed = time.perf_counter() - start
    queue.put({"records": records, "start": start, "elapsed": elapsed, "unanswered": len(sent), "cpu_s": cpu})
    s.close()
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
) -> dict[str, Any]:
    """Replays the trace; `rate` is requests/s over all processes (open loop). With `cpus`, the
    client processes run only on those CPUs (to keep them off the daemon's); with `curve`, they
    connect with CURVE (for data endpoints that require it)."""
    if mode not in ("closed", "open"):
        raise ValueError("mode is closed or open")
    p = max(1, processes)
    order = list(range(len(trace.requests)))
    shares = [order[i::p] for i in range(p)]
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_client,
            args=((endpoint, trace, share, mode, rate / p, duration, early_stop, q, go, cpus, curve),),
        )
        for share in shares
    ]
    for pr in procs:
        pr.start()
    for _ in procs:
        if q.get(timeout=300) != "ready":
            raise RuntimeError("a client process failed to start")
    go.set()
    parts = [q.get(timeout=duration + 120) for _ in procs]
    for pr in procs:
        pr.join(timeout=30)
    recs = [r for part in parts for r in part["records"]]
    ok = [r for r in recs if r[3] == "Ok"]
    elapsed = max((part["elapsed"] for part in parts), default=0.0)
    lat = sorted(r[0] for r in ok)

    def pct(x: float) -> float:
        return lat[min(len(lat) - 1, int(x * len(lat)))] * 1e6 if lat else 0.0

    stages = sorted({k for r in ok for k in r[4]})
    return {
        "benchmark": "inject",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "endpoint": endpoint,
        "curve": curve is not None,
        "processes": p,
        "mode": mode,
        "target_rate_rps": rate if mode == "open" else None,
        "early_stop": early_stop,
        "elapsed_s": elapsed,
        # CLOCK_MONOTONIC is system-wide: how far apart the processes began sending.
        "start_spread_s": max(x["start"] for x in parts) - min(x["start"] for x in parts),
        "requests": len(recs),
        "unanswered": sum(part["unanswered"] for part in parts),
        "client_cpu_s": sum(part.get("cpu_s", 0.0) for part in parts),
        "status": {s: sum(1 for r in recs if r[3] == s) for s in sorted({r[3] for r in recs})},
        "requests_per_s": len(ok) / elapsed if elapsed else 0.0,
        "queries_per_s": sum(r[2] for r in ok) / elapsed if elapsed else 0.0,
        "latency_us": {
            "p50": pct(0.5),
            "p90": pct(0.9),
            "p99": pct(0.99),
            "max": lat[-1] * 1e6 if lat else 0.0,
        },
        "stage_median_us": {k: _median_ns(ok, k) / 1e3 for k in stages} if ok else {},
        "by_size": _by_size(ok),
    }


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return out, plot(result, out.with_suffix(".png"))
