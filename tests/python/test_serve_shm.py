"""`offload serve bench` over shared memory (`shm://`): the daemon (`offload serve`, beside an
IPC endpoint) answers every request the Rust generator sends through the rings, the socket file
is its owner's only (0600), and the daemon's CPU shows the shared-memory front end as its own
part. Every wait is bounded (the run ends at its duration + drain)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

from typer.testing import CliRunner

from offload.cli import app
from offload.serve import daemon

MINI = Path(__file__).resolve().parents[2] / "data" / "examples" / "mct-mini"


def test_bench_over_shared_memory_is_answered_and_counted(tmp_path: Path) -> None:
    sock = tmp_path / f"shm-{time.monotonic_ns()}.sock"
    endpoint, control = f"shm://{sock}", f"ipc://{tmp_path}/control.sock"
    flags = [
        *daemon.rule_flags(MINI / "ruletype.toml", MINI / "rules.csv"),
        "-e",
        endpoint,
        "-e",
        f"ipc://{tmp_path}/d.sock",
    ]
    proc = daemon.start(*flags, "--workers", "1", "--kernels", "0", "--control", control, timeout_s=30)
    try:
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        argv = ["serve", "bench", "-e", endpoint, "-c", control, "--ruletype", str(MINI / "ruletype.toml"),
                "--rules", str(MINI / "rules.csv"), "--queries", str(MINI / "queries.csv"),
                "--duration", "0.4", "--drain", "2", "--rate", "300", "--json"]  # fmt: skip
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 0, r.output
        result = json.loads(r.stdout)
        assert result["status"] == {"Ok": result["sent"]} and result["sent"] >= 100, result
        assert result["unanswered"] == 0 and result["unsent"] == 0, result
        cpu = result["daemon_cpu"]
        assert cpu["ns_per_query"]["shm"] > 0 and cpu["queries"] > 0, cpu
    finally:
        daemon.stop(proc)
    assert not sock.exists()
