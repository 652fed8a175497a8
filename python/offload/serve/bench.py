"""`offload serve bench`: the Rust load generator (`offload_serve::loadgen`) on frames built here.

Open loop at a fixed rate, latency from each request's due time (no coordinated omission, as
wrk2), many requests in flight per DEALER connection over several connections and threads;
closed loop (a fixed number in flight per connection); or the knee: the most requests/s whose
p99 stays within an SLA, by bisection on the rate. The request frames are built before the clock
starts, by the protocol's own encoders (`request_frames`, the injector's too), raw or pre-encoded, of any
size: the queries are repeated to fill a request larger than the file. Every run ends within its
duration plus the drain; requests still owed then are counted `unanswered`. The result says
whether the generator, not the server, was the bound (docs/serve-protocol.md, "Load generator").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from offload.serve import CurveKeys

# Distinct frames a run cycles through at most (each is sent many times, with a fresh id).
MAX_FRAMES = 64
MODES = ("open", "closed", "knee")
ARRIVALS = ("fixed", "poisson")
PACINGS = ("ticks", "per-request")
CLIENT_SOCKETS = ("zmtp", "libzmq")


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
    arrivals: str = "fixed"  # or poisson (open loop)
    seed: int = 1  # poisson
    pacing: str = "ticks"  # at most one wake-up per tick; per-request: the loop before issue 40
    max_tick_us: float = 200.0  # the longest tick (the knee: at most 1/25 of the SLA)
    wake_on_replies: bool = False  # ticks: also wake when a reply comes while nothing is due
    client_socket: str = "zmtp"  # ZMTP spoken by the generator; libzmq: libzmq's DEALER (as before)
    stages: bool = False  # the server's stage times of each Ok reply: stage_median_us, by_size (inject)
    stop_when_gone_s: float = 0.0  # > 0: end early when the daemon shuts down or is this long silent


def _windows(n: int, request_size: int) -> tuple[int, list[tuple[int, int, int]]]:
    """How often the n queries are repeated to fill one request at least, and the requests
    (first query, size, 0) over the repeated queries, at most MAX_FRAMES."""
    if n == 0 or request_size < 1:
        raise ValueError("no queries to send" if n == 0 else "the request size must be at least 1")
    reps = -(-request_size // n)
    total = n * reps
    starts = range(0, total - request_size + 1, request_size)
    return reps, [(lo, request_size, 0) for lo in starts][:MAX_FRAMES]


def request_frames(
    columns: list[list[str]],
    codes: np.ndarray | None,
    requests: Sequence[tuple[int, int, int]],
    fingerprint: int,
    early_stop: bool = False,
) -> list[bytes]:
    """Request frames of `requests` (first query, count, wanted) over the query `columns` (raw
    text, rule-type order), or over their encoded rows `codes` when given; each with WANTED as
    stop_after when `early_stop`, and its criteria's `fingerprint`."""
    from offload import _native

    out = []
    for k, (first, n, wanted) in enumerate(requests):
        stop = wanted if early_stop else 0
        if codes is not None:
            rows = np.ascontiguousarray(codes[first : first + n])
            out.append(bytes(_native.encode_request_codes(k + 1, 0, stop, fingerprint, 1, rows)))
        else:
            cols = [c[first : first + n] for c in columns]
            out.append(bytes(_native.encode_request(k + 1, 0, stop, fingerprint, cols)))
    return out


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
    fingerprint = int(_native.criteria_fingerprint(list(criteria)))
    return request_frames(cols, rows, reqs, fingerprint), request_size


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
    reps, reqs = _windows(len(columns[0]) if columns else 0, request_size)
    cols = [c * reps for c in columns]
    return dictionary_frames(endpoint, cols, criteria, reqs, code_bits, curve, timeout_s)


