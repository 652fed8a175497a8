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

import itertools
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from offload import _native
from offload.dataservices.stats import bit_width, fixed_width, variable_width

FEATURES = ("in_rows", "in_bytes", "out_rows", "out_bytes", "functions", "aggregate", "join", "sort", "heavy",
            "heavy_rows", "cheap_rows", "aggregate_rows", "sort_rows", "string_rows", "in_string_bytes",
            "out_string_bytes", "join_rows", "group_bytes", "in_width", "in_string_width",
            "string_key_rows")  # fmt: skip
"""The vector a model sees (:meth:`QueryFeatures.vector`): sizes as logs, the work by kind, and
bytes per row read (all, and of variable-width columns): what the work is, not which table."""
TARGETS = ("node_engine", "node_stream_out", "node_stream_in", "node_offload", "node_pushback",
           "node_request", "host_engine", "host_receive_out", "host_receive_in")  # fmt: skip
"""What is learned. ``node_stream_out``: serializing and sending the offloaded result;
``node_stream_in``: the scanned columns (pushback); ``node_offload`` / ``node_pushback``: the
node's whole stream each way, which the decision uses (on a node held to a CPU quota the engine
and the serializer share it, so their sum is not the whole); ``node_request``: asking the node
for the query (its checks and estimate, a round trip), the same either way; ``host_receive_*``:
the host's part of a fetch beyond the node's stream (deserializing, buffering)."""
PRICED, FLOOR_S = _native.priced_names()
"""The quantities each operator works through (rows, bytes; ``one``: the fixed cost), whose unit
costs a stage's model fits (:meth:`Models.fit`), and the least seconds a stage is priced at;
their one home is crates/dataservices (``decide::PRICED``, ``Features::priced_work``)."""


@dataclass
class QueryFeatures:
    """A query's sizes as the estimator sees them, plus its shape and its work. Fields after
    ``sort`` have defaults, so training files written before them still load."""

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
    string_rows: float = 0.0
    """Rows each string function (LIKE, substr, lower...) runs on, summed."""
    in_string_bytes: float = 0.0
    """Bytes of the variable-width columns read (strings, binaries): what serializing, sending
    and receiving pay per byte and fixed-width numbers do not."""
    out_string_bytes: float = 0.0
    """The same in the result (the read's share of variable-width bytes, applied to the result)."""
    join_rows: float = 0.0
    """Rows entering hash joins, build and probe sides."""
    group_bytes: float = 0.0
    """A grouped aggregate's state: estimated groups times their row width."""
    string_key_rows: float = 0.0
    """Rows entering group-bys and hash joins whose keys are strings (or binaries): hashing and
    comparing a key costs per character, where an integer key costs one word."""

    def as_dict(self) -> dict[str, Any]:
        """The fields by name (all plain numbers: a shallow copy, not dataclasses.asdict's deep
        one, which cost a seventh of a decision)."""
        return dict(vars(self))

    def vector(self) -> list[float]:
        per_row = 1.0 / max(self.in_rows, 1.0)
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
            math.log1p(self.string_rows),
            math.log1p(self.in_string_bytes),
            math.log1p(self.out_string_bytes),
            math.log1p(self.join_rows),
            math.log1p(self.group_bytes),
            self.in_bytes * per_row,
            self.in_string_bytes * per_row,
            math.log1p(self.string_key_rows),
        ]


def priced_work(fs: Sequence[QueryFeatures | Mapping[str, Any]]) -> list[list[float]]:
    """The PRICED quantities of each of ``fs`` (features, or their fields by name in order), in
    one native call."""
    return _native.priced_work([list((f if isinstance(f, Mapping) else vars(f)).values()) for f in fs])


def features(
    plan: Any,
    est_rows: float,
    est_bytes: float,
    tables: dict[str, tuple[int, float]],
    work: Mapping[str, float] | None = None,
    schemas: Mapping[str, pa.Schema] | None = None,
) -> QueryFeatures:
    """Features of ``plan`` (its bytes, the parsed Plan, or its ``plans.PlanShape``, which the
    node's decision has read already): ``tables`` maps each data set read to (rows, bytes of
    the columns read); ``est_*``: the estimated result; ``work``: the estimator's work counts
    (estimate.WORK; default: every call on every row read, no aggregate or sort rows);
    ``schemas``: the data sets' schemas (the columns' type families; none: all fixed-width)."""
    from substrait.plan_pb2 import Plan

    from offload.dataservices import plans

    if isinstance(plan, plans.PlanShape):
        shape = plan
    else:
        p = plan if isinstance(plan, Plan) else Plan.FromString(plan)
        shape = plans.PlanIndex(p).shape()
    heavy, kinds = shape.heavy, shape.kinds
    in_rows = float(sum(r for r, _ in tables.values()))
    in_bytes = float(sum(b for _, b in tables.values()))
    in_string = _string_bytes(tables, shape.reads, schemas or {})
    w = work or {}
    aggregate, join = "AggregateRel" in kinds, "JoinRel" in kinds or "HashJoinRel" in kinds
    return QueryFeatures(
        in_rows=in_rows,
        in_bytes=in_bytes,
        out_rows=float(est_rows),
        out_bytes=float(est_bytes),
        functions=shape.functions,
        aggregate=aggregate,
        join=join,
        sort="SortRel" in kinds,
        heavy=heavy,
        heavy_rows=float(w.get("heavy_rows", heavy * in_rows)),
        cheap_rows=float(w.get("cheap_rows", (shape.functions - heavy) * in_rows)),
        aggregate_rows=float(w.get("aggregate_rows", 0.0)),
        sort_rows=float(w.get("sort_rows", 0.0)),
        string_rows=float(w.get("string_rows", shape.strings * in_rows)),
        in_string_bytes=in_string,
        out_string_bytes=float(est_bytes) * (in_string / in_bytes if in_bytes > 0 else 0.0),
        join_rows=float(w.get("join_rows", in_rows if join else 0.0)),
        group_bytes=float(w.get("group_bytes", est_bytes if aggregate and est_rows > 1 else 0.0)),
        string_key_rows=float(w.get("string_key_rows", 0.0)),
    )


