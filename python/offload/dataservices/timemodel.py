"""Learned time models and the offload decision (seed 003, slides 26-31): how long a query takes
each way, from the plan's estimated sizes, so the node can choose before running it.

The two ways, in stages:

* ``offload``  = node engine (run the plan) + node stream (serialize and send the result)
  + transfer of the result over the link + host receive;
* ``pushback`` = node stream of the scanned columns + their transfer + host receive + host engine.

Engine and stream times are learned per system type (``host``, a node profile) with gradient
boosting (scikit-learn) from a training suite that runs real queries against a real node under
its budget (:mod:`.training`): the node reports its engine and stream seconds, the host its
receive and engine seconds. Transfer is bytes over the link's rate plus its latency (measured
on the link, as the probe's fit does). Training samples are kept as JSON and the models are
fitted when loaded, so nothing executable is read from disk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

FEATURES = ("in_rows", "in_bytes", "out_rows", "out_bytes", "functions", "aggregate", "join", "sort", "heavy",
            "heavy_rows", "cheap_rows", "aggregate_rows", "sort_rows")  # fmt: skip
TARGETS = ("node_engine", "node_stream_out", "node_stream_in", "node_offload", "node_pushback",
           "node_request", "host_engine", "host_receive_out", "host_receive_in")  # fmt: skip
"""What is learned. ``node_stream_out``: serializing and sending the offloaded result;
``node_stream_in``: the scanned columns (pushback); ``node_offload`` / ``node_pushback``: the
node's whole stream each way, which the decision uses (on a node held to a CPU quota the engine
and the serializer share it, so their sum is not the whole); ``node_request``: asking the node
for the query (its checks and estimate, a round trip), the same either way; ``host_receive_*``:
the host's part of a fetch beyond the node's stream (deserializing, buffering)."""


@dataclass
class QueryFeatures:
    """A query's sizes as the estimator sees them, plus its shape."""

    in_rows: float
    in_bytes: float
    out_rows: float
    out_bytes: float
    functions: int
    aggregate: bool
    join: bool
    sort: bool
    heavy: int = 0
    """Heavy scalar function calls in the plan (plans.heavy_calls), nested ones included."""
    heavy_rows: float = 0.0
    """Estimated rows each heavy call runs on, summed: a filter below the functions cuts it."""
    cheap_rows: float = 0.0
    """The same for the cheap calls (comparisons, arithmetic, boolean logic)."""
    aggregate_rows: float = 0.0
    """Estimated rows entering aggregates."""
    sort_rows: float = 0.0
    """Estimated rows entering sorts."""

    def vector(self) -> list[float]:
        return [
            math.log1p(self.in_rows),
            math.log1p(self.in_bytes),
            math.log1p(self.out_rows),
            math.log1p(self.out_bytes),
            float(self.functions),
            float(self.aggregate),
            float(self.join),
            float(self.sort),
            float(self.heavy),
            math.log1p(self.heavy_rows),
            math.log1p(self.cheap_rows),
            math.log1p(self.aggregate_rows),
            math.log1p(self.sort_rows),
        ]


def features(
    plan: bytes,
    est_rows: float,
    est_bytes: float,
    tables: dict[str, tuple[int, float]],
    work: Mapping[str, float] | None = None,
    schemas: Mapping[str, pa.Schema] | None = None,
) -> QueryFeatures:
    """Features of ``plan``: ``tables`` maps each data set read to (rows, bytes of the columns
    read); ``est_*``: the estimated result; ``work``: the estimator's work counts
    (estimate.WORK; default: every call on every row read, no aggregate or sort rows);
    ``schemas``: the data sets' schemas (the columns' type families; none: all fixed-width)."""
    from substrait.plan_pb2 import Plan

    from offload.dataservices.plans import find, function_calls, function_names, heavy_calls, walk

    p = Plan()
    p.ParseFromString(plan)
    root = p.relations[0].root
    kinds = {r.DESCRIPTOR.name for r in walk(root) if r.DESCRIPTOR.name.endswith("Rel")}
    heavy = heavy_calls(root, function_names(p))
    in_rows = float(sum(r for r, _ in tables.values()))
    w = work or {}
    return QueryFeatures(
        in_rows=in_rows,
        in_bytes=float(sum(b for _, b in tables.values())),
        out_rows=float(est_rows),
        out_bytes=float(est_bytes),
        functions=len(find(root, "ScalarFunction")),
        aggregate="AggregateRel" in kinds,
        join="JoinRel" in kinds,
        sort="SortRel" in kinds,
        heavy=heavy,
        heavy_rows=float(w.get("heavy_rows", heavy * in_rows)),
        cheap_rows=float(w.get("cheap_rows", (function_calls(root) - heavy) * in_rows)),
        aggregate_rows=float(w.get("aggregate_rows", 0.0)),
        sort_rows=float(w.get("sort_rows", 0.0)),
    )


