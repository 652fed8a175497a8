"""`offload node` as a data engineer uses it, against a node in this process: `query --way auto`
(with and without time models) in text and JSON with its rows, results saved as Parquet, Arrow
and CSV and read back equal, `explain` showing the decision and its crossover, `describe` and
`drop`, the tool's namespaces listed and removed; and bad input, one line and exit 2."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

pytest.importorskip("datafusion")
pytest.importorskip("sklearn")

from typer.testing import CliRunner, Result

from offload.cli import app
from offload.dataservices import particles as P
from offload.dataservices import timemodel as TM
from offload.dataservices.node import Node, NodeConfig
from offload.host import links as L

TOKEN = "cli-token"
Run = Callable[..., Result]
SQL = "select * from particles where x < 0.02"  # about 400 rows


def _mixed() -> pa.Table:
    """A table of the types a Parquet or Arrow file must bring back as they were."""
    n = 50
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(n)], pa.date32()),
        "name": [f"item {i % 7}" for i in range(n)],
        "price": pa.array([Decimal(f"{i}.{i % 100:02d}") for i in range(n)], pa.decimal128(10, 2)),
        "at": pa.array([dt.datetime(2024, 1, 1, i % 24, tzinfo=dt.UTC) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64())),
    })  # fmt: skip


def _models() -> TM.Models:
    """A node 4x slower than the host at the engine, streams 5 ns a byte, the host receiving 1 ns."""
    out = []
    for rows in (1e4, 1e5, 1e6):
        for sel in (0.001, 0.01, 0.1, 0.5, 1.0):
            f = TM.QueryFeatures(rows, rows * 64, rows * sel, rows * sel * 64, 1, False, False, False)
            scan = TM.scan_features(f)
            node = {"node_engine": rows * 8e-7, "node_stream_out": f.out_bytes * 5e-9 + 1e-4,
                    "node_request": 1e-3}  # fmt: skip
            node["node_offload"] = node["node_engine"] + node["node_stream_out"]
            ship = scan.out_bytes * 5e-9 + 1e-4
            host = {"host_engine": rows * 2e-7, "host_receive_out": f.out_bytes * 1e-9 + 1e-4}
            out += [
                TM.QuerySample("nic", f, node),
                TM.QuerySample("nic", scan, {"node_stream_in": ship, "node_pushback": ship}),
                TM.QuerySample("host", f, host),
                TM.QuerySample("host", scan, {"host_receive_in": scan.out_bytes * 1e-9 + 1e-4}),
            ]
    return TM.Models.fit(out)


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    n = Node(NodeConfig(TOKEN, name="n1", system="nic"))
    n.add("particles", P.generate(20_000, seed=5))
    n.add("mixed", _mixed())
    yield n
    n.shutdown()


@pytest.fixture
def cli(node: Node, tmp_path: Path) -> Iterator[Run]:
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    at = ["--node", f"127.0.0.1:{node.port}", "--token-file", str(tf)]

    def run(*args: str) -> Result:
        return CliRunner().invoke(app, ["node", args[0], *args[1:], *at])

    yield run
    node.config.models = None


def _one_line_error(r: Result, *words: str) -> None:
    """Exit 2, one `error:` line naming ``words``, no traceback."""
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_query_auto_says_what_it_chose_and_why_with_its_rows(cli: Run, node: Node) -> None:
    r = cli("query", SQL, "--way", "auto")
    assert r.exit_code == 0, r.output
    assert "auto: the node chose offload: no time models for 'nic'" in r.stdout.replace("\n", " ")
    r = cli("query", SQL, "--way", "auto", "--json", "--rows", "3")
    doc = json.loads(r.stdout)
    auto = doc["runs"]["auto"]
    assert auto["way"] == "offload" and "no time models for 'nic'" in auto["decision"]["why"]
    res = doc["result"]
    assert res["rows"] == auto["rows"] > 3 and res["truncated"] and len(res["records"]) == 3
    assert set(res["records"][0]) == {c["name"] for c in res["columns"]} >= {"id", "x"}
    assert all(rec["x"] < 0.02 for rec in res["records"])
    node.config.models = _models()  # with models the node weighs both ways
    node.config.budget = {"link": {"rate_mbit": 8.0, "delay_ms": 0.0}}
    try:
        doc = json.loads(cli("query", SQL, "--way", "auto", "--json").stdout)
    finally:
        node.config.budget = {}
    d = doc["runs"]["auto"]["decision"]["decision"]
    assert doc["runs"]["auto"]["way"] == d["way"] == "offload" and d["pushback_s"] > d["offload_s"]
    assert not doc["result"]["truncated"] and len(doc["result"]["records"]) == doc["result"]["rows"]
    r = cli("list")  # the node learns from what it served, and says so
    assert r.exit_code == 0 and "learning online:" in r.stdout and "refits" in r.stdout, r.output


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".csv"])
def test_query_save_writes_the_whole_result(cli: Run, tmp_path: Path, suffix: str) -> None:
    want = _mixed().drop_columns(["tags"])
    path = tmp_path / "out" / f"r{suffix}"
    r = cli("query", "select id, day, name, price, at from mixed", "--way", "offload", "--save", str(path))
    assert r.exit_code == 0 and "wrote 50 rows" in r.stdout, r.output
    if suffix == ".parquet":
        got = pq.read_table(path)
    elif suffix == ".arrow":
        got = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    else:
        got = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=want.schema))
    assert got.sort_by("id").equals(want), (got.schema, want.schema)
    assert not list(path.parent.glob(".*.tmp"))


def test_query_refuses_bad_input_in_one_line(cli: Run, tmp_path: Path) -> None:
    _one_line_error(cli("query", SQL, "--way", "sideways"), "sideways", "offload, pushback, auto")
    _one_line_error(cli("query", SQL, "--save", str(tmp_path / "r.txt")), "r.txt", ".parquet", ".csv")
    nested = cli("query", "select * from mixed", "--way", "offload", "--save", str(tmp_path / "m.csv"))
    _one_line_error(nested, "m.csv", "CSV")
    assert not (tmp_path / "m.csv").exists() and not list(tmp_path.glob(".*.tmp"))
    _one_line_error(cli("query", "select * from nope"), "nope")


def test_explain_shows_the_decision_its_stages_and_crossover(cli: Run, node: Node) -> None:
    r = cli("explain", SQL)
    assert r.exit_code == 0, r.output
    text = r.stdout.replace("\n", " ")
    assert "decision: offload" in text and "no time models for 'nic' on this node" in text
    assert "predicted stages" not in r.stdout  # nothing to predict with
    node.config.models = _models()
    r = cli("explain", SQL, "--run")
    assert r.exit_code == 0, r.output
    text = r.stdout.replace("\n", " ")
    for words in ("estimate:", "decision:", "predicted stages (ms)", "node (engine, stream)", "host engine",
                  "offload measured", "crossover:", "Mbit/s", "measured:", "the node's choice"):  # fmt: skip
        assert words in text, words
    doc = json.loads(cli("explain", SQL, "--json").stdout)
    d = doc["decision"]
    assert doc["way"] == d["way"] and set(d) >= {"offload", "pushback", "crossover_mbit", "above_crossover"}
    if d["crossover_mbit"] is None:
        assert "crossover: none" in text and "wins at every rate" in text
    else:
        rate = f"{d['crossover_mbit']:,.0f} Mbit/s"
        assert f"crossover: {d['above_crossover']} wins on links above {rate}" in text
    assert doc["runs"] == {} and "measured" not in doc


def test_describe_and_drop(cli: Run, node: Node) -> None:
    r = cli("describe", "mixed")
    assert r.exit_code == 0, r.output
    assert "mixed: 50 rows" in r.stdout and "date32" in r.stdout
    assert "2024-02-19" in r.stdout  # the last day, as a date (the sketch keeps days since 1970)
    assert "estimates" in r.stdout and "unknown" in r.stdout  # tags, a list
    doc = json.loads(cli("describe", "mixed", "--json").stdout)
    cols = doc["stats"]["columns"]
    assert doc["rows"] == 50 and {f["name"]: f["type"] for f in doc["schema"]}["tags"] == "list<item: int64>"
    assert cols["tags"]["distinct"] is None and cols["name"]["distinct"] == 7
    assert (cols["day"]["min"], cols["day"]["max"]) == ("2024-01-01", "2024-02-19")  # ISO, not days
    assert cols["at"]["max"] == "2024-01-01T23:00:00+00:00"
    _one_line_error(cli("describe", "nope"), "'nope'", "known:", "mixed", "particles")
    node.add("scratch", pa.table({"a": [1, 2]}))
    r = cli("drop", "scratch", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"name": "scratch", "dropped": True}, r.output
    assert "scratch" not in {d.name for d in node.datasets()}
    _one_line_error(cli("drop", "scratch"), "'scratch'", "known: mixed, particles")


def test_cluster_query_shows_each_node_choice(node: Node, tmp_path: Path) -> None:
    (tmp_path / "t").write_text(TOKEN)
    cf = tmp_path / "cluster.toml"
    cf.write_text(f'[nodes.a]\nendpoint = "127.0.0.1:{node.port}"\ntoken_file = "{tmp_path / "t"}"\n')
    q = ["node", "cluster-query", "select count(*) as n from particles where x < 0.5", "--cluster", str(cf)]
    r = CliRunner().invoke(app, q)
    assert r.exit_code == 0, r.output
    assert "a: chose offload: no time models for 'nic'" in r.stdout.replace("\n", " ")
    _one_line_error(CliRunner().invoke(app, [*q, "--way", "both"]), "'both'", "offload, pushback, auto")


def _offload(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "offload.cli", "node", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_train_on_generated_schemas(cli: Run, node: Node, tmp_path: Path) -> None:
    """`train --suite generated` trains on random schemas (strings, dates, joins), uploads and
    drops their tables; a suite it does not know is one line, exit 2."""
    out = tmp_path / "models.json"
    r = cli("train", "-o", str(out), "--suite", "generated", "--schemas", "1", "--schema-sizes", "3000",
            "--queries", "3", "--repeat", "1", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    samples = TM.Models.load(out).samples
    assert json.loads(r.stdout)["samples_added"] == len(samples) == 3 * 4
    assert any(s.features.join or s.features.in_string_bytes > 0 for s in samples)
    assert {d["name"] for d in node.status()["datasets"]} == {"particles", "mixed"}
    _one_line_error(cli("train", "-o", str(out), "--suite", "floats"), "--suite", "generated")


def test_namespaces_of_this_tool_are_listed_and_removed() -> None:
    why = L.unavailable_reason()
    if why:
        pytest.skip(why)
    name = f"t{os.getpid()}"
    ns = L.namespace_name(name)
    assert L.namespace_name(ns) == ns  # the prefix is never doubled
    busy = None
    try:
        L.ensure_namespace(name)
        listed = {d["name"]: d for d in json.loads(_offload("netns", "list", "--json").stdout)}
        assert listed[ns]["idle"] is True and listed[ns]["pids"] == []
        busy = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "sleep", "30"])
        for _ in range(50):  # until nsenter has entered the namespace
            if L.pids(ns):
                break
            subprocess.run(["sleep", "0.1"])
        r = _offload("netns", "rm", name)
        assert r.returncode == 2 and "processes inside" in r.stderr and L.exists(ns), r.stderr
        r = _offload("netns", "rm", "--all-idle", "--json")
        assert r.returncode == 0 and ns in json.loads(r.stdout)["kept"] and L.exists(ns), r.stderr
        busy.kill()
        busy.wait(10)
        r = _offload("netns", "rm", ns)
        assert r.returncode == 0 and f"removed {ns}" in r.stdout and not L.exists(ns), r.stderr
        r = _offload("netns", "rm", name)
        assert r.returncode == 2 and f"no namespace {ns}" in r.stderr
        r = _offload("query", "select 1", "--netns", name)  # a client never makes one
        assert r.returncode == 2 and f"no namespace {ns}" in r.stderr and not L.exists(ns), r.stderr
        assert _offload("netns", "rm", "bad/name").returncode == 2
    finally:
        if busy is not None and busy.poll() is None:
            busy.kill()
            busy.wait(10)
        L.remove_namespace(ns)


def test_serve_removes_the_namespace_it_made(tmp_path: Path) -> None:
    why = L.unavailable_reason()
    if why:
        pytest.skip(why)
    ns = L.namespace_name(f"s{os.getpid()}")
    try:
        r = _offload("serve", "--port", "0", "--netns", ns, "--max-seconds", "0.5",
                     "--token-file", str(tmp_path / "t"))  # fmt: skip
        assert r.returncode == 0 and "serving" in r.stdout, r.stdout + r.stderr
        assert f"removed namespace {ns}" in r.stderr and not L.exists(ns)
        L.ensure_namespace(ns)  # one that was there before the command is left there
        r = _offload("serve", "--port", "0", "--netns", ns, "--max-seconds", "0.5",
                     "--token-file", str(tmp_path / "t"))  # fmt: skip
        assert r.returncode == 0 and L.exists(ns), r.stdout + r.stderr
    finally:
        L.remove_namespace(ns)


def test_serve_refuses_a_learn_file_that_is_not_a_training_file(tmp_path: Path) -> None:
    bad = tmp_path / "learned.json"
    bad.write_text('{"samples": [{"system": 1}]}')
    r = _offload("serve", "--port", "0", "--learn-file", str(bad), "--max-seconds", "0.5",
                 "--token-file", str(tmp_path / "t"))  # fmt: skip
    assert r.returncode == 2 and "learned.json: not a training file" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "serving" not in r.stdout
