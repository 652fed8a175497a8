"""The planner calibrated on knees (issue 44): every knee row of `offload serve sweep --knee`
carries the daemon's CPU per query by thread role at its knee and the generator's beside it.
Those per-role costs become the simulator's stage costs for every point of the same kind (the
matcher, transport and encoding, inline or with executors), and a point's knee is predicted by
the search the generator runs, on the model: the most requests/s whose p99 meets the SLA.
Leave-one-out over the measured knees of a kind is the validation error quoted with its
predictions."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from offload.plan.simulate import Costs, Load, request_sizes, simulate
from offload.plan.simulate import pipeline_for as _pipeline_for
from offload.serve.grid import Deployment, Policy, product

# Simulated requests in a capacity run and in a run at a rate (p99 needs 100; wall time ~50 µs each).
RUN_REQUESTS = 3_000
# The stall that puts the model's p99 where the machine's is (p99 − p50 of the other knees),
# with a probability of 2%: the slowest 1% of the requests are stalled ones (of a run's 3,000,
# 60 are stalled, give or take 8).
STALL_PROBABILITY = 0.02
# The share of its capacity at which the model's latency is read where the knee lies at or
# beyond it (at 100% an open-loop queue grows for as long as the run lasts).
HOLDS = 0.95


def kind(d: Deployment) -> str:
    """The points whose per-query costs are taken to be the same: matcher, transport and
    encoding, inline or with executors (the roles that do the work differ)."""
    return f"{d.matcher} {d.transport} {d.encoding} {'inline' if d.k == 0 else 'executors'}"


@dataclass(frozen=True)
class RoleCosts:
    """CPU ns per query by role at a knee: the daemon's threads (`stats` → `cpu`) less the
    match, the match itself, ZeroMQ's I/O threads and the generator. The shm thread counts as
    the broker (it admits shared-memory requests)."""

    broker: float
    worker: float
    executor: float
    io: float
    match: float
    generator: float

    @staticmethod
    def of_row(row: dict[str, Any]) -> RoleCosts | None:
        """The role costs of a knee row, None if it has none (not a knee, or no host path)."""
        per = (row.get("host_path") or {}).get("ns_per_query")
        gen = (row.get("generator_to_host_path") or {}).get("generator_ns_per_query")
        if row.get("mode") != "knee" or not per or gen is None:
            return None
        d, match = Deployment.of_row(row), float(per.get("match", 0.0))
        # Shared-memory clients are admitted by the daemon's shm thread: it is their broker
        # (inline, it matches too); ZeroMQ's I/O threads only move bytes beside the broker.
        role = {"broker": float(per.get("broker", 0.0)) + float(per.get("shm", 0.0)),
                "worker": float(per.get("worker", 0.0)),
                "executor": float(per.get("executor", 0.0))}  # fmt: skip
        matched = "executor" if d.k > 0 else ("worker" if d.encoding == "raw" else "broker")
        role[matched] = max(0.0, role[matched] - match)
        return RoleCosts(**role, io=float(per.get("zmq_io", 0.0)), match=match, generator=float(gen))

    @staticmethod
    def median(costs: Sequence[RoleCosts]) -> RoleCosts:
        """Role by role, the median of several knees' costs."""
        keys = asdict(costs[0]).keys()
        return RoleCosts(**{k: statistics.median(getattr(c, k) for c in costs) for k in keys})


def stage_costs(d: Deployment, role: RoleCosts, queries_per_request: float, base: Costs) -> Costs:
    """The model's stage costs of point `d` from per-query role costs: the broker's in its two
    passes per request, the workers' in decoding, the executors' after the match in the reply,
    the match on the engines, the I/O threads' beside the critical path and the generator's as
    the client's (it shares the cores). `base` gives the rest (wake-ups, stalls, the channel)."""
    ns, n = 1e-9, queries_per_request
    return replace(
        base, broker_s=role.broker * n / 2 * ns, worker_request_s=0.0, worker_query_s=role.worker * ns,
        reply_request_s=0.0, reply_query_s=role.executor * ns, kernel_query_s=role.match * ns,
        invoke_s=0.0, kernel_fixed_s=0.0, background_request_s=role.io * n * ns, client_request_s=0.0,
        client_query_s=role.generator * ns, kernel_on_host=True,
    )  # fmt: skip