def dictionary_frames(
    endpoint: str,
    columns: list[list[str]],
    criteria: list[str],
    requests: Sequence[tuple[int, int, int]],
    code_bits: int = 16,
    curve: CurveKeys | None = None,
    timeout_s: float = 5.0,
) -> tuple[list[bytes], dict[str, int]]:
    """Frames of `requests` (first query, count, wanted) over the query `columns`, encoded with
    the dictionary of the daemon at `endpoint` (as `encoded_frames`)."""
    from offload.serve import Client, ServeError

    if code_bits not in (16, 32):
        raise ValueError(f"the code bits are 16 or 32, not {code_bits}")
    try:
        with Client(endpoint, criteria, timeout_s, curve=curve, encode="client") as c:
            d = c.fetch_dictionary()
    except (ServeError, ValueError) as e:
        why = f"no encoding dictionary from {endpoint}: {e}: is offload serve running there?"
        raise ValueError(why) from e
    out = [
        d.frame(k + 1, [col[first : first + n] for col in columns], 0, 0, code_bits)
        for k, (first, n, _) in enumerate(requests)
    ]
    return out, {"encoding_version": d.version, "code_bits": 32 if code_bits == 32 else d.code_bits}


def run(endpoint: str, frame_list: list[bytes], load: Load, curve: CurveKeys | None = None) -> dict[str, Any]:
    """Runs the generator (the GIL released) and returns its JSON result, dated. A bad setting
    or no reply within the connect timeout is a ValueError; a Ctrl-C ends the run and is raised."""
    from offload import _native
    from offload.host.machine import machine

    if load.mode not in MODES:
        raise ValueError(f"mode is one of {', '.join(MODES)}, not {load.mode!r}")
    if load.arrivals not in ARRIVALS:
        raise ValueError(f"arrivals are one of {', '.join(ARRIVALS)}, not {load.arrivals!r}")
    if load.pacing not in PACINGS:
        raise ValueError(f"pacing is one of {', '.join(PACINGS)}, not {load.pacing!r}")
    if load.client_socket not in CLIENT_SOCKETS:
        raise ValueError(
            f"the client socket is one of {', '.join(CLIENT_SOCKETS)}, not {load.client_socket!r}"
        )
    keys = (
        (str(Path(curve.server_key).expanduser()), str(Path(curve.client_key).expanduser()))
        if curve
        else None
    )
    with single_threaded_blas():
        result = _native.serve_bench(
            endpoint, frame_list, load.mode, load.rate, load.connections, load.threads, load.max_in_flight,
            load.in_flight, load.duration_s, load.drain_s, load.connect_timeout_s, load.sla_p99_us,
            load.steps, keys, load.arrivals, load.seed, load.pacing, load.max_tick_us, load.wake_on_replies,
            load.client_socket, load.stages, load.stop_when_gone_s,
        )  # fmt: skip
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(), **dict(result)}


def warm(endpoint: str, frame_list: list[bytes], load: Load) -> None:
    """A second of closed loop (8 out per connection) before a knee search: a daemon fresh from
    start is slower for a while (first touches of its rule set's memory), and searches that
    began on it found no rate at all, now and then."""
    run(endpoint, frame_list, replace(load, mode="closed", in_flight=8, duration_s=1.0, drain_s=1.0))


def parse_cpus(text: str) -> set[int]:
    """The CPUs a list names (`1`, `0,2-3`), each one this process may run on; else a
    ValueError in one line saying which is not and which are."""
    allowed = os.sched_getaffinity(0)
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"--cpus {text!r}: write CPU numbers and ranges like 0,2-3") from None
        if not 0 <= first <= last < 1024:
            raise ValueError(f"--cpus {text!r}: {part.strip()} is not a range of CPUs")
        cpus.update(range(first, last + 1))
    if cpus - allowed:
        names = ",".join(map(str, sorted(allowed)))
        raise ValueError(
            f"--cpus {text!r}: CPU {min(cpus - allowed)} is not one this process may run on ({names})"
        )
    return cpus