def _string_bytes(
    tables: Mapping[str, tuple[int, float]],
    reads: Mapping[str, Collection[str]],
    schemas: Mapping[str, pa.Schema],
) -> float:
    """Bytes of the variable-width columns read: each table's bytes read less its fixed-width
    columns' (rows x byte width), where its schema is known and it reads such a column."""
    total = 0.0
    for t, (rows, nbytes) in tables.items():
        schema = schemas.get(t)
        if schema is None:
            continue
        types = _column_kinds(schema)
        kinds = [types[c] for c in reads.get(t, types) if c in types]
        if not any(variable for variable, _ in kinds):
            continue
        total += max(0.0, nbytes - rows * sum(width for _, width in kinds))
    return total


def _column_kinds(schema: pa.Schema) -> dict[str, tuple[bool, float]]:
    """:func:`_type_kind` of each column of ``schema``, kept per schema object (the last
    SCHEMAS_KEPT; a schema's names and types are new Python objects each time they are read:
    a seventh of a decision's features on a cold cache)."""
    got = _SCHEMA_KINDS.get(id(schema))
    if got is None or got[0] is not schema:  # an id is unique only while its object lives
        if len(_SCHEMA_KINDS) >= SCHEMAS_KEPT:
            _SCHEMA_KINDS.clear()
        got = _SCHEMA_KINDS[id(schema)] = (schema, {f.name: _type_kind(f.type) for f in schema})
    return got[1]


SCHEMAS_KEPT = 256
_SCHEMA_KINDS: dict[int, tuple[pa.Schema, dict[str, tuple[bool, float]]]] = {}


def _type_kind(t: pa.DataType) -> tuple[bool, float]:
    """(whether ``t`` is variable-width, its bytes a value where it is a fixed-width type, else
    0), kept per type (pyarrow's type checks are a Python call each: a tenth of the features)."""
    kind = _TYPE_KINDS.get(t)
    if kind is None:
        kind = _TYPE_KINDS[t] = (variable_width(t), fixed_width(t))
    return kind


_TYPE_KINDS: dict[pa.DataType, tuple[bool, float]] = {}


def scan_features(f: QueryFeatures) -> QueryFeatures:
    """The features of shipping a query's input as it is (pushback's stream)."""
    return QueryFeatures(
        f.in_rows, f.in_bytes, f.in_rows, f.in_bytes, 0, False, False, False,
        in_string_bytes=f.in_string_bytes, out_string_bytes=f.in_string_bytes,
    )  # fmt: skip


@dataclass
class QuerySample:
    """One measured query: its features and the seconds of each stage (None where not run)."""

    system: str
    features: QueryFeatures
    times: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"system": self.system, "features": self.features.as_dict(), "times": self.times}

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


