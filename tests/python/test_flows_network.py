"""Particle data flows over several nodes: producers put to partition services, which forward
partitions east-west to the nodes that sift them. The sorted read equals a plain sort, the
seed's queries equal the plain table's, bad input gets clear errors, and a lost node's rows are
accounted for, never dropped."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from offload.cli import app
from offload.dataservices.client import NodeClient, NodeError
from offload.dataservices.cluster import NodeSpec
from offload.dataservices.node import Node, NodeConfig
from offload.flows import datasets as D
from offload.flows import network as W
from offload.flows import partition as F
from offload.flows import run as R

ROWS = 30_000
_names = (f"f{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[NodeSpec]]:
    ns = [Node(NodeConfig(f"tok{i}", name=f"n{i}"), services=[W.FlowService]) for i in range(4)]
    yield [NodeSpec(f"n{i}", f"127.0.0.1:{n.port}", f"tok{i}") for i, n in enumerate(ns)]
    for n in ns:
        n.shutdown()


def plain_sort(name: str, rows: int) -> pa.Table:
    d = D.dataset(name)
    return d.generate(rows, 0).sort_by([(k, "ascending") for k in d.key])


@given(st.integers(1, 8), st.integers(2, 16))
def test_each_node_owns_a_contiguous_run_of_partitions(nodes: int, parts: int) -> None:
    if parts < nodes:
        return
    owners = [W.owner(p, parts, nodes) for p in range(parts)]
    assert owners == sorted(owners) and set(owners) == set(range(nodes))


@pytest.mark.parametrize(
    ("dataset", "k", "parts", "codec", "message_rows"),
    [
        ("particles", 1, 2, None, 4096),
        ("particles", 3, 8, "lz4", 1000),
        ("airplanes", 4, 4, None, 7777),
        ("ships", 2, 5, "zstd", 30_000),
    ],
)
def test_the_pipeline_over_nodes_is_a_plain_sort(
    nodes: list[NodeSpec],
    tmp_path: Path,
    dataset: str,
    k: int,
    parts: int,
    codec: str | None,
    message_rows: int,
) -> None:
    r = R.run(
        nodes[:k], dataset, ROWS, tmp_path, parts, codec, message_rows, memtable_rows=2048, name=next(_names)
    )
    want = plain_sort(dataset, ROWS)
    assert r["sorted"].equals(want)
    a = r["accounting"]
    assert a["explained"] and a["stored"] == ROWS and not a["lost_nodes"] and not a["kept_in"]
    assert r["end"]["box_rows"] == want.filter(D.BOX[dataset]).num_rows
    assert (r["end"]["speed2_min"], r["end"]["speed2_max"]) == pytest.approx(
        D.speed_range(want, D.dataset(dataset))
    )
    assert r["midway"]["box_rows"] <= r["end"]["box_rows"]
    moved = sum(sum(s["delivered_rows"].values()) for s in r["per_node"].values())
    local = sum(s["local_rows"] for s in r["per_node"].values())
    assert moved + local == ROWS and (moved > 0) == (k > 1)
    b = [s["breakdown"] for s in r["per_node"].values()]
    out, into = sum(x["bytes_out"] for x in b), sum(x["bytes_in"] for x in b)
    assert out < into if codec else sum(x["compress_s"] for x in b) == 0  # the codec ran, or no time for one


def test_a_flow_ticket_is_the_wire_format_nodes_speak() -> None:
    assert W.ticket("f", read="held") == b'{"v": 1, "flow": "f", "read": "held"}'


def test_bad_flows_get_clear_errors(nodes: list[NodeSpec], tmp_path: Path) -> None:
    c = NodeClient(nodes[0].endpoint, nodes[0].token)
    good = R.setup(nodes[:2], "bad", "particles", 1000, 4, None, 64, 4)
    for change, says in [
        ({"dataset": "stars"}, "unknown data set"),
        ({"parts": 1}, "2-16 partitions"),
        ({"parts": 3, "nodes": good["nodes"] * 2}, "at least one per node"),
        ({"codec": "gzip"}, "codec"),
        ({"index": 5}, "index"),
        ({"nodes": "n0"}, "nodes"),
    ]:
        with pytest.raises(NodeError, match=says):
            c.action("flow-setup", json.dumps(good | change).encode())
    with pytest.raises(NodeError, match="no flow 'nope'"):
        c.action("flow-status", b"nope")
    c.action("flow-setup", json.dumps(good).encode())
    bad_put = [
        ([W.HEAD, "bad"], pa.table({"x": [1]}), "one 'blob' column"),
        ([W.HEAD, "bad"], pa.table({"blob": pa.array([b"junk"], pa.binary())}), "not an Arrow IPC stream"),
        ([W.HEAD, "bad", "from", "1"], pa.table({"part": pa.array([3], pa.int32()),
                                                  "blob": pa.array([b"x"], pa.binary())}), "not node 0's"),
        ([W.HEAD, "bad", "sideways"], pa.table({"x": [1]}), "a flow put goes to"),
    ]  # fmt: skip
    ships = F.pack(D.dataset("ships").generate(100, 0))
    bad_put.append(
        ([W.HEAD, "bad"], pa.table({"blob": pa.array([ships], pa.binary())}), "not particles data")
    )
    for path, table, says in bad_put:
        writer, acks = c._client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
        with pytest.raises(flight.FlightError, match=says):
            writer.write_table(table)
            writer.done_writing()
            acks.read()
            writer.close()
    with pytest.raises(NodeError, match="unknown flow query"):
        c.get(W.ticket("bad", query="everything"))
    c.close()


def test_a_lost_node_is_reported_and_its_rows_kept(tmp_path: Path) -> None:
    rows = 120_000
    with R.start_nodes(3, "host", tmp_path) as procs:
        r = R.run(
            procs.specs, "particles", rows, tmp_path, 6, message_rows=2000, midway=lambda: procs.kill(1)
        )
    a = r["accounting"]
    assert list(a["lost_nodes"]) == ["n1"] and a["explained"], a
    kept = [pa.ipc.open_file(f).read_all() for f in a["kept_in"]]
    assert sum(t.num_rows for t in kept) == a["kept"] > 0
    everything = pa.concat_tables([r["sorted"], *kept])
    key = everything.select(["id", "t"]).group_by(["id", "t"]).aggregate([])
    assert key.num_rows + a["lost_with_nodes"] == rows
    assert (
        r["sorted"].select(["id", "t"]).group_by(["id", "t"]).aggregate([]).num_rows == r["sorted"].num_rows
    )
    assert 0 < a["lost_with_nodes"] <= a["could_be_on_lost_nodes"]
    assert r["sorted"].num_rows == a["stored"] < rows
    with pytest.raises(RuntimeError, match="did not start"):
        with R.start_nodes(1, "nonsense", tmp_path):
            pass


def test_the_cli_runs_a_scaling_run(tmp_path: Path) -> None:
    png = tmp_path / "nodes.png"
    args = ["flows", "run", "--nodes", "1,2", "--rows", "20000", "--profile", "host", "--message-rows",
            "3000", "--work", str(tmp_path), "--plot", str(png), "--json"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    runs = json.loads(res.stdout)  # progress goes to stderr
    assert [r["nodes"] for r in runs] == [1, 2] and all(r["matches_plain_sort"] for r in runs)
    assert png.stat().st_size > 0
    res = CliRunner().invoke(app, ["flows", "run", "--nodes", "3", "--parts", "2"])
    assert res.exit_code != 0 and "at least one per node" in res.output