def _set_threads_affinity(cpus: dict[int, set[int]] | set[int]) -> dict[int, set[int]]:
    """Sets each thread of this process to `cpus` (one set for all, or a set per thread id);
    returns what each had. A thread that ended meanwhile is skipped."""
    before: dict[int, set[int]] = {}
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus.get(tid, before[tid]) if isinstance(cpus, dict) else cpus)
        except ProcessLookupError:
            continue
    return before


@contextlib.contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """Every thread of this process, and those it starts meanwhile (the generator's, ZeroMQ's),
    on `cpus` only, then back as they were; None: no change."""
    if not cpus:
        yield
        return
    before = _set_threads_affinity(cpus)
    try:
        yield
    finally:
        _set_threads_affinity(before)


def single_threaded_blas() -> contextlib.AbstractContextManager[Any]:
    """numpy's BLAS held to one thread while the generator runs in this process: OpenBLAS's
    idle threads spin after a call and were 2.6% of a generator's profile (issue 40). With
    threadpoolctl where it is installed; else nothing is changed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


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
        kept = (
            "requests_per_s",
            "queries_per_s",
            "latency_us",
            "generator",
            "pacing",
            "client_socket",
            "loop_passes",
        )
        result["at_knee"] = {k: at_knee[k] for k in kept}
    if before is not None:
        result["daemon_cpu"] = daemon_cpu(before, stats())
        gen = (result.get("at_knee") or result)["generator"]
        result["generator_to_host_path"] = generator_to_host_path(gen, result["daemon_cpu"])
    if load.mode == "knee":
        result["generator"] = knee_bound(result)
    return result


def knee_bound(result: dict[str, Any]) -> dict[str, Any]:
    """Whether the generator, not the daemon, bounded a knee search: a run of the search it
    stopped, or the run at the knee's rate."""
    at_knee = (result.get("at_knee") or {}).get("generator") or {}
    why = result.get("stopped") or (at_knee.get("why") and f"at the knee's rate: {at_knee['why']}")
    return {"bound": bool(why), "why": why or None}


def generator_to_host_path(gen: dict[str, Any], cpu: dict[str, Any] | None) -> dict[str, Any] | None:
    """The generator's CPU per query sent beside the daemon's host path per query answered, over
    the same run, and their ratio (issue 40's aim: at most 0.25 at the knee); None without both."""
    host = ((cpu or {}).get("ns_per_query") or {}).get("host_path")
    mine = gen.get("cpu_ns_per_query")
    if not host or not mine:
        return None
    return {"generator_ns_per_query": mine, "host_path_ns_per_query": host, "ratio": mine / host}


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
    roles = ("broker", "worker", "executor", "zmq_io", "shm", "match")
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


def report(result: dict[str, Any]) -> list[str]:
    """The text report of `offload serve bench`: first, where the generator was the bound, a
    line saying so (the figures then measure it, not the daemon); the run or the knee; the host
    path, and the generator's CPU per query beside it."""
    gen = result["generator"]
    lines = []
    if gen["bound"]:
        lines.append(f"THE GENERATOR WAS THE BOUND, not the daemon: {gen['why']}")
    if "knee" in result:
        knee, sla = result["knee"], result["sla_p99_us"]
        found = "none (the first rate already misses)"
        if knee:
            found = (
                f"{knee['queries_per_s']:,.0f} queries/s at {knee['rate_rps']:,.0f} requests/s, "
                f"p99 {knee['p99_us']:,.0f} µs"
            )
        lines.append(f"knee (p99 <= {sla:,.0f} µs): {found}")
    else:
        lines.append(summary(result))
    if result.get("daemon_cpu"):
        where = " at the knee" if "knee" in result else ""
        lines.append(f"{host_path_line(result['daemon_cpu'])}{where}")
    ratio = result.get("generator_to_host_path")
    if ratio:
        lines.append(
            f"generator {ratio['generator_ns_per_query']:,.1f} ns/query sent beside the host path's "
            f"{ratio['host_path_ns_per_query']:,.1f}: {ratio['ratio']:.2f}x"
        )
    return lines


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