def points(
    calib: dict[str, Any],
    p: Sequence[int],
    shapes: Sequence[tuple[int, int, int]],
    policies: Sequence[Policy],
    request_queries: Sequence[int],
    devices: Sequence[str] = (),
) -> list[Deployment]:
    """The grid's points of every kind a calibration measured (its matcher, transport and
    encoding; inline shapes for an inline kind, executors' for the other), and for every
    executors kind the same points with each what-if device of `devices` as the matcher."""
    out: dict[Deployment, None] = {}
    for name in calib["kinds"]:
        matcher, transport, encoding, mode = name.split(" ")
        matchers = [matcher, *(devices if mode == "executors" else ())]
        got = product(p, shapes, policies, [encoding], request_queries, [transport], matchers)
        out |= dict.fromkeys(d for d in got if (d.k > 0) == (mode == "executors"))
    return list(out)


def host_kind(d: Deployment, calib: dict[str, Any]) -> str:
    """The kind whose role costs point `d` pays on the host: its own, or for a what-if device
    (a matcher the calibration never measured) the first executors kind measured with its
    transport and encoding (the device replaces only the match)."""
    if kind(d) in calib["kinds"]:
        return kind(d)
    for name in calib["kinds"]:
        _, transport, encoding, mode = name.split(" ")
        if (transport, encoding, mode) == (d.transport, d.encoding, "executors") and d.k > 0:
            return name
    raise ValueError(f"{d.label()}: the calibration has no {d.transport} {d.encoding} knee with executors")


def mean_queries(d: Deployment, sizes: Sequence[int]) -> float:
    return float(d.request_queries) if d.request_queries else statistics.fmean(sizes)


def capacity(d: Deployment, costs: Costs, sizes: Sequence[int], cpus: float | None) -> float:
    """Requests/s the model of point `d` answers at most: many clients in closed loop."""
    pipe = replace(_pipeline_for(d, cpus), p=max(64, d.p))
    qsizes = request_sizes(d, sizes)
    probe = simulate(pipe, costs, Load(qsizes, duration_s=0.002, warmup_s=0.001))
    dur = min(1.0, RUN_REQUESTS / max(probe.throughput_rps, 1.0))
    return simulate(pipe, costs, Load(qsizes, duration_s=dur, warmup_s=dur / 4)).throughput_rps


def at_rate(
    d: Deployment, costs: Costs, sizes: Sequence[int], cpus: float | None, rate: float
) -> dict[str, float]:
    """The model of point `d` under fixed arrivals at `rate` requests/s, as the generator sends."""
    qsizes = request_sizes(d, sizes)
    dur = RUN_REQUESTS / rate
    r = simulate(_pipeline_for(d, cpus), costs, Load(qsizes, "open", rate, duration_s=dur, warmup_s=dur / 4,
                                                     arrivals="fixed"))  # fmt: skip
    return {"rate_rps": rate, "queries_per_s": r.throughput_qps, "requests_per_s": r.throughput_rps,
            "p50_us": r.percentile(50) * 1e6, "p99_us": r.percentile(99) * 1e6}  # fmt: skip


def calibrate(
    rows: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    base: Costs,
    cpus: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Per kind, the median role costs of its measured knees, and two parameters fitted over all
    knees: the share of the model's capacity the machine holds at its knee (`knee_utilisation`:
    the model has no scheduler noise, the machine's p99 reaches the SLA below saturation) and
    the stall that puts the p99 where the machine's is (its p99 less the model's p50). Validation: every knee
    predicted with the role costs of the other knees of its kind and the parameters fitted on
    the other knees (leave-one-out; a kind needs two knees to be checked)."""
    say = progress or (lambda _m: None)
    by_kind: dict[str, list[tuple[dict[str, Any], RoleCosts]]] = {}
    for r in rows:
        role = RoleCosts.of_row(r)
        if role is not None:
            by_kind.setdefault(kind(Deployment.of_row(r)), []).append((r, role))
    if not by_kind:
        raise ValueError("no knee row with the daemon's host path: measure with `offload serve sweep --knee`")
    held = _held_out_costs(by_kind, sizes, base, cpus, say)
    ratios = [r["requests_per_s"] / cap for r, _, _, cap in held]
    gaps = [_tail(r, costs, cap, sizes, cpus) for r, _, costs, cap in held]
    table = []
    for i, (r, k, costs, cap) in enumerate(held):
        u = _median_without(ratios, i)
        stall = _median_without(gaps, i)
        if u is None or stall is None:
            continue
        say(f"predicting {r['label']} at {u:.2f} of its model's capacity")
        table.append(_held_out(r, k, costs, cap, u, stall, sizes, cpus))
    return {
        "cpus": cpus, "base_costs": asdict(base),
        "kinds": {k: asdict(RoleCosts.median([role for _, role in knees])) for k, knees in by_kind.items()},
        "knees": {k: len(knees) for k, knees in by_kind.items()},
        "knee_utilisation": statistics.median(ratios) if ratios else None,
        "stall_s": statistics.median(gaps) if gaps else None,
        "validation": "leave-one-out: each knee predicted from the other knees (role costs: of its kind)",
        "table": table, "median_abs_error": _errors(table),
    }  # fmt: skip


def _held_out_costs(
    by_kind: dict[str, list[tuple[dict[str, Any], RoleCosts]]],
    sizes: Sequence[int],
    base: Costs,
    cpus: int,
    say: Callable[[str], None],
) -> list[tuple[dict[str, Any], str, Costs, float]]:
    """Per knee of a kind with others: its stage costs from the other knees' role costs (their
    median) and the model's capacity with them."""
    held = []
    for k, knees in by_kind.items():
        for i, (r, _) in enumerate(knees):
            others = [role for j, (_, role) in enumerate(knees) if j != i]
            if others:
                say(f"[{len(held) + 1}] the model's capacity for {r['label']} (its kind's other knees)")
                d = Deployment.of_row(r)
                costs = stage_costs(d, RoleCosts.median(others), mean_queries(d, sizes), base)
                held.append((r, k, costs, capacity(d, costs, sizes, cpus)))
    return held


