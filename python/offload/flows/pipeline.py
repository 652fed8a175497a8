"""A model of the particle pipeline over nodes (seed 003: partition and sift over 100
BlueField-2), calibrated on `offload flows run` results, to predict node counts that one
machine cannot run.

Each node partitions its producers' share of the input and sifts the partitions it owns. What
it costs in CPU seconds is linear in two amounts, fitted over the nodes of the calibration runs
(non-negative least squares):

    cpu(node) = a · GB it partitions (and as much again it sifts)
              + b · east-west batches it sends or receives (one per message and remote owner:
                a Flight write, its acknowledgement, a handler's wake-up)

With N nodes sharing B GB in M producer messages evenly, each partitions B/N and sends and
receives 2 · (M/N) · (N − 1) batches: the per-batch cost does not shrink as nodes are added, so
it is what limits scaling once the per-GB work is spread thin. (A cost per GB moved fits the
runs here worse: docs/flows.md.) Each node moves 2 · (B/N) · (N − 1)/N GB over its link. A run
takes the longest of three bounds, plus the fixed latency ``o`` of a run (setup, the first
message, the flush's round trips: the 1-node run's wall time less its CPU bound):

* the node's CPU: cpu(node) / share (a node gets ``share`` of a core: its budget);
* the machine's CPU, where all nodes share one machine (the runs here): (N · cpu(node) +
  the producers' CPU) / cores;
* the node's link: its east-west bytes / link rate.

100 SmartNICs each have their own cores, so the machine bound drops out of that prediction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass
class FlowModel:
    a: float
    """CPU seconds per GB a node partitions and sifts."""
    b: float
    """CPU seconds per east-west batch a node sends or receives."""
    o: float
    """Seconds of fixed latency per run."""
    producer: float
    """The producers' CPU seconds per GB (on the hosts; here, on the same machine)."""
    share: float
    """Cores each node gets."""
    fit_on: list[int]

    def node_cpu(self, nodes: int, gb: float, messages: int) -> float:
        return self.a * gb / nodes + self.b * 2 * messages / nodes * (nodes - 1)

    def predict(
        self, nodes: int, gb: float, messages: int, cores: float | None = None, link_gbit: float | None = None
    ) -> dict:
        """Wall seconds and GB/s of ``gb`` in ``messages`` producer messages over ``nodes``;
        ``cores``: the one machine all nodes share (None: each node its own, as SmartNICs);
        ``link_gbit``: each node's link."""
        if nodes < 1 or gb <= 0 or messages < 1:
            raise ValueError(f"need >= 1 node, > 0 GB and >= 1 message, got {nodes}, {gb} and {messages}")
        cpu = self.node_cpu(nodes, gb, messages)
        bounds = {"node_cpu": cpu / self.share}
        if cores is not None:
            bounds["machine_cpu"] = (nodes * cpu + self.producer * gb) / cores
        if link_gbit:
            bounds["link"] = 2 * (gb / nodes) * (nodes - 1) / nodes * 8 / link_gbit
        bound = max(bounds, key=lambda k: bounds[k])
        wall = bounds[bound] + self.o
        return {"nodes": nodes, "gb": gb, "wall_s": wall, "gb_per_s": gb / wall, "bound": bound,
                "bounds_s": bounds}  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def observations(runs: list[dict[str, Any]]) -> np.ndarray:
    """One row per node of every run: GB partitioned, east-west batches, CPU seconds."""
    rows = []
    for r in runs:
        for n in r["per_node"].values():
            batches = n["batches"]["sent"] + n["batches"]["received"]
            rows.append((n["breakdown"]["bytes_in"] / 1e9, batches, n["cpu_s"]))
    return np.array(rows, dtype=float).reshape(-1, 3)


