"""Faults a user of the nodes and flows meets: damaged Parquet, a full disk, a port in use, a
wrong token, and what the CLI says about them (one line, exit 2, never a traceback)."""

from __future__ import annotations

import io
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import half_written

pytest.importorskip("datafusion")

from offload.cli import app
from offload.dataservices import particles as P
from offload.dataservices.client import NodeClient, NodeError
from offload.dataservices.node import Node, NodeConfig

TOKEN = "fault-token"
run = CliRunner().invoke


def _one_line_error(r: object, *words: str) -> None:
    """Exit 2 and one line ``error: ...`` holding ``words`` (progress lines may come before it)."""
    out = r.output  # type: ignore[attr-defined]
    assert r.exit_code == 2 and "Traceback" not in out, out  # type: ignore[attr-defined]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and out.strip().endswith(errors[0].strip()), out
    for w in words:
        assert w in errors[0], (w, out)


def _damage(path: Path, n: int = 64, seed: int = 0) -> None:
    """Flips ``n`` bytes inside the x column's dictionary page (its values): without checksums
    this loads, and sum(x) over x in [0, 1) comes out NaN or -1.8e305."""
    col = pq.ParquetFile(path).metadata.row_group(0).column(1)
    b = bytearray(path.read_bytes())
    span = np.arange(col.dictionary_page_offset + 512, col.data_page_offset - 64)
    for i in np.random.default_rng(seed).choice(span, n, False):
        b[i] ^= 0xFF
    path.write_bytes(bytes(b))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(NodeConfig(TOKEN, data_dir=tmp_path, name="n1"))
    yield n
    n.shutdown()


@pytest.fixture
def at(node: Node, tmp_path: Path) -> list[str]:
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    return ["--node", f"127.0.0.1:{node.port}", "--token-file", str(tf)]


def test_damaged_parquet_is_refused_naming_the_file(node: Node, at: list[str], tmp_path: Path) -> None:
    path = P.write(P.generate(20_000, seed=1), tmp_path / "p.parquet")
    _damage(path)
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN, 20) as c, pytest.raises(NodeError) as e:
        c.register("p", "p.parquet")
    assert "p.parquet" in str(e.value) and "checksum" in str(e.value)
    _one_line_error(run(app, ["node", "load", "p", *at, "--path", "p.parquet"]), "p.parquet", "checksum")
    _one_line_error(run(app, ["node", "load", "p", *at, "--file", str(path)]), str(path), "checksum")


def test_a_full_disk_leaves_no_half_written_particles(small_tmpfs: Path) -> None:
    out = small_tmpfs / "p.parquet"
    r = run(app, ["node", "particles", "-o", str(out), "--rows", "1500000"])
    _one_line_error(r, str(out), "no space")
    assert not out.exists() and not half_written(small_tmpfs)


def test_a_full_disk_stops_flows_run_cleanly(small_tmpfs: Path) -> None:
    r = run(app, ["flows", "run", "--nodes", "1", "--parts", "2", "--work", str(small_tmpfs / "w")])
    _one_line_error(r, "no space")
    assert not half_written(small_tmpfs)


def test_serve_on_a_port_in_use_says_so(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run(app, ["node", "serve", "--port", str(port), "--max-seconds", "1",
                      "--token-file", str(tmp_path / "t")])  # fmt: skip
    _one_line_error(r, f"127.0.0.1:{port}", "in use")


def test_a_wrong_token_is_not_a_missing_one(node: Node, at: list[str], tmp_path: Path) -> None:
    (tmp_path / "token").write_text("wrong\n")
    r = run(app, ["node", "list", *at])
    _one_line_error(r, "wrong", str(tmp_path / "token"))
    with NodeClient(f"127.0.0.1:{node.port}", "", 20) as c, pytest.raises(NodeError, match="none was given"):
        c.status()


def test_list_shows_the_budget_and_query_takes_auto(node: Node, at: list[str]) -> None:
    node.add("p", P.generate(5_000, seed=2))
    cpu = {"method": "pinned", "cpus": [1], "reason": "no CPU quota: test"}
    mem = {"method": "none", "reason": "the profile sets no memory limit"}
    node.config.budget = {"profile": "core", "threads": 1, "cpu": cpu, "memory": mem}
    r = run(app, ["node", "list", *at], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "profile core" in r.output and "pinned to CPU" in r.output, r.output
    r = run(app, ["node", "query", "select count(*) as n from p where x < 0.5", *at, "--way", "auto"])
    assert r.exit_code == 0 and "the node chose offload" in r.output and "no time models" in r.output, (
        r.output
    )
    sql = "select count(*) as n from p where x < 0.5"
    r = run(app, ["node", "query", sql, *at, "--way", "auto", "--json"])
    res = json.loads(r.output)
    assert res["runs"]["auto"]["way"] == "offload" and "why" in res["runs"]["auto"]["decision"]


def test_json_results_and_client_paths(node: Node, at: list[str], tmp_path: Path) -> None:
    r = run(app, ["node", "particles", "-o", str(tmp_path / "q.parquet"), "--rows", "3000", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["rows"] == 3000, r.output
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:  # a path relative to here reaches the node absolute, and it is inside its data directory
        r = run(app, ["node", "load", "q", *at, "--path", "q.parquet", "--json"])
    finally:
        os.chdir(cwd)
    d = json.loads(r.output)
    assert d["rows"] == 3000 and d["source"] == str(tmp_path / "q.parquet"), r.output


def test_flight_reads_are_aligned(node: Node) -> None:
    """Flight hands over buffers where gRPC put them; Acero then warns "poorly aligned" once per
    batch (the ~80 warnings of `flows run`'s account of a lost node). The client realigns."""
    node.add("p", P.generate(200_000, seed=3))
    with NodeClient(f"127.0.0.1:{node.port}", TOKEN, 20) as c:
        got = [c.query("select * from p", "offload")[0],
               c.get(json.dumps({"v": 1, "scan": "p", "columns": ["id", "x"]}).encode())]  # fmt: skip
    for t in got:
        bufs = [b for col in t.columns for ch in col.chunks for b in ch.buffers() if b is not None]
        assert bufs and all(b.address % 8 == 0 for b in bufs)


def test_flows_tables_fit_80_columns() -> None:
    from rich.console import Console

    from offload.flows import cli as FC

    per = {"breakdown": {k: 0.123 for k in ("unpack_s", "split_s", "repack_s", "compress_s", "transfer_s",
                                             "merge_s")}}  # fmt: skip
    r = {"nodes": 4, "gb_per_s": 0.0123, "wall_s": 12.3, "per_node": {"n0": per, "n1": per},
         "accounting": {"stored": 1_000_000, "lost_nodes": {}}, "matches_plain_sort": True,
         "end": {"box_rows": 125_000, "speed2_max": 20.0}}  # fmt: skip
    FC.console = Console(width=80, record=True, file=io.StringIO())
    try:
        FC.print_run([r, r | {"nodes": 8}, r | {"nodes": 16}])
        part = {"dataset": "airplanes", "profile": "bluefield2", "codec": "zstd", "bytes_in": 1e9,
                "bytes_out": 3e8, "s_per_gb": 12.34} | {k: 1.234 for k in ("unpack_s", "split_s", "repack_s",
                                                                             "compress_s")}  # fmt: skip
        FC.print_partition([part, part | {"profile": "core"}])
        text = FC.console.export_text()
    finally:
        FC.console = Console()
    assert "…" not in text and "unpack" in text and "merge" in text and "airplanes" in text, text
