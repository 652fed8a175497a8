"""The time models' training suites (`offload node train`): queries run both ways against a real
node under its budget, each turned into samples of its stages (the node's engine and stream
seconds, the host's receive and engine seconds) for :class:`timemodel.Models`. Two suites: the
particle shapes over float tables (:func:`training_queries`, the seed's) and queries of every
kind over generated schemas of every column type (:func:`generated_samples`, :mod:`.workload`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa

from offload.dataservices.timemodel import QueryFeatures, QuerySample, features, scan_features

TRAINING_SQL = (
    "select * from {t} where x < {a}",
    "select * from {t} where x >= {a} and y < {b}",
    "select * from {t} where x >= {a} and y < {b} and z <= {c}",
    "select id, vx from {t} where x < {a} or y < {b}",
    "select id, x * 2 + y as s from {t} where z < {a}",
    "select t, count(*) as n, avg(vx) as m from {t} where x < {a} group by t",
    "select count(*) as n, min(vx * vx + vy * vy) as lo, max(vx * vx + vy * vy) as hi from {t} where y < {a}",
    "select * from {t} where vx * vx + vy * vy > {d}",
    "select id, t from {t} where x < {a} order by id limit 1000",
    # heavy functions: the CPU per row a slow node pays for and a fast host does not
    "select id, sqrt(x * x + y * y) as r, atan2(y, x) as phi from {t} where x < {a}",
    "select t, avg(sin(x) * cos(y) + sin(y) * cos(x)) as s, max(exp(x) + ln(y + 1)) as e from {t} "
    "where z < {a} group by t",
    "select count(*) as n from {t} where sin(10 * x) * cos(10 * y) + sqrt(z) > {a}",
)


DIM_SHARES = (None, 8, 2)
"""A generated schema's dimension table as a share of its fact table's rows, in turn: the least
(workload.DIM_ROWS), an eighth, a half (a join of two large tables)."""


def _dim_rows(rows: int, share: int | None) -> int:
    """A dimension table's rows: ``rows // share``, at least workload.DIM_ROWS (None: that)."""
    from offload.dataservices import workload as W

    return W.DIM_ROWS if share is None else max(W.DIM_ROWS, rows // share)


def training_queries(n: int, seed: int = 0) -> list[str]:
    """``n`` queries of the training shapes over table ``{t}`` with random thresholds."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        shape = TRAINING_SQL[i % len(TRAINING_SQL)]
        a, b, c = (float(v) for v in np.round(rng.random(3) ** 2, 4))  # many selective ones
        out.append(shape.format(t="{t}", a=a, b=b, c=c, d=round(float(rng.uniform(0.1, 6)), 3)))
    return out


def measure(
    client: Any,
    table: str | None,
    sqls: Sequence[str],
    node_system: str,
    progress: Callable[[int], None] | None = None,
    repeat: int = 3,
) -> list[QuerySample]:
    """Runs each query both ways against a node, ``repeat`` times, and turns the medians into
    samples: the node's engine and stream seconds (system ``node_system``), the host's receive
    and engine seconds (system ``host``). ``{t}`` in a query is ``table`` (the particle suite);
    with ``table`` None the queries name their data sets (any of the node's, joins too). A
    quota-held node's times jitter by its CFS period; the median of a few runs is what a model
    can learn."""
    out: list[QuerySample] = []
    sizes = Sizes(client)
    for i, sql in enumerate(sqls):
        plan = client.plan(sql.format(t=table) if table is not None else sql)
        f = sizes.features(plan, client.estimate(plan))
        runs = [(client.query(plan, "offload")[1], client.query(plan, "pushback")[1]) for _ in range(repeat)]
        out += samples_of(f, runs, node_system)
        if progress:
            progress(i + 1)
    return out


def samples_of(f: QueryFeatures, runs: Sequence[tuple[Any, Any]], node_system: str) -> list[QuerySample]:
    """A query's samples from its (offload timing, pushback timing) runs: the medians of each
    stage, on the query's features with its actual result (the estimate's ``f`` otherwise), on
    the node's system and the host's."""
    med = _medians(runs)
    off_rows, off_bytes = runs[0][0].rows, runs[0][0].arrow_bytes
    # the actual sizes, not the estimates, describe what was measured
    actual = QueryFeatures(**{**asdict(f), "out_rows": float(off_rows), "out_bytes": float(off_bytes)})
    scanned = scan_features(actual)
    node_out = {k: med[k] for k in ("node_engine", "node_stream_out", "node_offload", "node_request")}
    host_out = {"host_engine": med["host_engine"], "host_receive_out": med["host_receive_out"]}
    return [
        QuerySample(node_system, actual, node_out),
        QuerySample(node_system, scanned, {k: med[k] for k in ("node_stream_in", "node_pushback")}),
        QuerySample("host", actual, host_out),
        QuerySample("host", scanned, {"host_receive_in": med["host_receive_in"]}),
    ]


class Sizes:
    """The node's data sets as the features see them: rows and column widths (its ``describe``,
    asked once per data set) and schemas, as the node computes them for its own decision."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.described: dict[str, tuple[int, dict[str, float]]] = {}
        self.schemas: dict[str, pa.Schema] = client.schemas()

    def table(self, name: str) -> tuple[int, dict[str, float]]:
        if name not in self.described:
            desc = self.client.describe(name)
            width = {n: float(c["width_bytes"]) for n, c in desc["stats"]["columns"].items()}
            self.described[name] = (int(desc["rows"]), width)
        return self.described[name]

    def features(self, plan: bytes, est: dict[str, Any]) -> QueryFeatures:
        """The plan's features: per data set read, its rows and the bytes of the columns read."""
        from offload.dataservices import plans

        tables = {}
        for t, cols in plans.inspect(plan).reads.items():
            rows, width = self.table(t)
            tables[t] = (rows, rows * sum(width[c] for c in cols))
        return features(plan, est["rows"], est["bytes"], tables, est, schemas=self.schemas)


