"""`offload serve bench`: the Rust load generator (`offload_serve::loadgen`) on frames built here.

Open loop at a fixed rate, latency from each request's due time (no coordinated omission, as
wrk2), many requests in flight per DEALER connection over several connections and threads;
closed loop (a fixed number in flight per connection); or the knee: the most requests/s whose
p99 stays within an SLA, by bisection on the rate. The request frames are built before the clock
starts, by the protocol's own encoders (the injector's `_frames`), raw or pre-encoded, of any
size: the queries are repeated to fill a request larger than the file. Every run ends within its
duration plus the drain; requests still owed then are counted `unanswered`. The result says
whether the generator, not the server, was the bound (docs/serve-protocol.md, "Load generator").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload.serve import CurveKeys
from offload.serve.inject import Trace, _frames

# Distinct frames a run cycles through at most (each is sent many times, with a fresh id).
MAX_FRAMES = 64
MODES = ("open", "closed", "knee")


@dataclass(frozen=True)
class Load:
    """How the generator offers load (`offload serve bench` options, same defaults)."""

    mode: str = "open"
    rate: float = 1000.0  # requests/s over all connections (open; knee: the first rate, 0 = measure)
    connections: int = 4
    threads: int = 1
    in_flight: int = 1  # closed loop: requests out per connection
    max_in_flight: int = 1024  # open loop: requests one connection holds out at most
    duration_s: float = 5.0
    drain_s: float = 2.0
    connect_timeout_s: float = 5.0
    sla_p99_us: float = 5000.0  # knee
    steps: int = 6  # knee: bisections


def _windows(n: int, request_size: int) -> tuple[int, list[tuple[int, int, int]]]:
    """How often the n queries are repeated to fill one request at least, and the requests
    (first query, size, 0) over the repeated queries, at most MAX_FRAMES."""
    if n == 0 or request_size < 1:
        raise ValueError("no queries to send" if n == 0 else "the request size must be at least 1")
    reps = -(-request_size // n)
    total = n * reps
    starts = range(0, total - request_size + 1, request_size)
    return reps, [(lo, request_size, 0) for lo in starts][:MAX_FRAMES]


def frames(
    columns: list[list[str]], criteria: list[str], request_size: int, codes: np.ndarray | None = None
) -> tuple[list[bytes], int]:
    """Request frames of `request_size` queries (at most MAX_FRAMES) from the query columns,
    raw, or pre-encoded when `codes` (their rows, `CompiledRules.encode`) are given; returns the
    frames and the queries each holds."""
    from offload import _native

    reps, reqs = _windows(len(columns[0]) if columns else 0, request_size)
    cols = [c * reps for c in columns]
    rows = np.tile(codes, (reps, 1)) if codes is not None else None
    trace = Trace(cols, reqs, rows, list(criteria))
    fingerprint = int(_native.criteria_fingerprint(list(criteria)))
    return [f for _, f in _frames(trace, list(range(len(reqs))), False, fingerprint)], request_size


def encoded_frames(
    endpoint: str,
    columns: list[list[str]],
    criteria: list[str],
    request_size: int,
    code_bits: int = 16,
    curve: CurveKeys | None = None,
    timeout_s: float = 5.0,
) -> tuple[list[bytes], dict[str, int]]:
    """Request frames as `frames`, encoded here with the dictionary fetched from the daemon at
    `endpoint` (its version now; 16-bit codes where every code fits, unless `code_bits` is 32);
    returns the frames and {"encoding_version", "code_bits"}. No dictionary within `timeout_s`
    is a ValueError."""
    from offload.serve import Client, ServeError

    if code_bits not in (16, 32):
        raise ValueError(f"the code bits are 16 or 32, not {code_bits}")
    reps, reqs = _windows(len(columns[0]) if columns else 0, request_size)
    cols = [c * reps for c in columns]
    try:
        with Client(endpoint, criteria, timeout_s, curve=curve, encode="client") as c:
            d = c.fetch_dictionary()
    except ServeError as e:
        why = f"no encoding dictionary from {endpoint}: {e}: is offload serve running there?"
        raise ValueError(why) from e
    out = [
        d.frame(k + 1, [col[first : first + n] for col in cols], 0, 0, code_bits)
        for k, (first, n, _) in enumerate(reqs)
    ]
    return out, {"encoding_version": d.version, "code_bits": 32 if code_bits == 32 else d.code_bits}


def run(endpoint: str, frame_list: list[bytes], load: Load, curve: CurveKeys | None = None) -> dict[str, Any]:
    """Runs the generator (the GIL released) and returns its JSON result, dated. A bad setting
    or no reply within the connect timeout is a ValueError."""
    from offload import _native
    from offload.host.machine import machine

    if load.mode not in MODES:
        raise ValueError(f"mode is one of {', '.join(MODES)}, not {load.mode!r}")
    keys = (
        (str(Path(curve.server_key).expanduser()), str(Path(curve.client_key).expanduser()))
        if curve
        else None
    )
    result = _native.serve_bench(
        endpoint, frame_list, load.mode, load.rate, load.connections, load.threads, load.max_in_flight,
        load.in_flight, load.duration_s, load.drain_s, load.connect_timeout_s, load.sla_p99_us, load.steps,
        keys,
    )  # fmt: skip
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(), **dict(result)}


def measure(
    endpoint: str,
    frame_list: list[bytes],
    load: Load,
    curve: CurveKeys | None = None,
    control: str | None = None,
    timeout_s: float = 5.0,
) -> dict[str, Any]:
    """`run`, and with the daemon's `control` endpoint its CPU per query by role over the run
    (`daemon_cpu`); with the knee, over one more open-loop run at the knee's rate (`at_knee`)."""
    from offload.serve.control import control_request

    def stats() -> dict[str, Any]:
        return control_request(control, "stats", timeout_s, curve) if control else {}

    before = stats() if control and load.mode != "knee" else None
    result = run(endpoint, frame_list, load, curve)
    if control and load.mode == "knee" and result.get("knee"):
        before = stats()
        knee_load = replace(load, mode="open", rate=result["knee"]["rate_rps"])
        at_knee = run(endpoint, frame_list, knee_load, curve)
        kept = ("requests_per_s", "queries_per_s", "latency_us", "generator")
        result["at_knee"] = {k: at_knee[k] for k in kept}
    if before is not None:
        result["daemon_cpu"] = daemon_cpu(before, stats())
    return result


