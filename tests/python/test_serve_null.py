"""The server's own cost (issue 25), on the real daemon over IPC with the example rule set: the
null matcher answers every query "no match" and says what it is at start and in `stats`; the
CPU time per thread role is counted and grows with load. No timing is asserted beyond growth.
Every wait is bounded."""

from __future__ import annotations

import os
import time
from pathlib import Path

from offload import rules
from offload.rules.bench import load_query_columns
from offload.serve import Client, daemon
from offload.serve.cli import control_request

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"


def test_null_matcher_answers_no_match_and_cpu_grows_with_load(tmp_path: Path) -> None:
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    _, cols = load_query_columns(rs, EXAMPLE / "queries.csv")
    n = len(cols[0])
    endpoint = f"ipc://{tmp_path}/null-{os.getpid()}-{time.monotonic_ns()}.sock"
    control = f"ipc://{tmp_path}/control.sock"
    flags = daemon.rule_flags(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    proc = daemon.start(
        *flags, "--endpoint", endpoint, "--control", control, "--matcher", "null", timeout_s=30
    )
    try:
        before = control_request(control, "stats", 10)
        assert before["matcher"] == "null" and "benchmark only" in before["benchmark_only"]
        with Client(endpoint, criteria=list(rs.criterion_codes), timeout_s=20) as c:
            for _ in range(50):
                r = c.match(cols)
                assert r.ok and len(r.rule) == n == len(r.content)
                assert (r.rule == -1).all() and not r.content.any()  # -1: no rule matched
        after = control_request(control, "stats", 10)
        cpu0, cpu1 = before["cpu"], after["cpu"]
        assert cpu1["threads"]["worker"] == 2 and cpu1["threads"]["executor"] == 1
        assert all(v >= 0 for v in cpu1["cpu_ns"].values())
        for part in ("worker", "executor", "daemon"):
            assert cpu1["cpu_ns"][part] > cpu0["cpu_ns"][part], (cpu0, cpu1)
        assert cpu1["queries"] == 50 * n and cpu1["ns_per_query"]["host_path"] > 0
    finally:
        err = daemon.stop(proc)
    assert "null matcher: benchmark only" in err