def _tail(r: dict[str, Any], costs: Costs, cap: float, sizes: Sequence[int], cpus: int) -> float:
    """The stall a knee's p99 shows beyond the model: its measured p99 less the model's p50 at
    its rate (a stalled request takes about a typical one's time plus the stall)."""
    d = Deployment.of_row(r)
    rate = min(r["requests_per_s"], HOLDS * cap)
    return float(r["p99_us"]) * 1e-6 - at_rate(d, costs, sizes, cpus, max(1.0, rate))["p50_us"] * 1e-6


def _median_without(values: Sequence[float], i: int) -> float | None:
    rest = [v for j, v in enumerate(values) if j != i]
    return statistics.median(rest) if rest else None


def predict(
    d: Deployment,
    costs: Costs,
    sizes: Sequence[int],
    cpus: float | None,
    utilisation: float,
    stall_s: float,
    cap: float | None = None,
) -> dict[str, float]:
    """A point's knee on the model: `utilisation` of its capacity (`cap`, computed if not
    given), at most all of it; its latency with the machine's stall at that rate, or at HOLDS
    of the capacity where the knee lies beyond it (the model's queue would grow without end
    there, the machine's held)."""
    cap = capacity(d, costs, sizes, cpus) if cap is None else cap
    stalled = replace(costs, stall_probability=STALL_PROBABILITY, stall_s=max(0.0, stall_s))
    got = at_rate(d, stalled, sizes, cpus, max(1.0, min(utilisation, HOLDS) * cap))
    rate = max(1.0, min(utilisation, 1.0) * cap)  # no knee beyond what the model can answer
    return got | {"rate_rps": rate, "requests_per_s": rate, "queries_per_s": rate * mean_queries(d, sizes),
                  "capacity_rps": cap}  # fmt: skip


def _held_out(
    r: dict[str, Any],
    k: str,
    costs: Costs,
    cap: float,
    u: float,
    stall: float,
    sizes: Sequence[int],
    cpus: int,
) -> dict[str, Any]:
    pred = predict(Deployment.of_row(r), costs, sizes, cpus, u, stall, cap)
    keys = ("queries_per_s", "p50_us", "p99_us")
    err = {key: (pred[key] - r[key]) / r[key] if r.get(key) else math.nan for key in keys}
    return {"config": r["label"], "kind": k, "measured": {key: r[key] for key in keys},
            "predicted": pred, "error": err}  # fmt: skip


def _errors(table: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median absolute error of the held-out predictions, over all and per kind."""

    def med(rows: Sequence[dict[str, Any]], key: str) -> float | None:
        got = [abs(t["error"][key]) for t in rows if not math.isnan(t["error"][key])]
        return statistics.median(got) if got else None

    kinds = sorted({t["kind"] for t in table})
    per = {k: {key: med([t for t in table if t["kind"] == k], key) for key in ("queries_per_s", "p99_us")}
           for k in kinds}  # fmt: skip
    return {"queries_per_s": med(table, "queries_per_s"), "p50": med(table, "p50_us"),
            "p99": med(table, "p99_us"), "by_kind": per}  # fmt: skip
