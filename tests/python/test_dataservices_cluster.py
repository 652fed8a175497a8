"""Several nodes on loopback: a data set partitioned over them, queries fanned out with each node
deciding for its partition, answers equal to DataFusion on the whole table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("datafusion")

from offload.dataservices import particles as P
from offload.dataservices import plans
from offload.dataservices.cluster import ClusterClient, NodeSpec, load_cluster
from offload.dataservices.node import Node, NodeConfig

ROWS = 12_000


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[Node]]:
    ns = [Node(NodeConfig(f"tok{i}", name=f"n{i}")) for i in range(3)]
    yield ns
    for n in ns:
        n.shutdown()


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return P.generate(ROWS, seed=11)


@pytest.fixture(scope="module")
def cluster(nodes: list[Node], table: pa.Table) -> Iterator[ClusterClient]:
    specs = [NodeSpec(f"n{i}", f"127.0.0.1:{n.port}", f"tok{i}") for i, n in enumerate(nodes)]
    with ClusterClient(specs) as cc:
        assert sum(cc.upload_partitioned("particles", table, by="id").values()) == ROWS
        yield cc


@pytest.mark.parametrize(
    "sql",
    [
        "select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1",
        "select count(*) as n, avg(x) as ax, min(vx) as lo from particles where y < 0.5",
        "select t, count(*) as n from particles where x < 0.3 group by t order by t",
        "select id, x * 2 as x2 from particles where z < 0.05 order by id limit 7",
        "select * from particles where x > 5",
    ],
)
def test_fanned_out_queries_answer_as_the_whole_table_does(
    cluster: ClusterClient, table: pa.Table, sql: str
) -> None:
    want = plans.execute(plans.to_substrait(sql, {"particles": table.schema}), {"particles": table})
    for way in ("offload", "pushback", "auto"):
        got, timing = cluster.query(sql, way)
        assert plans.same_answer(got, want), (way, sql)
        assert set(timing.nodes) == {"n0", "n1", "n2"}
        if way != "auto":
            assert {d["way"] for d in timing.nodes.values()} == {way}


def test_split_keeps_the_local_part_below_the_first_blocking_operator(table: pa.Table) -> None:
    schema = {"particles": table.schema}
    plan = plans.to_substrait("select count(*) as n from particles where x < 0.5", schema)
    local, final, names = plans.split(plan)
    assert final is not None and names == []  # count(*) needs only how many rows pass
    assert plans.inspect(local).reads == {"particles": ["x"]}
    assert plans.inspect(final).reads == {plans.PARTIAL: names}
    flat = plans.to_substrait("select id from particles where x < 0.5", schema)
    assert plans.split(flat)[1] is None
    kinds = pa.table({"kind": pa.array([0, 1], pa.int64())})
    join = plans.to_substrait(
        "select p.id from particles p join kinds k on p.id = k.kind",
        {"particles": table.schema, "kinds": kinds.schema},
    )
    with pytest.raises(plans.PlanError, match="join"):
        plans.split(join)


def test_cluster_files_and_the_cli(nodes: list[Node], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    lines = []
    for i, n in enumerate(nodes):
        (tmp_path / f"t{i}").write_text(f"tok{i}\n")
        lines += [f"[nodes.n{i}]", f'endpoint = "127.0.0.1:{n.port}"', f'token_file = "{tmp_path / f"t{i}"}"']
    cf = tmp_path / "cluster.toml"
    cf.write_text("\n".join(lines) + "\n")
    assert [s.name for s in load_cluster(cf)] == ["n0", "n1", "n2"]
    run = CliRunner().invoke
    r = run(app, ["node", "cluster-load", "p2", "--cluster", str(cf), "--rows", "3000"])
    assert r.exit_code == 0 and "n2 1,000 rows" in r.output, r.output
    r = run(app, ["node", "cluster-load", "p3", "--cluster", str(cf), "--rows", "300", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["rows"] == {"n0": 100, "n1": 100, "n2": 100}, r.output
    r = run(app, ["node", "cluster-query", "select count(*) as n from p2", "--cluster", str(cf), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["timing"]["rows"] == 1
    bad = tmp_path / "bad.toml"
    bad.write_text('[nodes.x]\nendpoint = "127.0.0.1:1"\ntoken_file = "/nonexistent"\n')
    with pytest.raises(ValueError, match="node 'x': cannot read its token file"):
        load_cluster(bad)
    bad.write_text("nodes = 3\n")
    with pytest.raises(ValueError, match=r"no \[nodes.NAME\]"):
        load_cluster(bad)
