"""p = w = k scaled together (seed 000/001, Fig. 5; `offload serve sweep --together`): the grid it
makes, the series it reports against its first step, its plot, and a short run of two steps
through real daemons on the example rule set. Every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload.serve import sweep as sw
from offload.serve.grid import Deployment, Policy

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "data" / "examples" / "mct-mini"


def _row(n: int, qps: float, p50: float) -> dict:
    cfg = sw.Config(Deployment(n, n, n))
    return {
        **cfg.deployment.fields(),
        "label": cfg.label(),
        "queries_per_s": qps,
        "p50_us": p50,
        "p99_us": 2 * p50,
    }


def test_together_scales_p_w_and_k_as_one() -> None:
    configs = sw.together([1, 2, 4], [1], [Policy()])
    shapes = [(c.deployment.p, c.deployment.w, c.deployment.k, c.deployment.e) for c in configs]
    assert shapes == [(1, 1, 1, 1), (2, 2, 2, 1), (4, 4, 4, 1)]
    assert [c.label() for c in configs][-1] == "4p 4w 4k 1e per-req raw ipc fast"


def test_the_series_is_read_against_its_first_step(tmp_path: Path) -> None:
    rows = [_row(1, 1e6, 100.0), _row(2, 1.6e6, 120.0), _row(4, 1.7e6, 200.0)]
    assert sw.is_together(rows) and not sw.is_together(rows[:1])
    assert not sw.is_together([*rows, {**rows[0], "w": 2}])
    steps = sw.scaling(rows)
    assert [s["n"] for s in steps] == [1, 2, 4]
    assert steps[1]["throughput_vs_first"] == pytest.approx(1.6)
    assert steps[2]["p50_vs_first"] == pytest.approx(2.0)
    summary = sw.write(rows, tmp_path / "t.json", 5000, 1e6)
    assert summary["together"] == steps
    assert json.loads((tmp_path / "t.json").read_text())["together"] == steps
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_sweep_together_runs_two_steps(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "queries.csv").write_text((MINI / "queries.csv").read_text())
    (trace / "requests.csv").write_text("REQUEST_ID,FIRST_QUERY,N_QUERIES,WANTED\nR1,0,5,3\nR2,5,3,2\n")
    out = tmp_path / "fig5.json"
    cmd = [sys.executable, "-m", "offload.cli", "serve", "sweep", "--ruletype", str(MINI / "ruletype.toml"),
           "--rules", str(MINI / "rules.csv"), "--trace", str(trace), "--together", "1,2", "--batch", "0",
           "--duration", "0.3", "--out", str(out), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert [r["label"] for r in summary["rows"]] == [
        "1p 1w 1k 1e per-req raw ipc fast",
        "2p 2w 2k 1e per-req raw ipc fast",
    ]
    assert [s["n"] for s in summary["together"]] == [1, 2]
    assert summary["together"][0]["throughput_vs_first"] == 1.0
    assert out.with_suffix(".png").exists()
