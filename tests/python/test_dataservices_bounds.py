"""Bounds and ownership of a node, against a real node process and the real `offload` command
(issue 39): a data set is not replaced without --replace, `query --save` replaces only a result
file it wrote, a runaway query is stopped (its time limit, its client gone, the node's shutdown)
while other clients are served, a node killed mid-query is named in one line, a Parquet file
without page checksums is said to be unverifiable, and `node serve --help` reads whole in 80
columns."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("datafusion")

from offload.dataservices import particles as P
from offload.dataservices.client import NodeClient, NodeError

TOKEN = "bounds-token"
ENV = {**os.environ, "OFFLOAD_NODE_TOKEN": TOKEN, "COLUMNS": "80"}
CROSS = "select count(*) as n from p a, p b, p c where a.x + b.x + c.x < 0.000001"
"""A three-way cross join of 3,000 rows: 2.7e10 rows, hours of CPU."""


@dataclass
class Served:
    proc: subprocess.Popen[str]
    port: int
    data: Path

    @property
    def at(self) -> list[str]:
        return ["--node", f"127.0.0.1:{self.port}"]

    def client(self, timeout_s: float = 20) -> NodeClient:
        return NodeClient(f"127.0.0.1:{self.port}", TOKEN, timeout_s)


def _serve(data: Path, *args: str) -> Served:
    """A node process on a free port, serving once it says so (at most 60 s)."""
    argv = [
        sys.executable,
        "-m",
        "offload.cli",
        "node",
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(data),
        *args,
    ]
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if m := re.search(r"serving on grpc://127\.0\.0\.1:(\d+)", line):
            return Served(proc, int(m.group(1)), data)
        assert line, f"the node ended before serving (exit {proc.poll()})"
    proc.kill()
    raise AssertionError("the node did not serve within 60 s")


def _stop(s: Served) -> None:
    if s.proc.poll() is None:
        s.proc.kill()
    s.proc.wait(10)


def _offload(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "offload.cli", "node", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ENV)


def _query(sql: str, *args: str) -> subprocess.Popen[str]:
    """`offload node query SQL ARGS` started, its output piped."""
    argv = [sys.executable, "-m", "offload.cli", "node", "query", sql, *args]
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2, one `error:` line on stderr holding ``words``, no traceback; the line."""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("node")
    P.write(P.generate(2_000, seed=1), data / "big.parquet")
    P.write(P.generate(100, seed=2), data / "small.parquet")
    s = _serve(data)
    yield s
    _stop(s)


def test_load_refuses_a_name_taken_without_replace(node: Served) -> None:
    r = _offload("load", "d8", *node.at, "--path", "big.parquet")
    assert r.returncode == 0 and "2,000 rows" in r.stdout and "replaced" not in r.stdout, r.stdout + r.stderr
    _one_line_error(
        _offload("load", "d8", *node.at, "--path", "small.parquet"), "'d8'", "exists", "--replace"
    )
    with node.client() as c:
        with pytest.raises(NodeError, match="exists"):
            c.upload("d8", P.generate(10), replace=False)
        assert {d["name"]: d["rows"] for d in c.status()["datasets"]}["d8"] == 2_000
    r = _offload("load", "d8", *node.at, "--path", "small.parquet", "--replace")
    assert r.returncode == 0 and "100 rows (replaced: 2,000 rows before)" in r.stdout, r.stdout + r.stderr