def daemon_cpu(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """The daemon's CPU per answered query by part between two `stats` answers (their `cpu`
    objects, docs/serve-protocol.md "The server's own cost"), and the ceiling the host path
    implies on the daemon's cores; None when no query was answered in between."""
    b, a = before.get("cpu") or {}, after.get("cpu") or {}
    queries = int(a.get("queries", 0)) - int(b.get("queries", 0))
    if queries <= 0 or "cpu_ns" not in a:
        return None
    per = {k: (ns - b.get("cpu_ns", {}).get(k, 0)) / queries for k, ns in a["cpu_ns"].items()}
    cores = int(a.get("cores", 1))
    ceiling = cores * 1e9 / per["host_path"] if per.get("host_path") else None
    return {"queries": queries, "ns_per_query": per, "cores": cores, "host_path_ceiling_qps": ceiling,
            "matcher": after.get("matcher")}  # fmt: skip


def host_path_line(cpu: dict[str, Any]) -> str:
    """The host path in one line: ns per query by part, and the ceiling it implies."""
    per = cpu["ns_per_query"]
    roles = ("broker", "worker", "executor", "zmq_io", "match")
    parts = ", ".join(f"{k} {per[k]:,.0f}" for k in roles if k in per)
    ceiling = cpu.get("host_path_ceiling_qps")
    cap = f"; ceiling {ceiling / 1e6:,.1f} M queries/s on {cpu['cores']} cores" if ceiling else ""
    return f"host path {per['host_path']:,.0f} ns/query ({parts}; daemon {per['daemon']:,.0f}){cap}"


def failures(result: dict[str, Any]) -> str | None:
    """One line saying which requests were not served (not Ok, or unanswered), or None."""
    status: dict[str, int] = result.get("status", {})
    bad = {k: v for k, v in status.items() if k != "Ok" and v}
    unanswered = int(result.get("unanswered", 0))
    if not bad and not unanswered:
        return None
    parts = ", ".join([*(f"{k} {v:,}" for k, v in sorted(bad.items())), f"{unanswered:,} unanswered"])
    line = (
        f"{sum(bad.values()) + unanswered:,} of {int(result.get('sent', 0)):,} requests not served ({parts})"
    )
    first = next(iter(result.get("messages", {}).items()), None)
    return f"{line}; first {first[0]}: {first[1]}" if first else line


def summary(result: dict[str, Any]) -> str:
    """One run in two lines: rates, latency from due time, and the generator's cost and bound."""
    lat, gen = result["latency_us"], result["generator"]
    target = f" of {result['target_rate_rps']:,.0f} asked" if result.get("target_rate_rps") else ""
    bound = (
        f"the generator WAS the bound: {gen['why']}" if gen["bound"] else "the generator was not the bound"
    )
    return (
        f"{result['mode']} loop: sent {result['send_rate_rps']:,.0f} requests/s{target}; answered "
        f"{result['requests_per_s']:,.0f} requests/s, {result['queries_per_s']:,.0f} queries/s; "
        f"{result['unsent']:,} unsent, {result['unanswered']:,} unanswered; latency (from due time) "
        f"p50 {lat['p50']:,.0f} µs, p90 {lat['p90']:,.0f}, p99 {lat['p99']:,.0f}, p99.9 {lat['p999']:,.0f}, "
        f"max {lat['max']:,.0f}\ngenerator: {gen['process_cpu_s']:.2f} s CPU "
        f"({gen['cpu_us_per_request']:.1f} µs per request, {gen['cores']} cores); {bound}"
        + (f"; {gen['note']}" if gen.get("note") else "")
    )
