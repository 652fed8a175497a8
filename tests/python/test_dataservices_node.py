"""Near-data nodes for real: Flight servers on loopback in this process, queries both ways against
DataFusion run locally on the same data, and the errors a node must survive."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

pytest.importorskip("datafusion")
pytest.importorskip("substrait")

from offload.dataservices import particles as P
from offload.dataservices import plans, wire
from offload.dataservices.client import NodeClient, NodeError
from offload.dataservices.node import Node, NodeConfig

TOKEN = "test-token"
ROWS = 20_000


@pytest.fixture(scope="module")
def data() -> dict[str, pa.Table]:
    kinds = pa.table({"kind": pa.array(range(16), pa.int64()), "label": [f"k{i}" for i in range(16)]})
    return {"particles": P.generate(ROWS, seed=3), "kinds": kinds}


@pytest.fixture
def node(tmp_path: Path, data: dict[str, pa.Table]) -> Iterator[Node]:
    n = Node(NodeConfig(TOKEN, data_dir=tmp_path, name="n1"))
    for name, t in data.items():
        n.add(name, t)
    yield n
    n.shutdown()


@pytest.fixture
def client(node: Node) -> Iterator[NodeClient]:
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN, timeout_s=20) as c:
        yield c


QUERIES = [
    "select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1",  # the seed's Case I
    "select id, vx from particles where x >= 0.5 and y < 0.55 and z <= 0.67",  # Case II, projected
    "select count(*) as n, min(vx * vx + vy * vy) as lo, max(vx * vx + vy * vy) as hi from particles",
    "select t, count(*) as n, avg(x) as ax from particles where not (z > 0.5) group by t",
    "select x * 2 as x2 from particles where id < 10 or id > 19990",
    "select * from particles where x > 2",  # empty result
    "select p.id, k.label from particles p join kinds k on cast(p.t * 16 as bigint) = k.kind "
    "where p.x < 0.01",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_both_ways_answer_as_datafusion_does_locally(
    client: NodeClient, data: dict[str, pa.Table], sql: str
) -> None:
    want = plans.execute(plans.to_substrait(sql, {n: t.schema for n, t in data.items()}), data)
    for way in ("offload", "pushback"):
        got, timing = client.query(sql, way)
        assert plans.same_answer(got, want), (way, sql)
        assert timing.rows == want.num_rows and timing.total >= timing.fetch > 0
    # pushback ships the columns read, offload only the result
    _, off = client.query(sql, "offload")
    _, back = client.query(sql, "pushback")
    if "join" not in sql and "count" not in sql:
        assert back.arrow_bytes >= off.arrow_bytes


def test_compressed_streams_decode_to_the_same_answer(client: NodeClient) -> None:
    sql = QUERIES[1]
    plain, _ = client.query(sql, "pushback")
    for codec in ("lz4", "zstd"):
        got, _ = client.query(sql, "pushback", codec)
        assert plans.same_answer(got, plain)  # the host may order rows differently


def test_the_node_reports_its_timings_and_lists_its_data(client: NodeClient) -> None:
    _, t = client.query(QUERIES[0], "offload")
    assert 0 < t.node_engine <= t.node
    st = client.status()
    assert {d["name"] for d in st["datasets"]} == {"particles", "kinds"}
    assert st["counters"]["queries"] >= 1
    assert client.schemas()["particles"] == P.SCHEMA
    assert client.describe("particles")["rows"] == ROWS


def test_a_token_is_required(node: Node) -> None:
    with NodeClient(f"127.0.0.1:{node.port}", "wrong") as c, pytest.raises(NodeError, match="token"):
        c.status()
    raw = flight.FlightClient(f"grpc://127.0.0.1:{node.port}")
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(raw.list_flights())


def test_a_node_binds_loopback_unless_told() -> None:
    with pytest.raises(ValueError, match="loopback"):
        Node(NodeConfig(TOKEN, host="0.0.0.0"))
    with pytest.raises(ValueError, match="token"):
        Node(NodeConfig(""))


def test_bad_queries_get_clear_errors_and_the_node_keeps_serving(client: NodeClient, node: Node) -> None:
    with pytest.raises(NodeError, match=r"unknown data set 'nope'.*known: kinds, particles"):
        client.query(plans.to_substrait("select * from nope", {"nope": P.SCHEMA}), "offload")
    with pytest.raises(NodeError, match="not a Substrait plan"):
        client.query(b"\xff\x00garbage", "offload")
    with pytest.raises(plans.PlanError, match="cannot plan"):
        client.query("select nosuchcolumn from particles", "offload")
    with pytest.raises(NodeError, match="no column w"):
        client.query(
            plans.to_substrait("select w from particles", {"particles": pa.schema([("w", pa.int64())])})
        )
    raw = flight.FlightClient(f"grpc://127.0.0.1:{node.port}")
    opts = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
    with pytest.raises(flight.FlightServerError, match="not JSON"):
        raw.do_get(flight.Ticket(b"{nope"), options=opts).read_all()
    with pytest.raises(flight.FlightServerError, match="request version"):
        raw.do_get(flight.Ticket(json.dumps({"v": 99}).encode()), options=opts).read_all()
    with pytest.raises(NodeError, match="unknown action"):
        client._action("format-disk", b"")
    got, _ = client.query(QUERIES[0], "offload")  # still serving
    assert got.num_rows > 0


def test_register_reads_only_the_data_directory(client: NodeClient, tmp_path: Path) -> None:
    P.write(P.generate(100, seed=1), tmp_path / "small.parquet")
    assert client.register("small", "small.parquet")["rows"] == 100
    secret = tmp_path.parent / "secret.parquet"
    secret.write_text("password=hunter2\n")
    with pytest.raises(NodeError, match="outside the node's data directory") as e:
        client.register("s", "../secret.parquet")
    assert "hunter2" not in str(e.value)
    (tmp_path / "bad.parquet").write_text("password=hunter2\n")
    with pytest.raises(NodeError, match="not a readable parquet file") as e:
        client.register("b", "bad.parquet")
    assert "hunter2" not in str(e.value)
    with pytest.raises(NodeError, match="bad data set name"):
        client.upload("../x", pa.table({"a": [1]}))
    assert client.drop("small") and not client.drop("small")


def test_a_client_that_goes_away_mid_stream_leaves_the_node_serving(client: NodeClient, node: Node) -> None:
    raw = flight.FlightClient(f"grpc://127.0.0.1:{node.port}")
    opts = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
    ticket = json.dumps({"v": 1, "scan": "particles", "columns": ["id", "x"], "compression": None})
    reader = raw.do_get(flight.Ticket(ticket.encode()), options=opts)
    reader.read_chunk()
    raw.close()  # gone after one batch
    got, _ = client.query("select count(*) as n from particles", "offload")
    assert got.column("n")[0].as_py() == ROWS


def test_a_node_that_dies_is_an_error_not_a_hang(data: dict[str, pa.Table]) -> None:
    n = Node(NodeConfig(TOKEN))
    n.add("particles", data["particles"])
    port = n.port
    n.shutdown()
    t0 = time.monotonic()
    with NodeClient(f"127.0.0.1:{port}", TOKEN, timeout_s=5) as c, pytest.raises(NodeError):
        c.query("select * from particles", "offload")
    assert time.monotonic() - t0 < 10


def test_cli_particles_load_list_and_query(node: Node, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from offload.cli import app

    run = CliRunner().invoke
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    at = ["--node", f"127.0.0.1:{node.port}", "--token-file", str(tf)]
    r = run(
        app,
        ["node", "particles", "-o", str(tmp_path / "p.parquet"), "--rows", "5000", "--correlation", "0.5"],
    )
    assert r.exit_code == 0, r.output
    r = run(app, ["node", "load", "p5k", *at, "--path", "p.parquet"])
    assert r.exit_code == 0 and "5,000 rows" in r.output, r.output
    r = run(app, ["node", "list", *at, "--json"])
    assert "p5k" in {d["name"] for d in json.loads(r.output)["datasets"]}
    sql = "select count(*) as n from p5k where x >= 0.7 and y < 0.3"
    r = run(app, ["node", "query", sql, *at, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["same_answer"] is True and set(res["runs"]) == {"offload", "pushback"}
    r = run(app, ["node", "query", "select * from nope", *at])
    assert r.exit_code != 0 and "not found" in r.output
    tf.write_text("wrong\n")
    r = run(app, ["node", "list", *at])
    assert r.exit_code != 0 and "token" in r.output


def test_view_layouts_load_estimate_and_answer_as_plain(client: NodeClient, tmp_path: Path) -> None:
    """string_view and binary_view (as tpchgen-cli and Polars write them) load from a file and by
    upload, as string and binary; the sample, the estimate and both ways then work on them."""
    import pyarrow.parquet as pq

    names = [f"n{i % 7}" for i in range(2_000)]
    views = pa.table(
        {
            "id": pa.array(range(2_000), pa.int64()),
            "name": pa.array(names, pa.string_view()),
            "raw": pa.array([n.encode() for n in names], pa.binary_view()),
            "tags": pa.array([[n, None] for n in names], pa.list_view(pa.string_view())),
        }
    )
    pq.write_table(views, tmp_path / "views.parquet")
    assert pq.read_schema(tmp_path / "views.parquet").field("name").type == pa.string_view()
    client.register("views", "views.parquet")
    client.upload("uviews", views)
    for name in ("views", "uviews"):
        schema = client.schemas()[name]
        assert [schema.field(c).type for c in ("name", "raw")] == [pa.string(), pa.binary()]
        assert schema.field("tags").type == pa.list_(pa.string())
        sql = f"select id, name from {name} where name = 'n3' and raw <> cast('n1' as bytea)"
        assert client.estimate(sql)["rows"] == pytest.approx(2_000 / 7, rel=0.25)
        got = {way: client.query(sql, way)[0] for way in ("offload", "pushback")}
        assert got["offload"].num_rows == got["pushback"].num_rows == len([n for n in names if n == "n3"])


def test_the_node_estimates_and_appends(client: NodeClient, data: dict[str, pa.Table]) -> None:
    est = client.estimate("select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1")
    true = client.query("select count(*) as n from particles where x >= 0.7 and y < 0.3 and z <= 0.1")[0]
    n = true.column("n")[0].as_py()
    assert abs(est["rows"] - n) <= 0.25 * n and est["bytes"] == pytest.approx(est["rows"] * 64)
    assert est["steps"][0].startswith("read particles") and est["seconds"] > 0
    explained = client.explain("select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1")
    assert explained["estimate"]["steps"] == est["steps"]  # one estimate: the decision's
    more = P.generate(5_000, seed=9, first_id=ROWS)
    d = client.upload("particles", more, append=True)
    assert d["rows"] == ROWS + 5_000
    assert client.describe("particles")["stats"]["rows"] == ROWS + 5_000
    got, _ = client.query("select count(*) as n from particles", "offload")
    assert got.column("n")[0].as_py() == ROWS + 5_000
    with pytest.raises(NodeError, match="differs"):
        client.upload("particles", pa.table({"a": [1]}), append=True)
    with pytest.raises(NodeError, match="unknown data set"):
        client.upload("nothing", more, append=True)


def test_the_wire_format_is_fixed() -> None:
    """Requests and tickets are the bytes nodes of the same protocol version already speak."""
    from offload.dataservices import wire

    assert wire.request(b"x", "offload") == b'{"v": 1, "way": "offload", "plan": "eA==", "compression": null}'
    scan = b'{"v": 1, "scan": "p", "columns": ["id"], "compression": "lz4"}'
    assert wire.scan_ticket("p", ["id"], "lz4") == scan
    with pytest.raises(ValueError, match="way must be"):
        wire.request(b"x", "sideways")


def test_pushback_streams_bounded_batches_of_a_loaded_table(data: dict[str, pa.Table]) -> None:
    """A loaded file is one chunk of all its rows; the node still sends it as batches of at
    most its bounds (rows, bytes), and the answer is unchanged."""
    n = Node(NodeConfig(TOKEN, batch_rows=3_000, batch_bytes=96 << 10))
    try:
        n.add("particles", data["particles"])
        assert n.dataset("particles").table.column(0).num_chunks == 1
        with NodeClient(f"127.0.0.1:{n.port}", TOKEN, timeout_s=20) as c:
            reader = c._client.do_get(
                flight.Ticket(wire.scan_ticket("particles", ["id", "x", "y"], None)),
                options=c._opts,
            )
            sizes = [
                (ch.data.num_rows, ch.data.nbytes)
                for ch in reader
                if ch.data is not None and ch.data.num_rows
            ]
            assert sum(r for r, _ in sizes) == ROWS and len(sizes) >= ROWS // 3_000
            assert all(r <= 3_000 and b <= 96 << 10 for r, b in sizes)
            sql = "select * from particles where x < 0.4"
            (back, tb), (off, to) = c.query(sql, "pushback"), c.query(sql, "offload")
            assert plans.same_answer(back, off) and tb.batches >= ROWS // 3_000
            assert 0 < tb.first_batch <= tb.fetch and to.batches >= 1
    finally:
        n.shutdown()