def _offset(progress: Callable[[int], None], done: int, k: int) -> None:
    progress(done + k)


def generated_samples(
    client: Any,
    node_system: str,
    seeds: Sequence[int],
    sizes: Sequence[int] = (200_000,),
    queries: int = 16,
    repeat: int = 3,
    progress: Callable[[int], None] | None = None,
) -> list[QuerySample]:
    """The training suite over generated schemas (:mod:`.workload`): for each seed, its tables
    uploaded to the node (a narrow fact table of one of ``sizes`` rows, wider ones fewer:
    workload.rows_of), ``queries`` of its queries measured both ways (:func:`measure`), its
    tables dropped. ``progress`` gets the queries done so far, all seeds counted. The sizes
    turn one step further each round of shapes, so that with as many sizes as shapes a shape
    does not always get the same size; the dimension table a fact table joins takes the shares
    of DIM_SHARES in turn, a step further each round, so that every shape's joins and
    group-bys meet small and large build sides."""
    from offload.dataservices import workload as W

    out: list[QuerySample] = []
    n = len(W.SHAPES)
    for i, seed in enumerate(seeds):
        shape = W.SHAPES[seed % n]
        rows = W.rows_of(shape, sizes[(i % n + i // n) % len(sizes)])
        spec = W.schema(
            seed, rows, shape, dim_rows=_dim_rows(rows, DIM_SHARES[(i + i // n) % len(DIM_SHARES)])
        )
        tables = spec.tables()
        for name, t in tables.items():
            client.upload(name, t)
        sqls = [q.sql for q in W.queries(spec, queries, seed)]
        step = functools.partial(_offset, progress, i * queries) if progress else None
        out += measure(client, None, sqls, node_system, step, repeat)
        for name in tables:
            client.drop(name)
    return out


def _medians(runs: Sequence[tuple[Any, Any]]) -> dict[str, float]:
    """Median seconds of each stage over (offload timing, pushback timing) pairs."""
    stages: dict[str, list[float]] = {}
    for off, back in runs:
        for k, v in {
            "node_engine": off.node_engine,
            "node_stream_out": off.node - off.node_engine,
            "node_stream_in": back.node - back.node_engine,
            "node_offload": off.node,
            "node_pushback": back.node,
            "node_request": (off.info + back.info) / 2,
            "host_engine": back.host,
            "host_receive_out": off.fetch - off.node,
            "host_receive_in": back.fetch - back.node,
        }.items():
            stages.setdefault(k, []).append(max(v, 1e-6))
    return {k: float(np.median(v)) for k, v in stages.items()}
