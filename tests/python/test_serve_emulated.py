"""The emulated device (issue 25, benchmarks only) through `offload serve --matcher emulated`, on
the example rule set over IPC: its answers are the fast matcher's, the replies carry the device
stages, and it says at start and at the end what it is. No timing is asserted (the Rust test
checks the hold's lower bound). Every wait is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from offload import rules
from offload.rules.bench import load_query_columns
from offload.serve import Client, daemon
from offload.serve.control import control_request

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "data" / "examples" / "mct-mini"
PROFILE = ROOT / "data" / "plans" / "whatif" / "gpu-h200.toml"


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], str, str]:
    endpoint = f"ipc://{tmp_path}/emulated-{os.getpid()}-{time.monotonic_ns()}.sock"
    control = f"ipc://{tmp_path}/control.sock"
    flags = daemon.rule_flags(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    emulate = ["--matcher", "emulated", "--emulate-profile", str(PROFILE)]
    emulate += ["--emulate-queries", str(EXAMPLE / "queries.csv")]
    proc = daemon.start(*flags, *emulate, "--endpoint", endpoint, "--control", control, timeout_s=30)
    return proc, endpoint, control


def test_emulated_answers_are_the_fast_matchers_with_device_stages(tmp_path: Path) -> None:
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    _, cols = load_query_columns(rs, EXAMPLE / "queries.csv")
    expected = rules.compile(rs, "fast").match(cols).rule
    proc, endpoint, _ = _start(tmp_path)
    try:
        with Client(endpoint, criteria=list(rs.criterion_codes), timeout_s=20) as c:
            for _ in range(3):
                r = c.match(cols)
                assert r.ok and (r.rule == expected).all()
                assert {"h2d", "kernel", "d2h"} <= r.stages_ns.keys(), r.stages_ns
                assert r.stages_ns["kernel"] > 0
    finally:
        err = daemon.stop(proc)
    assert "emulated device: benchmark only" in err
    assert "emulated device: 3 batches" in err and " 0 misses " in err, err


def test_stats_say_the_emulated_device_is_benchmark_only(tmp_path: Path) -> None:
    proc, _, control = _start(tmp_path)
    try:
        stats = control_request(control, "stats", 10)
    finally:
        daemon.stop(proc)
    assert stats["matcher"] == "emulated" and "benchmark only" in stats["benchmark_only"]
    assert stats["emulated"]["misses"] == 0


def test_emulated_without_its_files_is_one_line_and_exit_2(tmp_path: Path) -> None:
    flags = daemon.rule_flags(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    cmd = [sys.executable, "-m", "offload.cli", "serve", *flags, "--matcher", "emulated"]
    done = subprocess.run(
        [*cmd, "--endpoint", f"ipc://{tmp_path}/x.sock"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert "--emulate-profile FILE" in done.stderr and len(done.stderr.strip().splitlines()) == 1
