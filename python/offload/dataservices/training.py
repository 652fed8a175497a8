"""The time models' training suite (`offload node train`): queries of known shapes run both ways
against a real node under its budget, each turned into samples of its stages (the node's engine
and stream seconds, the host's receive and engine seconds) for :class:`timemodel.Models`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

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
    table: str,
    sqls: Sequence[str],
    node_system: str,
    progress: Callable[[int], None] | None = None,
    repeat: int = 3,
) -> list[QuerySample]:
    """Runs each query both ways against a node, ``repeat`` times, and turns the medians into
    samples: the node's engine and stream seconds (system ``node_system``), the host's receive
    and engine seconds (system ``host``). A quota-held node's times jitter by its CFS period;
    the median of a few runs is what a model can learn."""
    from offload.dataservices import plans

    out: list[QuerySample] = []
    desc = client.describe(table)
    width = {n: c["width_bytes"] for n, c in desc["stats"]["columns"].items()}
    for i, sql in enumerate(sqls):
        plan = client.plan(sql.format(t=table))
        est = client.estimate(plan)
        cols = plans.inspect(plan).reads[table]
        read_bytes = desc["rows"] * sum(width[c] for c in cols)
        f = features(plan, est["rows"], est["bytes"], {table: (desc["rows"], read_bytes)}, est)
        runs = [(client.query(plan, "offload")[1], client.query(plan, "pushback")[1]) for _ in range(repeat)]
        med = _medians(runs)
        off_rows, off_bytes = runs[0][0].rows, runs[0][0].arrow_bytes
        # the actual sizes, not the estimates, describe what was measured
        actual = QueryFeatures(**{**asdict(f), "out_rows": float(off_rows), "out_bytes": float(off_bytes)})
        scanned = scan_features(actual)
        node_out = {k: med[k] for k in ("node_engine", "node_stream_out", "node_offload", "node_request")}
        host_out = {"host_engine": med["host_engine"], "host_receive_out": med["host_receive_out"]}
        out += [
            QuerySample(node_system, actual, node_out),
            QuerySample(node_system, scanned, {k: med[k] for k in ("node_stream_in", "node_pushback")}),
            QuerySample("host", actual, host_out),
            QuerySample("host", scanned, {"host_receive_in": med["host_receive_in"]}),
        ]
        if progress:
            progress(i + 1)
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