def unit_costs(work: np.ndarray, seconds: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The non-negative unit cost of each PRICED quantity (one column of ``work`` a quantity, one
    row a sample) that prices the samples' ``seconds`` with the least squared relative error
    (non-negative least squares, scipy's; ``weights`` per sample): a classic operator cost
    model, which scales with a query's size where trees stop at the largest they saw."""
    from scipy.optimize import nnls

    rel = work / seconds[:, None]
    target = np.ones(len(seconds))
    if weights is not None:
        root = np.sqrt(np.asarray(weights, dtype=float))
        rel, target = rel * root[:, None], target * root
    norm = np.linalg.norm(rel, axis=0)
    used = norm > 0
    cost = np.zeros(work.shape[1])
    if used.any():
        solved, _ = nnls(rel[:, used] / norm[used], target, maxiter=50 * work.shape[1])
        cost[used] = solved / norm[used]
    return cost


TREES_STEP = 50
"""A paced fit grows each regressor's 300 trees this many at a time: a query that arrives while
the learner fits waits for at most one step (~5 ms of CPU a step at full core)."""


@dataclass
class Models:
    """A regressor of log seconds per (system, target), fitted from samples: gradient boosting,
    which on this machine's training files came out 2-6 points of median error ahead of random
    forests on the node's stages (held-out quarters, five splits). Predictions walk the fitted
    trees with numpy (:class:`Forest`), every stage of a decision at once."""

    samples: list[QuerySample]
    regressors: dict[tuple[str, str], Any] = field(default_factory=dict)
    costs: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    """Per (system, target) the unit cost of each PRICED quantity (seconds per row, per byte),
    fitted first; the trees learn the log of what they leave over."""
    reach: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    """Per (system, target) the most of each PRICED quantity its samples held: beyond that a
    stage is priced by its unit costs alone."""
    _forests: dict[tuple[tuple[str, str, int], ...], Forest] = field(default_factory=dict, repr=False)
    _plans: dict[tuple[str, str], tuple[Forest, bool, int, int]] = field(default_factory=dict, repr=False)
    _systems: frozenset[str] | None = field(default=None, repr=False)

    @classmethod
    def fit(
        cls,
        samples: Sequence[QuerySample],
        seed: int = 0,
        between: Callable[[], None] | None = None,
        weights: Sequence[float] | None = None,
    ) -> Models:
        """One regressor per (system, target) with at least 4 samples; with ``between``, each
        grows TREES_STEP trees at a time and ``between`` is called after each step (an online
        refit paces itself there); ``weights``, one a sample (default 1)."""
        from sklearn.ensemble import GradientBoostingRegressor

        m = cls(list(samples))
        w_all = None if weights is None else np.asarray(weights, dtype=float)
        for system in sorted({s.system for s in samples}):
            for target in TARGETS:
                at = [i for i, s in enumerate(samples) if s.system == system and target in s.times]
                if len(at) < 4:
                    continue
                x = np.array([samples[i].features.vector() for i in at])
                seconds = np.array([max(samples[i].times[target], FLOOR_S) for i in at])
                work = np.array(priced_work([samples[i].features for i in at]))
                w = None if w_all is None else w_all[at]
                cost = unit_costs(work, seconds, w)
                m.costs[(system, target)], m.reach[(system, target)] = cost, work.max(axis=0)
                y = np.log(seconds) - np.log(np.maximum(work @ cost, FLOOR_S))
                gbm = GradientBoostingRegressor(
                    n_estimators=300, max_depth=3, learning_rate=0.05, subsample=0.8, random_state=seed
                )
                if between is None:
                    m.regressors[(system, target)] = gbm.fit(x, y, sample_weight=w)
                    continue
                gbm.set_params(warm_start=True)  # in steps of TREES_STEP trees, ``between`` after each
                for n in range(TREES_STEP, gbm.n_estimators + 1, TREES_STEP):
                    gbm.set_params(n_estimators=n).fit(x, y, sample_weight=w)
                    between()
                m.regressors[(system, target)] = gbm
        return m

    def forest(self, keys: Sequence[tuple[str, str, int]]) -> Forest:
        """The regressors of ``keys`` = (system, target, which vector) as one forest (cached)."""
        k = tuple(keys)
        if k not in self._forests:
            missing = [f"{t} on {s}" for s, t, _ in k if (s, t) not in self.regressors]
            if missing:
                raise KeyError(f"no model of {', '.join(missing)}: train with `offload node train`")
            self._forests[k] = Forest([(self.regressors[(s, t)], i, self.costs[(s, t)]) for s, t, i in k])
        return self._forests[k]

    def predict(self, system: str, target: str, f: QueryFeatures) -> float:
        return float(self.forest([(system, target, 0)]).seconds(f)[0])

    def systems(self) -> frozenset[str]:
        """The systems the models are of (kept: the regressors are fitted once)."""
        if self._systems is None:
            self._systems = frozenset(s for s, _ in self.regressors)
        return self._systems

    def save(self, path: str | Path) -> None:
        """Writes the samples whole or not at all (offload.files: a full disk keeps the old file)."""
        from offload.files import write_text

        write_text(path, json.dumps({"samples": [s.as_dict() for s in self.samples]}, indent=1))

    @staticmethod
    def read_samples(path: str | Path) -> list[QuerySample]:
        try:
            data = json.loads(Path(path).read_text())
            return [QuerySample.from_dict(d) for d in data["samples"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a training file of `offload node train` ({e})") from None

    @classmethod
    def load(cls, path: str | Path) -> Models:
        return cls.fit(cls.read_samples(path))


class Forest:
    """Fitted gradient-boosted regressors of log seconds, evaluated together: their trees
    flattened into one node array (a leaf loops to itself) and handed once to the native core
    (``crates/dataservices``), which lays each out as a complete tree in heap order and walks
    them all in one call. scikit-learn's ``predict`` checks its input on every call, 0.1-0.3 ms
    a model, which nine models a decision paid for; numpy's level-by-level walk of every tree at
    once still took 0.1-0.17 ms, a fifth of a decision. Regressor ``j`` reads the feature vector
    ``which[j]`` of the rows given (0: the query, 1: its scan)."""

    def __init__(self, models: Sequence[tuple[Any, int, np.ndarray]]) -> None:
        trees = [(j, t.tree_) for j, (gbm, _, _) in enumerate(models) for t in gbm.estimators_[:, 0]]
        width = max(t.node_count for _, t in trees)
        n, nf = len(trees), models[0][0].n_features_in_
        # every tree's nodes in one flat array, tree i at i * width; a leaf loops to itself.
        # slot: where each node's feature is in the rows given (vector * features + feature)
        slot = np.zeros(n * width, dtype=np.int64)
        threshold = np.full(n * width, np.inf)
        left = np.arange(n * width, dtype=np.int64)
        right = left.copy()
        value = np.zeros(n * width)
        for i, (j, t) in enumerate(trees):
            c, at = t.node_count, i * width
            inner = t.children_left[:c] >= 0
            own = np.arange(at, at + c)
            slot[at : at + c] = np.where(inner, t.feature[:c], 0) + models[j][1] * nf
            threshold[at : at + c] = np.where(inner, t.threshold[:c], np.inf)
            left[at : at + c] = np.where(inner, t.children_left[:c] + at, own)
            right[at : at + c] = np.where(inner, t.children_right[:c] + at, own)
            value[at : at + c] = t.value[:c, 0, 0]
        roots = np.arange(n, dtype=np.int64) * width
        # each regressor's first tree (its trees are consecutive)
        starts = np.searchsorted([j for j, _ in trees], np.arange(len(models))).astype(np.int64)
        rate = np.array([gbm.learning_rate for gbm, _, _ in models])
        depth = max(int(t.max_depth) for _, t in trees)
        self._native = _native.Forest(slot, threshold, left, right, value, roots, starts, rate, depth)
        self.which = max(w for _, w, _ in models)
        self.reads = np.array([w for _, w, _ in models])
        self.cost = np.concatenate([c for _, _, c in models]).astype(np.float64)
        self.base = np.zeros(len(models))
        # the initial prediction (the training mean, for squared error), read back from
        # scikit-learn itself once, so this stays right whatever its loss keeps there
        for j, (gbm, _, _) in enumerate(models):
            x0 = np.zeros((1, nf))
            self.base[j] = float(gbm.predict(x0)[0]) - self._raw(np.repeat(x0, 2, axis=0))[j]

    def _raw(self, x: np.ndarray) -> np.ndarray:
        """Each regressor's learning-rate-weighted sum of its trees' leaves, ``x`` one row per
        vector (compared as float32, as scikit-learn does)."""
        return self._native.raw(np.ascontiguousarray(x, dtype=np.float64).ravel())

    def decide(
        self, request: bool, off: int, back: int, features: list[float], link: TransferLink
    ) -> tuple[str, list[tuple[str, float]], list[tuple[str, float]], str, float | None, str | None]:
        """The native decision over this forest, laid out as :func:`_prediction_plan` says."""
        return self._native.decide(
            self.base, self.cost, request, off, back, features, link.bytes_per_s, link.latency_s
        )

    def seconds(self, f: QueryFeatures) -> np.ndarray:
        """Seconds each regressor predicts for a query of features ``f`` (its scan's where it
        reads that)."""
        scan = scan_features(f)
        return self.predict(np.array([f.vector(), scan.vector()]), np.array(priced_work([f, scan])))

    def predict(self, x: np.ndarray, work: np.ndarray) -> np.ndarray:
        """Seconds each regressor predicts: its ``work`` row (the one of ``x`` it reads) priced at
        its unit costs (at least FLOOR_S; 1 where it has none) times the exponential of its
        trees' log correction."""
        if len(x) == 1 and self.which > 0:
            x, work = np.repeat(x, 2, axis=0), np.repeat(work, 2, axis=0)
        cost = self.cost.reshape(len(self.base), len(PRICED))
        priced = np.maximum(np.einsum("jk,jk->j", cost, work[self.reads]), FLOOR_S)
        scale = np.where((cost == 0).all(axis=1), 1.0, priced)
        return scale * np.exp(self.base + self._raw(x))


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
    models: Models,
    node_system: str,
    f: QueryFeatures | Mapping[str, Any],
    link: TransferLink,
    host_system: str = "host",
) -> Decision:
    """Predicts both ways' stages for a query with features ``f`` (or their ``as_dict()``, as
    the native estimate makes them) and picks the faster: natively (crates/dataservices
    decide: the vectors, every model, the stages, why and the crossover in one call; in Python
    they were a third of a decision's CPU), equal to :func:`decide_reference` (tested on
    random features and models)."""
    forest, request, off, back = _prediction_plan(models, node_system, host_system)
    fields = f if isinstance(f, Mapping) else vars(f)
    values = list(fields.values())  # the fields in order: what the native side reads
    way, o, b, why, rate, above = forest.decide(request, off, back, values, link)
    return Decision(way, dict(o), dict(b), why, rate, above)


def beyond_training(
    models: Models,
    node_system: str,
    f: QueryFeatures | Mapping[str, Any],
    host_system: str = "host",
    margin: float = 1.25,
) -> list[str]:
    """The work quantities of ``f`` beyond ``margin`` times the most the node's and the host's
    engine models were trained on (``reach``), each as "quantity this much, trained up to that":
    there a stage is priced by its unit costs, which the trees no longer correct."""
    work = priced_work([f])[0]
    out: dict[str, str] = {}
    for key in ((node_system, "node_offload"), (node_system, "node_engine"), (host_system, "host_engine")):
        reach = models.reach.get(key)
        if reach is None:
            continue
        for k, name in enumerate(PRICED[1:], 1):
            if work[k] > margin * reach[k] and name not in out:
                out[name] = f"{name} {work[k]:,.0f}, trained up to {reach[k]:,.0f}"
    return list(out.values())


def decide_reference(
    models: Models, node_system: str, f: QueryFeatures, link: TransferLink, host_system: str = "host"
) -> Decision:
    """:func:`decide` in Python: the reference the native one is tested against."""
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
    rate, above = link_crossover(
        (parts["request"] + parts["receive_out"], parts["node_offload"], f.out_bytes),
        (parts["request"] + parts["receive_in"] + parts["host_engine"], parts["node_pushback"], f.in_bytes),
        link.latency_s,
    )
    if rate is not None:
        why += f"; {above} wins on links above {rate * 8e-6:,.0f} Mbit/s"
    return Decision(way, off, back, why, None if rate is None else rate * 8e-6, above)


def _predicted(models: Models, node_system: str, host_system: str, f: QueryFeatures) -> dict[str, float]:
    """The learned parts of both ways, which do not depend on the link: every model at once,
    the query's vector and its scan's (KeyError naming the models missing)."""
    forest, request, off, _ = _prediction_plan(models, node_system, host_system)
    y = forest.seconds(f)
    n = 3 + request
    return {
        "request": float(y[3]) if request else 0.0,
        "node_offload": float(y[n : n + off].sum()),
        "node_pushback": float(y[n + off :].sum()),
        "receive_out": float(y[0]),
        "receive_in": float(y[1]),
        "host_engine": float(y[2]),
    }


def _prediction_plan(models: Models, node_system: str, host_system: str) -> tuple[Forest, bool, int, int]:
    """The forest of every model a decision asks, whether it holds the node's request, and how
    many of the node's stages each way it sums; kept per models and systems (a decision is
    to cost 2% of its query)."""
    key = (node_system, host_system)
    got = models._plans.get(key)
    if got is None:
        have = models.regressors
        off = (
            ("node_offload",) if (node_system, "node_offload") in have else ("node_engine", "node_stream_out")
        )
        back = ("node_pushback",) if (node_system, "node_pushback") in have else ("node_stream_in",)
        request = (node_system, "node_request") in have
        keys = [(host_system, "host_receive_out", 0), (host_system, "host_receive_in", 1),
                (host_system, "host_engine", 0), *((node_system, "node_request", 0) for _ in range(request)),
                *((node_system, t, 0) for t in off), *((node_system, t, 1) for t in back)]  # fmt: skip
        got = models._plans[key] = (models.forest(keys), request, len(off), len(back))
    return got


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


def link_crossover(
    offload: tuple[float, float, float], pushback: tuple[float, float, float], latency_s: float
) -> tuple[float | None, str | None]:
    """The fastest link rate (bytes/s) in RATES where the faster of the decision's two ways
    changes, and the way that wins above it ((None, None) where one way wins throughout), solved
    rather than searched:
    each way, (fixed s, node stream s, bytes), takes fixed + max(stream, latency + bytes /
    rate). In u = 1 / rate both are piecewise linear, so their difference is linear between
    the two streams' break points, and its first zero from the fastest rate on is where the
    faster way changes: found by halving that one segment (the grids over all rates took a
    tenth of a decision's CPU)."""

    def gap(u: float) -> float:  # offload's time less pushback's at rate 1 / u: <= 0, offload wins
        o = offload[0] + max(offload[1], latency_s + offload[2] * u)
        b = pushback[0] + max(pushback[1], latency_s + pushback[2] * u)
        return o - b

    fastest, slowest = 1.0 / float(RATES[-1]), 1.0 / float(RATES[0])
    breaks = sorted(
        (s - latency_s) / n
        for _, s, n in (offload, pushback)
        if n > 0 and fastest < (s - latency_s) / n < slowest
    )
    us = [fastest, *breaks, slowest]
    d0 = gap(fastest)
    above = "offload" if d0 <= 0 else "pushback"
    for a, b in itertools.pairwise(us):
        if (gap(b) <= 0) != (d0 <= 0):  # the way changes in (a, b]: where, to the last bit
            # bisected, not interpolated: where the ways tie beyond a break point, bytes x u
            # misses the stream there by an ulp and the line through the ends crosses at b
            for _ in range(CROSSOVER_STEPS):
                mid = (a + b) / 2
                if not a < mid < b:
                    break
                a, b = (a, mid) if (gap(mid) <= 0) != (d0 <= 0) else (mid, b)
            return 1.0 / b, above
    return None, None


CROSSOVER_STEPS = 64
"""Halvings of the segment the crossover lies in: u to its last bit."""


def held_out_error(samples: Sequence[QuerySample], seed: int = 0, share: float = 0.25) -> dict[str, float]:
    """Median relative error per (system/target) of models fitted on the rest, on a random
    ``share`` of the queries held out."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(samples))
    cut = max(1, int(len(samples) * share))
    test, train_ = [samples[i] for i in idx[:cut]], [samples[i] for i in idx[cut:]]
    return stage_errors(Models.fit(train_, seed), test)


def stage_errors(models: Models, samples: Sequence[QuerySample]) -> dict[str, float]:
    """Median relative error |predicted - measured| / measured per (system/target) of
    ``models`` on ``samples`` (work they were not fitted on)."""
    errs: dict[str, list[float]] = {}
    for s in samples:
        for target, y in s.times.items():
            if (s.system, target) in models.regressors and y > 0:
                p = models.predict(s.system, target, s.features)
                errs.setdefault(f"{s.system}/{target}", []).append(abs(p - y) / y)
    return {k: float(np.median(v)) for k, v in errs.items()}


WAY_STAGES = {"offload": ("node_offload", "node_request", "host_receive_out"),
              "pushback": ("node_pushback", "node_request", "host_receive_in", "host_engine")}  # fmt: skip
"""The stages a query's time each way is the sum of, as the decision adds them up (the link
beyond the node aside: the node's stream holds its sending on an unshaped link)."""
STAGES = {"node_engine": ("node", 0), "node_stream_out": ("node", 0), "node_offload": ("node", 0),
          "node_request": ("node", 0), "node_stream_in": ("node", 1), "node_pushback": ("node", 1),
          "host_engine": ("host", 0), "host_receive_out": ("host", 0),
          "host_receive_in": ("host", 1)}  # fmt: skip
"""Each target's side (the node's system or the host's) and the vector it is learned on (0: the
query's, 1: its scan's), as :mod:`.training` writes them."""


class Adaptation:
    """Online adaptation of a node's time models: every query it serves, either way, becomes
    samples (:meth:`observe`), kept beside the training file's (the ``keep`` most recent).

    Where the models in use are biased on the node's queries (a way's median measured/predicted
    time, its stages as the decision adds them up, is ``bias_from`` off or more), the online
    samples are weighted up, so that together they count up to ``online_weight`` times the
    training file's (at most ``max_weight`` each; the full weight from ``bias_full`` off): fifty
    queries of a node whose resources changed must move a model fitted on thousands of others.
    Where the models are not biased the online samples weigh 1 each, as training samples do:
    their noise (a quarter core's times vary up to 3x with its quota's periods) is not to move a
    model that is right (:meth:`pull`).

    The models are refitted on both (:meth:`refit`) when ``every`` new samples have come and the
    models in use predict a stage worse than ``refit_error`` (median relative error over 10
    queries or more), lack a side, or ten times ``every`` samples have come. The refits' CPU
    while the node is busy is held to ``cpu_share`` of the time (a refit of c CPU seconds holds
    the next one back by c / cpu_share); while the node is idle its CPU is free. A stage whose
    median error is above ``drift`` has drifted (status). Thread-safe."""

    def __init__(self, base: Sequence[QuerySample], node_system: str, host_system: str = "host",
                 keep: int = 2000, every: int = 25, cpu_share: float = 0.05, seed: int = 0,
                 window: int = 200, drift: float = 0.5, refit_error: float = 0.25,
                 online_weight: float = 1.0, max_weight: float = 10.0,
                 bias_from: float = 1.25, bias_full: float = 2.0) -> None:  # fmt: skip
        import threading
        from collections import deque

        self.base, self.node_system, self.host_system = list(base), node_system, host_system
        self.every, self.cpu_share, self.seed, self.drift = every, cpu_share, seed, drift
        self.refit_error, self.online_weight, self.max_weight = refit_error, online_weight, max_weight
        self.bias_from, self.bias_full = bias_from, bias_full
        self.online: deque[QuerySample] = deque(maxlen=keep)
        self.errors: dict[str, deque[float]] = {t: deque(maxlen=window) for t in TARGETS}
        self.ratios: dict[str, deque[float]] = {w: deque(maxlen=window) for w in WAY_STAGES}
        """Per way, log(measured / predicted) of its stages' sum over the latest queries run that
        way: their median is the models' bias there."""
        self.queries = self.new = self.refits = self.skipped = 0
        self.refit_cpu_s = self.charged_cpu_s = 0.0
        """All the refits' CPU, and the part spent while the node was busy (held to the share)."""
        self.last_pull: float | None = None
        """The last refit's :meth:`pull`."""
        self._not_before = 0.0
        self._held = self._stale = False
        self._lock = threading.Lock()

    def load(self, samples: Sequence[QuerySample]) -> None:
        """Samples learned online before (a node restarted): kept as online ones, and the next
        :meth:`due` asks for a refit, as the models in use were not fitted on them."""
        with self._lock:
            self.online.extend(samples)
            self._stale = bool(samples)

    def learned(self) -> list[QuerySample]:
        """The online samples kept, oldest first."""
        with self._lock:
            return list(self.online)

    def observe(self, models: Models | None, decided: QueryFeatures, ran: QueryFeatures,
                times: Mapping[str, float]) -> None:  # fmt: skip
        """One query: ``decided``, the features its decision saw (estimated sizes); ``ran``, the
        ones measured (actual result sizes); ``times``, the stages measured (TARGETS)."""
        times = {t: float(v) for t, v in times.items() if t in STAGES and math.isfinite(v) and v > 0}
        predicted = self._predicted(models, decided, times)
        groups: dict[tuple[str, int], dict[str, float]] = {}
        for t, v in times.items():
            side, which = STAGES[t]
            groups.setdefault((self._system(side), which), {})[t] = v
        scan = scan_features(ran)
        with self._lock:
            self.queries += 1
            for t, p in predicted.items():
                self.errors[t].append(abs(p - times[t]) / times[t])
            for way, stages in WAY_STAGES.items():
                if stages[0] in predicted:  # it ran this way: the node's stream, and what else was
                    have = [t for t in stages if t in predicted]
                    ratio = sum(times[t] for t in have) / sum(predicted[t] for t in have)
                    self.ratios[way].append(math.log(ratio))
            for (system, which), ts in sorted(groups.items()):
                self.online.append(QuerySample(system, scan if which else ran, ts))
                self.new += 1

    def _system(self, side: str) -> str:
        return self.node_system if side == "node" else self.host_system

    def _predicted(
        self, models: Models | None, f: QueryFeatures, times: Mapping[str, float]
    ) -> dict[str, float]:
        """The prediction of each stage measured that a model predicts (positive)."""
        if models is None:
            return {}
        keys = [(self._system(STAGES[t][0]), t, STAGES[t][1]) for t in sorted(times)]
        keys = [k for k in keys if (k[0], k[1]) in models.regressors]
        if not keys:
            return {}
        y = models.forest(keys).seconds(f)
        return {t: max(float(p), 1e-12) for (_, t, _), p in zip(keys, y, strict=True)}

    def _bias(self) -> dict[str, float]:
        """Per way with 10 queries or more: its median measured / predicted (locked)."""
        return {w: math.exp(float(np.median(r))) for w, r in self.ratios.items() if len(r) >= 10}

    def pull(self) -> float:
        """How much of the full online weight the samples get, 0 to 1: from the more biased way's
        median measured/predicted, 0 within ``bias_from`` either way, 1 from ``bias_full``,
        log-linear between; 1 where no way has 10 queries against models (none given: a node
        learning from scratch, or samples loaded)."""
        with self._lock:
            bias = self._bias()
        if not bias:
            return 1.0
        worst = max(abs(math.log(b)) for b in bias.values())
        lo, hi = math.log(self.bias_from), math.log(self.bias_full)
        return min(1.0, max(0.0, (worst - lo) / (hi - lo)))

    def _worse_than(self, limit: float) -> list[str]:
        """The stages whose median error over 10 queries or more is above ``limit`` (locked)."""
        return sorted(t for t, e in self.errors.items() if len(e) >= 10 and float(np.median(e)) > limit)

    def due(self, now: float, models: Models | None = None) -> bool:
        """Whether a refit may run now (``now``: time.monotonic()): samples learned before
        were loaded, or ``every`` new samples have come and the ``models`` in use lack a side,
        predict a stage worse than ``refit_error``, or ten times ``every`` samples have come
        (models that predict well are not refitted for nothing); counts one skipped where the
        CPU budget holds a refit back."""
        lacking = models is None or not {self.node_system, self.host_system} <= models.systems()
        with self._lock:
            if not self._stale:
                if self.new < self.every:
                    return False
                if not (lacking or self._worse_than(self.refit_error) or self.new >= 10 * self.every):
                    return False
            if now < self._not_before:
                self.skipped += not self._held  # once per refit held back, not per sample
                self._held = True
                return False
            return True

    def weights(self, n_base: int, n_online: int, pull: float = 1.0) -> list[float]:
        """One weight a sample: the training file's 1; the online ones' at full ``pull`` so that
        together they count ``online_weight`` times the training file's, between 1 and
        ``max_weight``, and ``pull`` of the way from 1 to that (:meth:`pull`)."""
        w = self.online_weight * n_base / n_online if n_online and n_base else 1.0
        full = min(max(w, 1.0), self.max_weight)
        return [1.0] * n_base + [1.0 + pull * (full - 1.0)] * n_online

    def refit(self, wait: Callable[[float], bool] | None = None, cores: float = 1.0,
              quiet: Callable[[float], bool] | None = None,
              fitting: Callable[[bool], None] | None = None) -> Models:  # fmt: skip
        """Models fitted on the training samples and the online ones (deterministic for the
        same samples and seed), their decision forests built here rather than on a query.
        ``wait(seconds)`` paces it: after each step (TREES_STEP trees of a regressor) fitted
        while the node was busy (not ``quiet(seconds)``, idle for the step's wall time) it is
        asked to wait long enough
        that the refit uses at most ``cpu_share`` of ``cores`` (the node's CPU), and a False
        from it (the node stopping) abandons the refit (RefitStopped). ``fitting(True)`` is
        called as each step of fitting starts, ``fitting(False)`` as it ends."""
        import time

        mark = fitting or (lambda _: None)
        pull = self.pull()
        with self._lock:
            base, online = list(self.base), list(self.online)
            self.new, self._stale = 0, False
        share = max(self.cpu_share * cores, 1e-6)
        c0 = last = time.thread_time()
        started, charged = time.monotonic(), 0.0

        def between() -> None:
            nonlocal last, started, charged
            mark(False)
            spent = time.thread_time() - last
            if quiet is None or not quiet(time.monotonic() - started):
                charged += spent
                if wait is not None and not wait(spent * max(0.0, 1.0 / share - 1.0)):
                    raise RefitStopped("the node stopped during a refit")
            last, started = time.thread_time(), time.monotonic()
            mark(True)

        mark(True)
        try:
            weights = self.weights(len(base), len(online), pull)
            models = Models.fit([*base, *online], self.seed, between, weights)
            warm(models, self.node_system, self.host_system)
        finally:
            mark(False)
        cpu = time.thread_time() - c0
        with self._lock:
            for e in (*self.errors.values(), *self.ratios.values()):  # from here on: the new models'
                e.clear()
            self.refits += 1
            self.last_pull = pull
            self._held = False
            self.refit_cpu_s += cpu
            self.charged_cpu_s += charged
            self._not_before = time.monotonic() + charged / share
        return models

    def status(self) -> dict[str, Any]:
        with self._lock:
            err = {t: float(np.median(e)) for t, e in self.errors.items() if e}
            return {
                "queries": self.queries,
                "samples": len(self.online),
                "training_samples": len(self.base),
                "refits": self.refits,
                "refits_skipped": self.skipped,
                "samples_since_refit": self.new,
                "refit_cpu_s": round(self.refit_cpu_s, 4),
                "refit_busy_cpu_s": round(self.charged_cpu_s, 4),
                "error": err,
                "error_count": {t: len(e) for t, e in self.errors.items() if e},
                "bias": self._bias(),
                "last_pull": self.last_pull,
                "drifted": self._worse_than(self.drift),
            }


class RefitStopped(Exception):
    """A paced refit abandoned because its node is stopping."""


def warm(models: Models, node_system: str, host_system: str = "host") -> None:
    """Builds the forest a decision on ``node_system`` uses, so the first query does not (~20 ms)."""
    try:
        decide(models, node_system, QueryFeatures(1.0, 8.0, 1.0, 8.0, 0, False, False, False),
               TransferLink(None, 50e-6), host_system)  # fmt: skip
    except KeyError:
        pass  # not every stage learned yet: the decision falls back until it is


def prometheus(status: Mapping[str, Any], counters: Mapping[str, float], node: str) -> str:
    """The adaptation's status and a node's counters as Prometheus text (exposition format)."""
    lines = [
        "# HELP offload_node_prediction_error Median relative error of each stage's prediction.",
        "# TYPE offload_node_prediction_error gauge",
    ]
    lines += [f'offload_node_prediction_error{{node="{node}",stage="{t}"}} {v:.6g}'
              for t, v in sorted(status.get("error", {}).items())]  # fmt: skip
    lines += ["# HELP offload_node_prediction_bias Median measured over predicted time of each way.",
              "# TYPE offload_node_prediction_bias gauge"]  # fmt: skip
    lines += [f'offload_node_prediction_bias{{node="{node}",way="{w}"}} {v:.6g}'
              for w, v in sorted(status.get("bias", {}).items())]  # fmt: skip
    for name, kind, v in (
        ("online_samples", "gauge", status.get("samples", 0)),
        ("online_queries_total", "counter", status.get("queries", 0)),
        ("refits_total", "counter", status.get("refits", 0)),
        ("refits_skipped_total", "counter", status.get("refits_skipped", 0)),
        ("refit_cpu_seconds_total", "counter", status.get("refit_cpu_s", 0.0)),
        ("drifted_stages", "gauge", len(status.get("drifted", []))),
        *((_counter_name(k), "counter", v) for k, v in sorted(counters.items())),
    ):
        lines += [
            f"# TYPE offload_node_{name} {kind}",
            f'offload_node_{name}{{node="{node}"}} {float(v):.6g}',
        ]
    return "\n".join(lines) + "\n"


def _counter_name(key: str) -> str:
    return (key.removesuffix("_s") + "_seconds" if key.endswith("_s") else key) + "_total"


# ------------------------------------------------------------------------------ the fallback


@dataclass
class Fallback:
    """The way ``auto`` takes where the estimate or a model cannot answer: the one that moves
    fewer bytes, ties to offload. Pushback moves the columns read, exactly (rows x their
    widths); offload its result, the estimated one where there is an estimate, else a bound of
    it from the plan (:func:`rows_bound` rows of the output schema's width)."""

    reason: str
    offload_bytes: float
    pushback_bytes: float
    basis: str
    """What ``offload_bytes`` is: "the estimated result" or "a bound of the result"."""

    @property
    def way(self) -> str:
        return "offload" if self.offload_bytes <= self.pushback_bytes else "pushback"

    @property
    def why(self) -> str:
        return (
            f"{self.reason}: {self.way}, the way that moves fewer bytes (offload {_mb(self.offload_bytes)}, "
            f"{self.basis}; pushback {_mb(self.pushback_bytes)}, the columns read; ties go to offload)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "rule": "fewer bytes moved, ties to offload", "basis": self.basis,
                "offload_bytes": self.offload_bytes, "pushback_bytes": self.pushback_bytes}  # fmt: skip


def _mb(n: float) -> str:
    return "an unbounded number of bytes" if math.isinf(n) else f"{n / 1e6:,.3f} MB"


def rows_bound(plan: bytes, rows: Mapping[str, float]) -> float:
    """At most how many rows ``plan`` returns, from its relations alone (``rows``: each data
    set's): a filter, project or sort keeps at most its input's, a fetch its count, an
    aggregate without grouping one, a join the product of its sides (an outer join also its
    unmatched rows; a semi, anti, single or mark join its own side's), a union the sum; inf
    for a relation this does not know."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.ParseFromString(plan)
    return _rows_bound(p.relations[0].root.input, rows)


def _rows_bound(rel: Any, rows: Mapping[str, float]) -> float:
    kind = rel.WhichOneof("rel_type")
    r = getattr(rel, kind) if kind else None
    if kind == "read":
        return float(rows.get(r.named_table.names[-1], math.inf)) if r.named_table.names else math.inf
    if kind in ("filter", "project", "sort"):
        return _rows_bound(r.input, rows)
    if kind == "fetch":
        below = _rows_bound(r.input, rows)
        count = (
            r.count_expr.literal if r.HasField("count_expr") and r.count_expr.HasField("literal") else None
        )
        n = getattr(count, count.WhichOneof("literal_type") or "", None) if count is not None else r.count
        return min(below, float(n)) if isinstance(n, int) and n >= 0 else below
    if kind == "aggregate":
        grouped = len(r.grouping_expressions) > 0 or any(
            len(getattr(g, "grouping_expressions", ())) or len(getattr(g, "expression_references", ()))
            for g in r.groupings
        )
        return _rows_bound(r.input, rows) if grouped else 1.0
    if kind in ("join", "cross"):
        from offload.dataservices.estimate import JOIN_KINDS

        left, right = _rows_bound(r.left, rows), _rows_bound(r.right, rows)
        join, side = JOIN_KINDS.get(r.type, ("inner", "")) if kind == "join" else ("inner", "")
        own = {"left": left, "right": right, "full": left + right}.get(side, 0.0)
        if join in ("semi", "anti", "single", "mark"):  # their own side's rows at most
            return own
        return left * right + own  # an outer join's unmatched rows too
    if kind == "set":
        return sum(_rows_bound(i, rows) for i in r.inputs)
    return math.inf


def row_width(schema: pa.Schema, string_width: float) -> float:
    """Bytes of one row of ``schema``: fixed-width types their width, variable-width ones
    ``string_width`` (the widest such column read, from the statistics)."""
    return sum((bits / 8 if (bits := bit_width(t)) > 0 else string_width) for t in schema.types)
