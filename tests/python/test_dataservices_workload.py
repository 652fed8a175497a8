"""Generated workloads: schemas the same per seed and different across seeds, every generated
query planned and run by DataFusion (and by the host over the narrowed columns, as pushback
does), the kinds the decision must hold on, and the training suite's samples of a join."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pyarrow as pa
import pytest

pytest.importorskip("datafusion")
pytest.importorskip("substrait")

from offload.dataservices import plans
from offload.dataservices import training as TR
from offload.dataservices import workload as W
from offload.dataservices.client import NodeClient
from offload.dataservices.node import Node, NodeConfig

ROWS = 8_000


def test_schemas_are_the_same_per_seed_and_differ_across_seeds() -> None:
    a, b, c = W.schema(4, ROWS), W.schema(4, ROWS), W.schema(5, ROWS)
    assert a == b
    ta, tb = a.tables(), b.tables()
    assert all(ta[n].equals(tb[n]) for n in ta)
    assert a.schemas() != c.schemas() and a.fact != c.fact
    assert W.queries(a, 10, 1) == W.queries(b, 10, 1) != W.queries(a, 10, 2)


@pytest.mark.parametrize("shape", W.SHAPES)
def test_a_schema_holds_its_shape_and_every_column_type(shape: str) -> None:
    spec = W.schema(1, ROWS, shape)
    fact, dim = (spec.tables()[n] for n in (spec.fact, spec.dim))
    assert fact.num_rows == ROWS and dim.num_rows == spec.dim_rows
    width = {"wide": (28, 32), "medium": (10, 16), "narrow": (3, 4)}[shape]
    assert width[0] <= fact.num_columns <= width[1]
    types = {str(t) for t in fact.schema.types}
    assert {"int64", "string"} <= types and types & {"date32[day]", "timestamp[us]"}
    if shape != "narrow":
        assert {"double", "bool", "date32[day]", "timestamp[us]"} <= types
    # every key of the fact table joins a row of the dimension table
    keys = set(fact.column(spec.fact_key).to_pylist())
    assert keys <= set(dim.column(spec.dim_key).to_pylist())
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in [*fact.column_names, *dim.column_names])


def test_a_kept_planner_knows_every_result_schema_without_running() -> None:
    """The schema an offload's FlightInfo carries, planned in one kept session over empty
    tables, is the result's, for every generated kind over schemas of every shape."""
    for seed in (0, 1, 2):
        spec = W.schema(seed, 500)
        tables, schemas = spec.tables(), spec.schemas()
        ctx = plans.planner(schemas)
        for q in W.queries(spec, len(W.TEMPLATES), seed):
            plan = plans.to_substrait(q.sql, schemas)
            assert plans.result_schema(ctx, plan) == plans.execute(plan, tables).schema, q
    with pytest.raises(plans.PlanError):
        plans.result_schema(ctx, b"not a plan")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_generated_query_runs_both_ways(seed: int) -> None:
    spec = W.schema(seed, ROWS)
    tables, schemas = spec.tables(), spec.schemas()
    for q in W.queries(spec, 2 * len(W.TEMPLATES), seed):
        plan = plans.to_substrait(q.sql, schemas)
        whole = plans.execute(plan, tables)
        reads = plans.inspect(plan).reads
        narrowed = plans.execute(plans.narrow(plan), {t: tables[t].select(c) for t, c in reads.items()})
        assert narrowed.num_rows == whole.num_rows, q


def test_the_suite_covers_the_kinds_asked_with_spread_selectivities() -> None:
    specs = [W.schema(s, ROWS) for s in range(3)]
    suite = [(spec, q) for spec in specs for q in W.queries(spec, 16, 0)]
    sqls = [q.sql for _, q in suite]
    assert {q.kind for _, q in suite} == set(W.TEMPLATES)
    # a suite over schemas takes the kinds in turn across them (a narrow one lacks some)
    spread = W.suite([W.schema(s, ROWS) for s in (100, 101, 102)], len(W.TEMPLATES))
    assert len(spread) == len(W.TEMPLATES) and len({q.kind for q in spread}) >= len(W.TEMPLATES) - 2
    assert any(" like '%" in s for s in sqls) and any(re.search(r" like '[^%]+%'", s) for s in sqls)
    assert any(" join " in s for s in sqls) and any("date '" in s or "timestamp '" in s for s in sqls)
    strings_grouped = [
        q for spec, q in suite if any(f"group by {c.name}" in q.sql for c in spec.of("category", "code"))
    ]
    assert strings_grouped
    shares = []  # of the queries whose result is the fact table's rows they keep
    kept = ("number filter", "number range", "string equal", "string in", "like prefix", "date range")
    for spec in specs:
        tables = spec.tables()
        for q in W.queries(spec, 48, 0):
            if q.kind in kept:
                out = plans.execute(plans.to_substrait(q.sql, spec.schemas()), tables)
                shares.append(out.num_rows / spec.rows)
    assert min(shares) < 0.003 and max(shares) > 0.3 and 0.003 < sorted(shares)[len(shares) // 2] < 0.3


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node(NodeConfig("tok"))
    yield n
    n.shutdown()


def test_measure_a_join_sums_the_sizes_of_both_tables(node: Node) -> None:
    spec = W.schema(2, 5_000)
    tables = spec.tables()
    with NodeClient(f"127.0.0.1:{node.port}", "tok", timeout_s=20) as c:
        for name, t in tables.items():
            c.upload(name, t)
        joins = [q.sql for q in W.queries(spec, 40, 0) if " join " in q.sql][:1]
        samples = TR.measure(c, None, joins, "core", repeat=1)
    assert [s.system for s in samples] == ["core", "core", "host", "host"]
    f = samples[0].features
    assert f.join and f.in_rows == sum(t.num_rows for t in tables.values())
    # bytes read: both tables' columns the join reads, neither table whole
    assert 0 < f.in_bytes < sum(t.nbytes for t in tables.values())
    assert samples[1].features.out_bytes == f.in_bytes  # pushback ships what is read
    assert all(v > 0 for s in samples for v in s.times.values())


def test_generated_samples_upload_measure_and_drop(node: Node) -> None:
    seen: list[int] = []
    with NodeClient(f"127.0.0.1:{node.port}", "tok", timeout_s=20) as c:
        samples = TR.generated_samples(c, "core", [7, 8], sizes=(3_000,), queries=3, repeat=1,
                                       progress=seen.append)  # fmt: skip
        assert c.schemas() == {}
    assert len(samples) == 2 * 3 * 4 and seen == [1, 2, 3, 4, 5, 6]
    assert isinstance(W.schema(7, 10).schemas()[W.schema(7, 10).fact], pa.Schema)
