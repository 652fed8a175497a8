"""`offload serve inject`: replay a user-request trace against `offload serve` with the Rust load
generator (`offload_serve::loadgen`, the one `offload serve bench` drives), closed loop (each of
P connections sends its next request when the previous is answered) or open loop (Poisson
arrivals at a target rate over the P connections), and report throughput, latency percentiles,
the server's per-stage medians and the by-size breakdown.

Here the trace's requests become frames (before the clock starts, so the measured time is the
service's, not the trace reader's); the generator sends them in turn, looping, until the
duration is over, reads each Ok reply's stage times, and ends the run early when the daemon
shuts down or stops answering. A Ctrl-C ends the run within 100 ms (KeyboardInterrupt).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offload.files import save_figure, write_text
from offload.serve import CurveKeys, ServeError

# Closed loop (each connection sends its next request when the previous is answered) or open
# loop (Poisson arrivals at a rate).
MODES = ("closed", "open")
# Connections one run may open (`-p/--processes`, the client processes of old).
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
# The open loop's arrivals are drawn from this seed (the same seed, the same schedule).
POISSON_SEED = 1


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
    """Replays the trace over `processes` connections of the Rust generator (one sending
    thread); `rate` is requests/s over all of them (open loop). With `cpus`, the generator runs
    only on those CPUs (to keep it off the daemon's); with `curve`, it connects with CURVE (for
    data endpoints that require it). `criteria`: the criterion codes the trace's columns follow
    (requests carry their fingerprint; default: the trace's own `criteria`). Fails with
    ServeError when no reply comes within `connect_timeout_s`; a daemon that shuts down or stops
    answering (nothing for `connect_timeout_s`) ends the run early (`stopped`), with the
    requests it never answered counted as `unanswered`."""
    from offload import _native
    from offload.serve import bench

    _check_load(processes, mode, rate, duration)
    names = list(criteria if criteria is not None else trace.criteria)
    if not names:
        raise ValueError("the criterion codes the trace's columns follow are needed (criteria=...)")
    if not trace.requests:
        raise ValueError("the trace holds no requests")
    fingerprint = int(_native.criteria_fingerprint(names))
    frames = bench.request_frames(trace.columns, trace.codes, trace.requests, fingerprint, early_stop)
    load = bench.Load(
        mode=mode, rate=rate, connections=processes, threads=1, in_flight=1, duration_s=duration,
        drain_s=connect_timeout_s, connect_timeout_s=connect_timeout_s,
        arrivals="poisson" if mode == "open" else "fixed", seed=POISSON_SEED,
        stages=True, stop_when_gone_s=connect_timeout_s,
    )  # fmt: skip
    try:
        with bench.pinned(set(cpus) if cpus else None):
            gen = bench.run(endpoint, frames, load, curve)
    except ValueError as e:
        if not str(e).startswith("no reply from"):
            raise
        keys = " (or does it refuse these CURVE keys?)" if curve is not None else ""
        raise ServeError(f"{e}{keys} (inject --connect-timeout)") from None
    return _result(gen, endpoint=endpoint, curve=curve, processes=processes, early_stop=early_stop)


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


def _result(
    gen: dict[str, Any], *, endpoint: str, curve: CurveKeys | None, processes: int, early_stop: bool
) -> dict[str, Any]:
    """The run's result from the generator's (`gen`, `offload serve bench`'s JSON with stages)."""
    return {
        "benchmark": "inject",
        "date": gen["date"],
        "machine": gen["machine"],
        "endpoint": endpoint,
        "curve": curve is not None,
        "processes": processes,  # connections
        "mode": gen["mode"],
        "target_rate_rps": gen["target_rate_rps"],
        "early_stop": early_stop,
        # The window requests ran in (start to the last reply): the rates are over it.
        "elapsed_s": gen["elapsed_s"],
        "wall_s": gen["wall_s"],
        "requests": gen["answered"],
        "unanswered": gen["unanswered"],
        "stopped": gen["stopped"],
        "client_cpu_s": gen["generator"]["process_cpu_s"],
        "status": gen["status"],
        "messages": gen["messages"],
        "requests_per_s": gen["requests_per_s"],
        "queries_per_s": gen["queries_per_s"],
        "latency_us": latency_us(gen["latency_us"]),
        # Send → reply (the latency before issue 40's generator), and how late sends went out.
        "service_us": gen["service_us"],
        "send_lag_us": gen["send_lag_us"],
        "stage_median_us": gen["stage_median_us"],
        "by_size": by_size(gen["by_size"]),
        "generator": gen["generator"],
    }


def latency_us(quantiles: dict[str, Any]) -> dict[str, float | None]:
    """p50, p90, p99 and max in µs of the generator's `latency_us` (HdrHistogram, 3 significant
    digits: the value at or above the rank, not np.percentile's linear interpolation that
    `offload plan simulate` uses; over the thousands of requests of a run the two differ by
    less than one rank's step); None each when no request was answered Ok (a latency of 0 µs
    would read as a fast service)."""
    if not quantiles.get("count"):
        return {"p50": None, "p90": None, "p99": None, "max": None}
    return {k: float(quantiles[k]) for k in ("p50", "p90", "p99", "max")}


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


def by_size(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The generator's by-size rows (request sizes in powers of 4) as the plot and `offload plan
    calibrate` read them: median send → reply time, the median of each server stage (0 where
    none was carried), and what is left outside the server (client, ZeroMQ, broker)."""
    out = []
    for row in rows:
        medians: dict[str, float] = row["stage_median_us"]
        stages = {k: medians.get(k, 0.0) for k in STAGES}
        rtt = row["service_p50_us"]
        outside = max(0.0, rtt - sum(stages.values()))
        b = {"size_up_to": row["size_up_to"], "requests": row["requests"],
             "median_queries": row["median_queries"], "round_trip_us": rtt, "stages_us": stages,
             "outside_server_us": outside}  # fmt: skip
        if any(k in medians for k in DEVICE_STAGES):
            b["device_stages_us"] = {k: medians.get(k, 0.0) for k in DEVICE_STAGES}
        out.append(b)
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
    ax.set_title(f"{result['mode']} loop, {result['processes']} connection(s): where the time goes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def write(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(result, indent=2))
    return out, plot(result, out.with_suffix(".png"))