def test_query_save_replaces_only_a_result_file_it_wrote(node: Served, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with node.client() as c:
        c.upload("d10", P.generate(500, seed=3))
    sql = "select id, x from d10 where x < 0.5"
    saved = tmp_path / "r.parquet"
    for force in ((), ("--force",)):  # new, then replacing its own result
        r = _offload("query", sql, *node.at, "--way", "offload", "--save", str(saved), *force)
        assert r.returncode == 0 and saved.exists(), r.stdout + r.stderr
    mine = tmp_path / "notes.csv"
    mine.write_text("my,own\n1,2\n")
    _one_line_error(_offload("query", sql, *node.at, "--save", str(mine)), str(mine), "exists", "--force")
    theirs = tmp_path / "thesis.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), theirs)
    before = theirs.read_bytes()
    r = _offload("query", sql, *node.at, "--save", str(theirs), "--force")
    _one_line_error(r, str(theirs), "not a result file")
    assert theirs.read_bytes() == before and mine.read_text() == "my,own\n1,2\n"


def test_a_node_killed_mid_query_is_named_in_one_line(tmp_path: Path) -> None:
    s = _serve(tmp_path)
    try:
        with s.client() as c:
            c.upload("p", P.generate(3_000, seed=4))
        q = _query(CROSS, *s.at, "--way", "offload")
        _started(s, 1)
        s.proc.kill()
        out, errs = q.communicate(timeout=30)
    finally:
        _stop(s)
    r = subprocess.CompletedProcess(q.args, q.returncode, out, errs)
    _one_line_error(r, f"127.0.0.1:{s.port}", "went away", "check that it is running")
    assert not errs.startswith("error: Flight returned")  # gRPC's words come after the node's
    left = [d for d in Path(tempfile.gettempdir()).glob("offload-node-*") if _owner(d) == s.proc.pid]
    assert left  # a node killed leaves its spool; the next one to start removes it
    _stop(_serve(tmp_path))
    assert not any(d.exists() for d in left)


def _owner(spool: Path) -> int | None:
    try:
        return int((spool / "owner").read_text())
    except (OSError, ValueError):
        return None


def _started(s: Served, queries: int, timeout_s: float = 30) -> None:
    """Until the node has started ``queries`` queries in all (a client's start is slow on a busy
    machine), then a moment for the engine to be at work."""
    deadline = time.monotonic() + timeout_s
    with s.client() as c:
        while c.status()["counters"]["queries"] < queries:
            assert time.monotonic() < deadline, "the query did not reach the node"
            time.sleep(0.1)
    time.sleep(0.5)


def _stopped(s: Served, timeout_s: float = 10) -> int:
    """The node's count of queries it stopped, once it is at least one (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    with s.client() as c:
        while (n := c.status()["counters"]["queries_stopped"]) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    return n


def test_a_runaway_query_is_stopped_and_does_not_hold_the_node(tmp_path: Path) -> None:
    """A cross join whose client is killed is stopped; one that runs past --query-timeout is
    stopped and its client told so in one line; meanwhile a count(*) from another client is
    answered at once; SIGTERM ends the node within its drain time, telling the client."""
    s = _serve(tmp_path, "--query-timeout", "4", "--drain-time", "1")
    try:
        with s.client() as c:
            c.upload("p", P.generate(3_000, seed=4))
        gone = _query(CROSS, *s.at, "--way", "offload")
        _started(s, 1)
        gone.kill()
        gone.wait(10)
        assert _stopped(s) == 1  # its engine killed, not left computing
        limited = _query(CROSS, *s.at, "--way", "offload")
        _started(s, 2)
        with s.client() as c:
            t0 = time.monotonic()
            table, _ = c.query("select count(*) as n from p", "offload")
            assert table.column("n")[0].as_py() == 3_000 and time.monotonic() - t0 < 3
        out, errs = limited.communicate(timeout=20)
        _one_line_error(subprocess.CompletedProcess([], limited.returncode, out, errs), "time limit of 4 s",
                        "--query-timeout")  # fmt: skip
        last = _query(CROSS, *s.at, "--way", "offload")
        _started(s, 4)  # the count(*) was the third
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(15) == 0 and time.monotonic() - t0 < 6
        out, errs = last.communicate(timeout=20)
        _one_line_error(subprocess.CompletedProcess([], last.returncode, out, errs), "shutting down")
    finally:
        _stop(s)


def test_a_file_without_page_checksums_is_said_unverifiable(node: Served, tmp_path: Path) -> None:
    """pyarrow's default Parquet has no page checksums: `load` and `describe` say the node
    cannot verify it, --verified-only refuses it, --rewrite-checksummed rewrites it with them."""
    import pyarrow.parquet as pq

    from offload.dataservices import tablefiles

    pq.write_table(P.generate(1_000, seed=6), node.data / "plain.parquet")
    r = _offload("load", "d4", *node.at, "--path", "plain.parquet")
    assert r.returncode == 0 and "not verifiable: no page checksums" in r.stdout, r.stdout + r.stderr
    r = _offload("describe", "d4", *node.at)
    assert r.returncode == 0 and "not verifiable: no page checksums" in r.stdout.replace("\n", " "), r.stdout
    r = _offload("load", "d4v", *node.at, "--path", "plain.parquet", "--verified-only")
    _one_line_error(r, "plain.parquet", "not verifiable: no page checksums", "--rewrite-checksummed")
    local = tmp_path / "local.parquet"
    pq.write_table(P.generate(500, seed=7), local)
    r = _offload("load", "d4r", *node.at, "--file", str(local), "--rewrite-checksummed", "--verified-only")
    assert r.returncode == 0 and "verified: page checksums" in r.stdout, r.stdout + r.stderr
    assert tablefiles.integrity(local) == tablefiles.VERIFIED


NODE_COMMANDS = ("serve", "particles", "load", "list", "describe", "drop", "query", "explain", "train",
                 "case-study", "cluster-load", "cluster-query", "netns list", "netns rm")  # fmt: skip


def test_node_help_reads_whole_in_80_columns() -> None:
    """No cell of any `offload node` command's help is cut short at 80 columns (`serve` from a
    real process; rich cuts a word wider than its column with an ellipsis), and every numeric
    option states its range."""
    from typer.testing import CliRunner

    from offload.cli import app

    r = subprocess.run([sys.executable, "-m", "offload.cli", "node", "serve", "--help"], env=ENV,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0 and "$OFFLOAD_NODE_TOKEN" in r.stdout and "--query-timeout" in r.stdout
    texts = {"serve": r.stdout}
    for command in NODE_COMMANDS[1:]:
        got = CliRunner().invoke(app, ["node", *command.split(), "--help"], env={"COLUMNS": "80"})
        assert got.exit_code == 0, got.output
        texts[command] = got.stdout
    for command, text in texts.items():
        assert "…" not in text and max(map(len, text.splitlines())) <= 80, (command, text)
        for kind in ("<int>", "<float>"):
            assert kind not in text, (command, f"a numeric option without its range: {kind}")
