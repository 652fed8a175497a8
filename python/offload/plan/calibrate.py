"""`offload plan calibrate`: the simulator's stage costs from measured runs, and its
predictions checked against configurations that were actually run.

1. **Stage costs from one measured configuration** (by default the sweep's 1p 1w 1k 1e per-request
   row, where nothing overlaps): the daemon reports, per request, how long each stage took;
   `offload serve sweep` keeps their medians per request-size bucket. A straight line
   a + b·n (weighted least squares over the buckets) gives each stage's cost per request and per
   query: decode/encode → the workers, match → the kernel, reply → the executor after the
   match. What the server does not see — client, ZeroMQ, broker — is the round trip minus the
   server stages ("outside").
   With a probe profile, its ZeroMQ round trip is the part of "outside" that only waits; the
   host CPU the sweep measured per request beyond these stages (broker, ZeroMQ I/O threads)
   runs beside the critical path (`background_request_s`).
2. **One shared parameter**: the share φ of "outside" that occupies a host core (the client's
   encoding, ZeroMQ's I/O threads, the broker) rather than waiting, fitted over the measured
   configurations (a grid over 0..1, least squared log error of throughput and p50).
3. **Validation** by leave-one-out: each configuration predicted with the φ fitted on the
   others; the median absolute error over them is what every later prediction quotes.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from offload.plan.simulate import Costs, Load, Pipeline, pipeline_for, simulate
from offload.serve.grid import Deployment

CALIBRATION_GRID = tuple(i / 10 for i in range(11))


def fit_line(points: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """Weighted least squares y = a + b·x over (x, y, weight), with a, b ≥ 0 (a cost never
    shrinks with more queries, and is never negative)."""
    pts = [(x, y, w) for x, y, w in points if w > 0]
    if not pts:
        return (0.0, 0.0)
    sw = sum(w for *_, w in pts)
    mx = sum(x * w for x, _, w in pts) / sw
    my = sum(y * w for _, y, w in pts) / sw
    sxx = sum(w * (x - mx) ** 2 for x, _, w in pts)
    b = sum(w * (x - mx) * (y - my) for x, y, w in pts) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    if b < 0:
        return (max(my, 0.0), 0.0)
    if a < 0:  # through the origin
        sxy, sxx0 = sum(w * x * y for x, y, w in pts), sum(w * x * x for x, _, w in pts)
        return (0.0, max(sxy / sxx0, 0.0) if sxx0 > 0 else 0.0)
    return (a, b)


@dataclass(frozen=True)
class StageLines:
    """a + b·n per stage, seconds (from one measured configuration)."""

    encode: tuple[float, float]
    match: tuple[float, float]
    reply: tuple[float, float]
    outside: tuple[float, float]
    queue_wait: float  # median waits at 1p: with nothing queued, they are thread wake-ups
    kernel_queue_wait: float
    engines: int  # e of the measured configuration (match time is n·b over e engines)
    channel: tuple[float, float | None] | None = None  # a probe profile's round trip (L, B)
    host_cpu_per_request: float | None = None  # measured: daemon + clients, seconds
    mean_queries: float = 0.0  # of the measured requests

    def costs(self, cpu_share: float, stall: tuple[float, float] = (0.0, 0.0)) -> Costs:
        """Costs for the simulator, with the share φ of the outside time on a host core, and
        stalls (probability, seconds). With a probe profile's channel, its round trip
        (L + n/B, n = 44 bytes per query) is waiting for certain; φ splits the rest."""
        oa, ob = self.outside
        wait_a, wait_b = 0.0, 0.0
        if self.channel is not None:
            lat, bps = self.channel
            wait_a, wait_b = min(oa, lat), min(ob, 44 / bps if bps else 0.0)
        rest_a, rest_b = oa - wait_a, ob - wait_b
        per_query_wait = wait_b + (1 - cpu_share) * rest_b
        n = self.mean_queries
        on_path = (
            cpu_share * (rest_a + rest_b * n)
            + self.encode[0] + self.encode[1] * n
            + self.match[0] + self.match[1] * self.engines * n
            + self.reply[0] + self.reply[1] * n
        )  # fmt: skip
        # What the host measurably spent per request beyond the stages on the critical path.
        background = max(0.0, self.host_cpu_per_request - on_path) if self.host_cpu_per_request else 0.0
        return Costs(
            background_request_s=background,
            stall_probability=stall[0],
            stall_s=stall[1],
            channel_latency_s=(wait_a + (1 - cpu_share) * rest_a) / 2,
            # The per-query outside time that waits, as a channel bandwidth of 1 byte per query.
            channel_bps=1 / per_query_wait if per_query_wait > 0 else None,
            request_bytes_per_query=0.5,
            reply_bytes_per_query=0.5,
            client_request_s=cpu_share * rest_a,
            client_query_s=cpu_share * rest_b,
            worker_request_s=self.encode[0],
            worker_query_s=self.encode[1],
            invoke_s=self.match[0],
            kernel_query_s=self.match[1] * self.engines,
            queue_wakeup_s=self.queue_wait,
            kernel_wakeup_s=self.kernel_queue_wait,
            reply_request_s=self.reply[0],
            reply_query_s=self.reply[1],
        )


def stage_lines(row: dict[str, Any]) -> StageLines:
    buckets = [b for b in row.get("by_size", []) if b["requests"] >= 3 and "median_queries" in b]
    if len(buckets) < 2:
        raise ValueError(
            f"{row.get('label', '?')}: needs per-size stage medians from at least two request-size buckets "
            "(run the sweep with this version of offload)"
        )

    def line(get: Callable[[dict[str, Any]], float]) -> tuple[float, float]:
        return fit_line([(b["median_queries"], get(b) * 1e-6, b["requests"]) for b in buckets])

    return StageLines(
        encode=line(lambda b: b["stages_us"].get("encode", 0.0)),
        match=line(lambda b: b["stages_us"].get("match", 0.0)),
        reply=line(lambda b: b["stages_us"].get("reply", 0.0)),
        outside=line(lambda b: b["outside_server_us"]),
        queue_wait=row["stage_median_us"].get("queue", 0.0) * 1e-6,
        host_cpu_per_request=(
            (row["daemon_cpu_us_per_request"] + row["client_cpu_us_per_request"]) * 1e-6
            if "daemon_cpu_us_per_request" in row
            else None
        ),
        mean_queries=row["queries_per_s"] / row["requests_per_s"] if row.get("requests_per_s") else 0.0,
        kernel_queue_wait=row["stage_median_us"].get("kernel_queue", 0.0) * 1e-6,
        engines=int(row.get("e", 1)),
    )


def pipeline_of(row: dict[str, Any], cpus: int | None) -> Pipeline:
    """The model's pipeline of a measured row's point."""
    return pipeline_for(Deployment.of_row(row), cpus)


def predict(row: dict[str, Any], costs: Costs, sizes: Sequence[int], cpus: int | None) -> dict[str, float]:
    """The simulator's throughput and latency for a measured row's configuration and load."""
    rate = float(row.get("rate_rps") or 0.0)
    load = Load(tuple(sizes), row.get("mode", "closed"), rate, duration_s=1.0, warmup_s=0.2)
    r = simulate(pipeline_of(row, cpus), costs, load)
    p50, p99 = r.percentile(50) * 1e6, r.percentile(99) * 1e6
    return {"queries_per_s": r.throughput_qps, "p50_us": p50, "p99_us": p99}


def fit_stall(
    base: dict[str, Any], costs: Costs, sizes: Sequence[int], cpus: int | None
) -> tuple[float, float]:
    """Stalls that explain the base run's tail: the model's stages are deterministic, the
    machine is not (preemption, steal on a shared VM). A stall of p99 − p50 with the
    probability that brings the model's mean latency to the measured one (closed loop:
    p / requests per second) leaves the median alone and puts the tail at the measured p99."""
    load = Load(tuple(sizes), "closed", duration_s=1.0, warmup_s=0.2)
    r = simulate(pipeline_of(base, cpus), costs, load)
    measured_mean = int(base["p"]) / base["requests_per_s"]
    stall_s = max(0.0, (base["p99_us"] - base["p50_us"]) * 1e-6)
    model_mean = float(r.latencies_s.mean())
    if stall_s <= 0 or measured_mean <= model_mean:
        return (0.0, 0.0)
    return (min(0.5, (measured_mean - model_mean) / stall_s), stall_s)


def relative_error(pred: float, meas: float) -> float:
    """(predicted − measured) / measured: +0.25 is a prediction 25% too high."""
    return (pred - meas) / meas if meas else math.inf


def _is_base(row: dict[str, Any]) -> bool:
    """The row stage costs come from: 1p 1w 1k 1e per request, raw over ipc, closed loop
    (whatever the matcher and the request sizes)."""
    d = Deployment.of_row(row)
    base = Deployment(matcher=d.matcher, request_queries=d.request_queries)
    return replace(d, batch_timeout_us=0) == base and row.get("mode") == "closed"


def profile_channel(
    profile: dict[str, Any], channel: str = "zmq/ipc-round-trip"
) -> tuple[float, float | None]:
    """(L, B) of a probe profile's channel: the client↔daemon hop the sweep's requests took."""
    ch = profile.get("channels", {}).get(channel)
    fit = (ch or {}).get("fit")
    if not fit:
        raise ValueError(f"the probe profile has no fitted {channel!r} channel")
    return (float(fit["latency_s"]), fit.get("bandwidth_bps"))


def calibrate(
    rows: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    cpus: int | None = None,
    progress: Callable[[str], None] | None = None,
    channel: tuple[float, float | None] | None = None,
) -> dict[str, Any]:
    """Stage costs from the base row; φ fitted on all rows; the validation error by
    leave-one-out: each configuration is predicted with the φ fitted on the others, and the
    error quoted is the median over every configuration but the base (whose stage costs the
    model is built from, so its prediction is not independent)."""
    say = progress or (lambda _m: None)
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    base = next((r for r in rows if _is_base(r)), None)
    if base is None:
        raise ValueError("the sweep needs a 1p 1w 1k 1e per-request row (stage costs come from it)")
    if len(rows) < 3:
        raise ValueError("calibrating needs at least 3 configurations (the base and two to fit and check)")
    lines = replace(stage_lines(base), channel=channel)
    stall = fit_stall(base, lines.costs(0.0), sizes, cpus)

    # Every (φ, configuration) prediction once; fitting and leave-one-out only pick among them.
    preds: dict[float, list[dict[str, float]]] = {}
    for phi in CALIBRATION_GRID:
        say(f"simulating every configuration with φ = {phi:.1f}")
        preds[phi] = [predict(r, lines.costs(phi, stall), sizes, cpus) for r in rows]

    def loss(phi: float, i: int) -> float:
        p, r = preds[phi][i], rows[i]
        tput, p50 = p["queries_per_s"] / r["queries_per_s"], p["p50_us"] / r["p50_us"]
        return math.log(tput) ** 2 + math.log(p50) ** 2

    def fit(without: int | None) -> float:
        others = [j for j in range(len(rows)) if j != without]
        return min(CALIBRATION_GRID, key=lambda phi: sum(loss(phi, j) for j in others))

    phi = fit(None)
    table = []
    keys = ("queries_per_s", "p50_us", "p99_us")
    for i, r in enumerate(rows):
        held_out = preds[fit(i)][i]
        table.append({
            "config": r["label"], "role": "stage costs" if r is base else "held out",
            "measured": {k: r[k] for k in keys}, "predicted": held_out, "fitted": preds[phi][i],
            "error": {k: relative_error(held_out[k], r[k]) for k in keys},
        })  # fmt: skip
    checked = [t for t in table if t["role"] == "held out"]

    def med(key: str) -> float:
        return statistics.median(abs(t["error"][key]) for t in checked)

    return {
        "cpus": cpus,
        "cpu_share_outside": phi,
        "stage_lines_s": asdict(lines),
        "stall": {"probability": stall[0], "seconds": stall[1]},
        "costs": asdict(lines.costs(phi, stall)),
        "base_config": base["label"],
        "base_deployment": Deployment.of_row(base).fields(),  # its transport and matcher: the grid's
        "validation": "leave-one-out over the configurations other than the base",
        "validation_configs": [t["config"] for t in checked],
        "median_abs_error": {
            "queries_per_s": med("queries_per_s"),
            "p50": med("p50_us"),
            "p99": med("p99_us"),
        },
        "table": table,
    }


def trace_sizes(trace_dir: Path) -> list[int]:
    with open(trace_dir / "requests.csv", newline="") as f:
        return [int(r["N_QUERIES"]) for r in csv.DictReader(f)]


def load(path: Path) -> dict[str, Any]:
    """A calibration written by `offload plan calibrate`."""
    c = json.loads(Path(path).read_text())
    if ("costs" not in c and "kinds" not in c) or "median_abs_error" not in c:
        raise ValueError(f"{path}: not a calibration (write one with `offload plan calibrate`)")
    return c