def messages(run: dict[str, Any]) -> int:
    """The producer messages of a run."""
    return -(-run["rows"] // run["message_rows"])


def default_fit_on(counts: list[int]) -> list[int]:
    """The smallest node count and the middle one: the per-batch cost shows only where most of
    a message leaves its node (at 2 nodes half of it stays), and the largest stays held out."""
    counts = sorted(set(counts))
    return sorted({counts[0], counts[len(counts) // 2]}) if len(counts) > 2 else counts


def fit(runs: list[dict[str, Any]], share: float, cores: float, fit_on: list[int] | None = None) -> FlowModel:
    """The model from the runs on ``fit_on`` node counts (:func:`default_fit_on` if None), made on
    a machine of ``cores`` with nodes of ``share`` of a core each."""
    from scipy.optimize import nnls

    fit_on = fit_on or default_fit_on([r["nodes"] for r in runs])
    use = [r for r in runs if r["nodes"] in fit_on]
    if not use:
        raise ValueError(
            f"no run on {fit_on} nodes to fit on; runs have {sorted({r['nodes'] for r in runs})}"
        )
    obs = observations(use)
    if len({r["nodes"] for r in use}) < 2 or not obs[:, 1].any():
        raise ValueError("fitting needs runs on at least two node counts, one of them with east-west traffic")
    (a, b), _ = nnls(obs[:, :2], obs[:, 2])
    producer = float(np.median([r.get("driver_cpu_s", 0.0) / (r["bytes_in"] / 1e9) for r in use]))
    model = FlowModel(float(a), float(b), 0.0, producer, share, sorted({r["nodes"] for r in use}))
    first = [r for r in use if r["nodes"] == model.fit_on[0]]
    late = []
    for r in first:
        late.append(
            r["wall_s"]
            - model.predict(r["nodes"], r["bytes_in"] / 1e9, messages(r), free_cores(r, cores))["wall_s"]
        )
    model.o = max(0.0, float(np.median(late)))
    return model


def free_cores(run: dict[str, Any], cores: float) -> float:
    """The cores the run had: the machine's, less what other processes used meanwhile (the
    machine's busy CPU seconds less the nodes' and the driver's), which the model cannot know."""
    if not run.get("machine_busy_s"):
        return cores
    ours = sum(n["cpu_s"] for n in run["per_node"].values()) + run.get("driver_cpu_s", 0.0)
    others = max(0.0, run["machine_busy_s"] - ours) / run["wall_s"]
    return max(0.25, cores - others)


def validate(model: FlowModel, runs: list[dict[str, Any]], cores: float) -> list[dict[str, Any]]:
    """Predicted against measured GB/s for every run, with the relative error; on one machine
    the machine bound uses the cores the run had (:func:`free_cores`)."""
    out = []
    for r in runs:
        p = model.predict(r["nodes"], r["bytes_in"] / 1e9, messages(r), free_cores(r, cores))
        err = p["gb_per_s"] / r["gb_per_s"] - 1
        out.append({"nodes": r["nodes"], "measured_gb_per_s": r["gb_per_s"],
                    "predicted_gb_per_s": p["gb_per_s"],
                    "error": err, "bound": p["bound"], "fitted_on": r["nodes"] in model.fit_on})  # fmt: skip
    return out


def validate_by_count(model: FlowModel, runs: list[dict[str, Any]], cores: float) -> list[dict[str, Any]]:
    """:func:`validate` over repeated runs: per node count, the median measured and predicted
    GB/s and the error between them (repeats differ by up to a fifth on this shared machine)."""
    out = []
    checks = validate(model, runs, cores)
    for n in sorted({c["nodes"] for c in checks}):
        mine = [c for c in checks if c["nodes"] == n]
        measured = float(np.median([c["measured_gb_per_s"] for c in mine]))
        predicted = float(np.median([c["predicted_gb_per_s"] for c in mine]))
        out.append({"nodes": n, "repeats": len(mine), "measured_gb_per_s": measured,
                    "measured_range": [min(c["measured_gb_per_s"] for c in mine),
                                       max(c["measured_gb_per_s"] for c in mine)],
                    "predicted_gb_per_s": predicted, "error": predicted / measured - 1,
                    "bound": mine[0]["bound"], "fitted_on": mine[0]["fitted_on"]})  # fmt: skip
    return out


@dataclass
class Validated:
    """The model fitted on runs of ``offload flows run``, its error on every node count run (those
    it was not fitted on are the validation) and its predictions for other node counts."""

    model: FlowModel
    profile: str
    """The runs' node budget."""
    cores: float
    """The machine the runs shared."""
    link_gbit: float | None
    """Each predicted node's link."""
    checks: list[dict[str, Any]]
    predictions: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        held_out = [abs(c["error"]) for c in self.checks if not c["fitted_on"]]
        return {"model": self.model.as_dict(), "cores": self.cores, "validation": self.checks,
                "predictions": self.predictions,
                "max_abs_error_held_out": max(held_out) if held_out else None}  # fmt: skip


def from_runs(
    runs: list[dict[str, Any]],
    predict: list[int],
    gb: float,
    fit_on: list[int] | None = None,
    link_gbit: float | None = None,
    message_mb: float = 0.0,
) -> Validated:
    """The model fitted on ``runs`` (on ``fit_on`` node counts: :func:`default_fit_on` if None),
    validated on all of them, predicting ``gb`` GB over each of ``predict`` node counts, each node
    with its own cores and a ``link_gbit`` link (None: the runs' profile's), in producer messages
    of ``message_mb`` MB (0: the runs' size). KeyError, IndexError, ValueError or TypeError where
    the runs are not runs."""
    import os

    from offload.host import budgets as B

    prof = B.profile(runs[0]["profile"])
    share = runs[0].get("share") or prof.threads * (prof.cpu_per_thread or 1.0)
    use = fit_on or default_fit_on(sorted({r["nodes"] for r in runs}))
    cores = float(runs[0].get("cores") or os.cpu_count() or 1)
    model = fit(runs, share, cores, use)
    link = link_gbit if link_gbit is not None else (prof.link.rate_mbit or 0) / 1e3 or None
    checks = validate_by_count(model, runs, cores)
    per_msg = message_mb * 1e6 or runs[0]["bytes_in"] / messages(runs[0])
    msgs = max(1, round(gb * 1e9 / per_msg))
    preds = [model.predict(n, gb, msgs, None, link) | {"message_mb": per_msg / 1e6} for n in predict]
    return Validated(model, prof.name, cores, link, checks, preds)