def scan_features(f: QueryFeatures) -> QueryFeatures:
    """The features of shipping a query's input as it is (pushback's stream)."""
    return QueryFeatures(f.in_rows, f.in_bytes, f.in_rows, f.in_bytes, 0, False, False, False)


@dataclass
class QuerySample:
    """One measured query: its features and the seconds of each stage (None where not run)."""

    system: str
    features: QueryFeatures
    times: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"system": self.system, "features": asdict(self.features), "times": self.times}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> QuerySample:
        return QuerySample(
            d["system"], QueryFeatures(**d["features"]), {k: float(v) for k, v in d["times"].items()}
        )


@dataclass
class TransferLink:
    """The link in the transfer model: bytes per second (None: not shaped, the stream times
    already hold the sending) and one-way latency in seconds."""

    bytes_per_s: float | None
    latency_s: float

    def seconds(self, nbytes: float) -> float:
        return self.latency_s + (nbytes / self.bytes_per_s if self.bytes_per_s else 0.0)

    @staticmethod
    def of(shaped: dict[str, Any] | None, latency_s: float = 50e-6) -> TransferLink:
        """From a node's link report (link.shape): its rate, and its delay or ``latency_s``."""
        if not shaped or not shaped.get("rate_mbit"):
            return TransferLink(None, latency_s)
        delay = float(shaped.get("delay_ms") or 0.0) / 1e3
        return TransferLink(float(shaped["rate_mbit"]) * 1e6 / 8, delay or latency_s)


