"""`offload serve bench`, the Rust load generator: against a server with a known injected delay
the open loop shows the queueing a closed loop hides (coordinated omission), and against the
real daemon on the example rules every request is answered, raw and pre-encoded, with --json and
--out holding the same result. Every wait is bounded (each run ends at its duration + drain)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from typer.testing import CliRunner

from offload import _native, rules
from offload.cli import app
from offload.rules.bench import load_query_columns
from offload.serve import bench, daemon

MINI = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"
DELAY_S = 0.002


def _ep(tmp_path: Path, name: str) -> str:
    return f"ipc://{tmp_path}/{name}-{time.monotonic_ns()}.sock"


@pytest.fixture(scope="module")
def example() -> tuple[rules.RuleSet, list[list[str]]]:
    rs = rules.load(MINI / "ruletype.toml", MINI / "rules.csv")
    return rs, load_query_columns(rs, MINI / "queries.csv")[1]


@pytest.fixture
def slow(tmp_path: Path) -> Iterator[str]:
    """A ROUTER answering each request Ok after DELAY_S, one at a time (~500 requests/s at most)."""
    endpoint, stop = _ep(tmp_path, "slow"), threading.Event()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)

    def serve() -> None:
        while not stop.is_set():
            if not sock.poll(20):
                continue
            peer, frame = sock.recv_multipart()
            time.sleep(DELAY_S)
            rid = frame[4:12]  # OFR1 | id | Ok | version 1 | 0 answers | 0 stages | empty message
            sock.send_multipart([peer, b"OFR1" + rid + b"\0" + (1).to_bytes(8, "little") + bytes(4 + 1 + 4)])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield endpoint
    stop.set()
    t.join(timeout=5)
    sock.close()
    ctx.term()


def test_open_loop_shows_the_queueing_a_closed_loop_hides(
    slow: str, example: tuple[rules.RuleSet, list[list[str]]]
) -> None:
    rs, cols = example
    frames, _ = bench.frames(cols, list(rs.criterion_codes), 4)
    short = {"connections": 1, "duration_s": 0.5, "drain_s": 0.3, "max_in_flight": 8}
    closed = bench.run(slow, frames, bench.Load("closed", **short))  # type: ignore[arg-type]
    opened = bench.run(slow, frames, bench.Load("open", rate=1500.0, **short))  # type: ignore[arg-type]
    delay_us = DELAY_S * 1e6
    assert closed["unanswered"] == 0 and closed["latency_us"]["p50"] < 10 * delay_us, closed
    # 3x the capacity: latency from due time grows with the run; from send time it does not
    assert opened["latency_us"]["p50"] > 50 * delay_us, opened
    assert opened["service_us"]["p50"] < opened["latency_us"]["p50"] / 5, opened
    assert opened["unsent"] > 0 and not opened["generator"]["bound"], opened


def test_every_request_to_the_daemon_is_answered(tmp_path: Path) -> None:
    endpoint = _ep(tmp_path, "daemon")
    control = _ep(tmp_path, "control")
    flags = [*daemon.rule_flags(MINI / "ruletype.toml", MINI / "rules.csv"), "--endpoint", endpoint]
    proc = daemon.start(*flags, "--workers", "1", "--control", control, timeout_s=30)
    try:
        common = ["--ruletype", str(MINI / "ruletype.toml"), "--rules", str(MINI / "rules.csv"),
                  "--queries", str(MINI / "queries.csv"), "--duration", "0.4", "--drain", "2"]  # fmt: skip
        for extra in ([], ["--encoded", "--request-size", "3", "--threads", "2"]):
            out = tmp_path / "made" / "bench.json"
            argv = [
                "serve",
                "bench",
                "-e",
                endpoint,
                *common,
                "--rate",
                "300",
                *extra,
                "--json",
                "--out",
                str(out),
            ]
            r = CliRunner().invoke(app, argv)
            assert r.exit_code == 0, r.output
            result = json.loads(out.read_text())
            assert r.stdout == out.read_text() + "\n"
            assert result["status"] == {"Ok": result["sent"]} and result["sent"] >= 100, result
            assert result["unanswered"] == 0 and result["unsent"] == 0, result
            assert result["queries_per_s"] > 0 and result["generator"]["process_cpu_s"] > 0, result
        r = CliRunner().invoke(app, ["serve", "bench", "-e", endpoint, *common, "--mode", "closed"])
        assert r.exit_code == 0 and "closed loop" in r.stdout and "generator" in r.stdout, r.output
        # With the control socket: the daemon's CPU per query over the run, by role.
        r = CliRunner().invoke(app, ["serve", "bench", "-e", endpoint, "-c", control, *common, "--json"])
        assert r.exit_code == 0, r.output
        cpu = json.loads(r.stdout)["daemon_cpu"]
        per = cpu["ns_per_query"]
        assert cpu["queries"] > 0 and per["daemon"] > 0, cpu
        assert per["host_path"] == pytest.approx(per["daemon"] - per["match"]), cpu
        assert cpu["host_path_ceiling_qps"] > 0 and cpu["matcher"] == "fast", cpu
        r = CliRunner().invoke(app, ["serve", "bench", "-e", endpoint, "-c", control, *common])
        assert r.exit_code == 0 and "host path" in r.stdout and "ns/query" in r.stdout, r.output
    finally:
        daemon.stop(proc)


def test_bad_settings_and_nothing_there_are_one_line(tmp_path: Path) -> None:
    common = ["--ruletype", str(MINI / "ruletype.toml"), "--rules", str(MINI / "rules.csv"),
              "--queries", str(MINI / "queries.csv"), "--duration", "0.2",
              "--connect-timeout", "0.3"]  # fmt: skip
    for extra, words in (
        (["--mode", "fast"], "--mode is one of"),
        (["--connections", "0"], "greater than or equal to 1"),  # the option's range
        (["--rate", "-5"], "greater than or equal to"),
        ([], "no reply from"),
    ):
        r = CliRunner().invoke(app, ["serve", "bench", "-e", _ep(tmp_path, "nobody"), *common, *extra])
        assert r.exit_code == 2, (extra, r.output)
        said = " ".join(r.output.replace("│", " ").split())  # as one line, out of typer's box
        assert words in said and "Traceback" not in r.output, (extra, r.output)
    assert "serve_bench" in dir(_native)


def test_the_knee_lies_below_the_capacity(slow: str) -> None:
    """~500 requests/s at most (2 ms each): 200/s meets a 50 ms p99, 800/s cannot."""
    argv = ["serve", "bench", "-e", slow, "--ruletype", str(MINI / "ruletype.toml"), "--rules",
            str(MINI / "rules.csv"), "--queries", str(MINI / "queries.csv"), "--request-size", "4",
            "--connections", "1", "--max-in-flight", "8", "--duration", "0.3", "--drain", "0.3",
            "--mode", "knee", "--rate", "200", "--steps", "1", "--sla-p99-us", "50000"]  # fmt: skip
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0 and "knee (p99 <= 50,000 µs)" in r.stdout, r.output
    result = json.loads(CliRunner().invoke(app, [*argv, "--json"]).stdout)
    assert 200 <= result["knee"]["rate_rps"] < result["failing_rate_rps"] <= 800, result["knee"]
    assert all("outcome" in run for run in result["runs"]) and len(result["runs"]) <= 10
