"""Services by thread count, host against a node budget (seed 003, slide 21): the mechanics on
tiny runs, not the seed's ratios."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offload.metrics import threads as T

BENCH = Path(__file__).resolve().parents[2] / "benches" / "metrics_threads.py"


def test_the_services_run_at_any_thread_count() -> None:
    assert T.localkv(1, 0.05, keys_per_thread=50) > 0 and T.localkv(3, 0.05, keys_per_thread=50) > 0
    table = T.particles(4096, batches=8)
    assert table.num_rows == 4096 and len(table.to_batches()) == 8
    for s in ("arrow-filter", "arrow-aggregate"):
        assert T.query(s, 2, 0.02, table) > 0
    # the filter keeps the 1/8 box: about an eighth of uniform positions
    kept = sum(T._filter(b) for b in table.to_batches())
    assert 0.08 < kept / 4096 < 0.17


def test_a_tiny_comparison_on_host_and_node() -> None:
    r = T.compare(("localkv", "arrow-filter"), (1,), seconds=0.05, rows=4096)
    assert r["budgets"][1]["profile"] == "bluefield2" and r["budgets"][1]["threads"] == 1
    assert all(r["cores_used"][p]["localkv"][1] > 0 for p in ("host", "node"))
    for s in ("localkv", "arrow-filter"):
        assert r["host_over_node"][s][1] == pytest.approx(r["host"][s][1] / r["node"][s][1])
    with pytest.raises(ValueError, match="unknown service"):
        T.measure(["raid"], [1], 0.1)
    with pytest.raises(ValueError, match="thread counts"):
        T.measure(["localkv"], [0], 0.1)


def test_the_bench_teaches_and_refuses() -> None:
    h = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and "LocalKV" in h.stdout and "--threads" in h.stdout
    bad = subprocess.run(
        [sys.executable, str(BENCH), "--services", "raid"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "metrics_threads: unknown service" in bad.stderr