@dataclass
class Models:
    """A regressor of log seconds per (system, target), fitted from samples: gradient boosting,
    which on this machine's training files came out 2-6 points of median error ahead of random
    forests on the node's stages (held-out quarters, five splits)."""

    samples: list[QuerySample]
    regressors: dict[tuple[str, str], Any] = field(default_factory=dict)

    @classmethod
    def fit(cls, samples: Sequence[QuerySample], seed: int = 0) -> Models:
        from sklearn.ensemble import GradientBoostingRegressor

        m = cls(list(samples))
        for system in {s.system for s in samples}:
            for target in TARGETS:
                rows = [s for s in samples if s.system == system and target in s.times]
                if len(rows) < 4:
                    continue
                x = np.array([s.features.vector() for s in rows])
                y = np.log(np.array([max(s.times[target], 1e-6) for s in rows]))
                gbm = GradientBoostingRegressor(
                    n_estimators=300, max_depth=3, learning_rate=0.05, subsample=0.8, random_state=seed
                )
                m.regressors[(system, target)] = gbm.fit(x, y)
        return m

    def predict(self, system: str, target: str, f: QueryFeatures) -> float:
        model = self.regressors.get((system, target))
        if model is None:
            raise KeyError(f"no model of {target} on {system}: train with `offload node train`")
        return float(np.exp(model.predict(np.array([f.vector()]))[0]))

    def systems(self) -> set[str]:
        return {s for s, _ in self.regressors}

    def save(self, path: str | Path) -> None:
        """Writes the samples whole or not at all (offload.files: a full disk keeps the old file)."""
        from offload.files import write_text

        write_text(path, json.dumps({"samples": [s.as_dict() for s in self.samples]}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Models:
        try:
            data = json.loads(Path(path).read_text())
            return cls.fit([QuerySample.from_dict(d) for d in data["samples"]])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a training file of `offload node train` ({e})") from None


@dataclass
class Decision:
    """The predicted stages both ways, the choice and why."""

    way: str
    offload: dict[str, float]
    pushback: dict[str, float]
    why: str
    crossover_mbit: float | None = None
    """The link rate at which both ways take as long (None: one way wins at every rate)."""
    above: str | None = None
    """The way that wins above ``crossover_mbit`` (the other wins below it)."""

    @property
    def offload_s(self) -> float:
        return sum(self.offload.values())

    @property
    def pushback_s(self) -> float:
        return sum(self.pushback.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "way": self.way,
            "offload": self.offload,
            "pushback": self.pushback,
            "offload_s": self.offload_s,
            "pushback_s": self.pushback_s,
            "why": self.why,
            "crossover_mbit": self.crossover_mbit,
            "above_crossover": self.above,
        }


def decide(
    models: Models, node_system: str, f: QueryFeatures, link: TransferLink, host_system: str = "host"
) -> Decision:
    """Predicts both ways' stages for a query with features ``f`` and picks the faster."""
    parts = _predicted(models, node_system, host_system, f)
    off, back = _stages(parts, f, link)
    o, b = sum(off.values()), sum(back.values())
    way = "offload" if o <= b else "pushback"
    big = max(off, key=lambda k: off[k]) if way == "pushback" else max(back, key=lambda k: back[k])
    loser = back if way == "offload" else off
    why = (
        f"{way}: {min(o, b) * 1e3:.1f} ms against {max(o, b) * 1e3:.1f} ms "
        f"({100 * (1 - min(o, b) / max(o, b)):.1f}% less); the other way's largest stage is "
        f"{big} ({loser[big] * 1e3:.1f} ms)"
    )

    def both(rate: float) -> tuple[float, float]:
        o_, b_ = _stages(parts, f, TransferLink(rate, link.latency_s))
        return sum(o_.values()), sum(b_.values())

    rate, above = crossover(both)
    if rate is not None:
        why += f"; {above} wins on links above {rate * 8e-6:,.0f} Mbit/s"
    return Decision(way, off, back, why, None if rate is None else rate * 8e-6, above)


def _predicted(models: Models, node_system: str, host_system: str, f: QueryFeatures) -> dict[str, float]:
    """The learned parts of both ways, which do not depend on the link."""
    scan = scan_features(f)
    return {
        "request": models.predict(node_system, "node_request", f)
        if (node_system, "node_request") in models.regressors
        else 0.0,
        "node_offload": _node_total(
            models, node_system, f, "node_offload", ("node_engine", "node_stream_out")
        ),
        "node_pushback": _node_total(models, node_system, scan, "node_pushback", ("node_stream_in",)),
        "receive_out": models.predict(host_system, "host_receive_out", f),
        "receive_in": models.predict(host_system, "host_receive_in", scan),
        "host_engine": models.predict(host_system, "host_engine", f),
    }


def _stages(
    p: dict[str, float], f: QueryFeatures, link: TransferLink
) -> tuple[dict[str, float], dict[str, float]]:
    """Both ways' stages over ``link``. The node streams batch by batch while the link carries
    them, so the link adds only what it takes beyond the node's stream (the stream times were
    learned on an unshaped link and already hold loopback's sending)."""
    t_o, t_b = link.seconds(f.out_bytes), link.seconds(f.in_bytes)
    off = {
        "request": p["request"],
        "node (engine, stream)": p["node_offload"],
        "link beyond the node": max(0.0, t_o - p["node_offload"]),
        "host receive": p["receive_out"],
    }
    back = {
        "request": p["request"],
        "node stream": p["node_pushback"],
        "link beyond the node": max(0.0, t_b - p["node_pushback"]),
        "host receive": p["receive_in"],
        "host engine": p["host_engine"],
    }
    return off, back


RATES = np.geomspace(1e5, 1.25e11, 121)
"""Link rates (bytes/s, 0.8 Mbit/s to 1 Tbit/s) the crossover is looked for over."""


def crossover(both: Callable[[float], tuple[float, float]]) -> tuple[float | None, str | None]:
    """The fastest link rate (bytes/s) where the faster way changes, ``both(rate)`` giving
    (offload s, pushback s), and the way that wins above it; (None, None) where one way wins
    over all of RATES."""

    def winner(rate: float) -> str:
        o, b = both(rate)
        return "offload" if o <= b else "pushback"

    ways = [winner(float(r)) for r in RATES]
    changes = [i for i in range(len(ways) - 1) if ways[i] != ways[i + 1]]
    if not changes:
        return None, None
    lo, hi = float(RATES[changes[-1]]), float(RATES[changes[-1] + 1])
    for _ in range(40):  # bisection in log space
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if winner(mid) == ways[changes[-1]] else (lo, mid)
    return math.sqrt(lo * hi), ways[-1]


def _node_total(models: Models, system: str, f: QueryFeatures, total: str, parts: tuple[str, ...]) -> float:
    """The node's whole stream one way: its own model, or (older training files) the parts' sum."""
    if (system, total) in models.regressors:
        return models.predict(system, total, f)
    return sum(models.predict(system, p, f) for p in parts)


def held_out_error(samples: Sequence[QuerySample], seed: int = 0, share: float = 0.25) -> dict[str, float]:
    """Median relative error per (system/target) of models fitted on the rest, on a random
    ``share`` of the queries held out."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(samples))
    cut = max(1, int(len(samples) * share))
    test, train_ = [samples[i] for i in idx[:cut]], [samples[i] for i in idx[cut:]]
    m = Models.fit(train_, seed)
    errs: dict[str, list[float]] = {}
    for s in test:
        for target, y in s.times.items():
            if (s.system, target) in m.regressors and y > 0:
                p = m.predict(s.system, target, s.features)
                errs.setdefault(f"{s.system}/{target}", []).append(abs(p - y) / y)
    return {k: float(np.median(v)) for k, v in errs.items()}
