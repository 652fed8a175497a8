"""(De)serialization against memcpy (seed 003, slide 39): the mechanics on small tables, not the
seed's figure: round trips give the table back, the sized writer writes the same bytes as the
growing one, every figure is positive and the bench writes its JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from offload.dataservices import particles as P
from offload.metrics import serialization as S

BENCH = Path(__file__).resolve().parents[2] / "benches" / "metrics_serialization.py"


def test_the_sized_writer_writes_the_growing_streams_bytes() -> None:
    table = P.generate(1000, seed=1)
    grown = S.ipc_bytes(table)
    assert S.ipc_size(table) == grown.size
    buf = pa.allocate_buffer(grown.size)
    S.ipc_into(table, buf)
    assert buf.equals(grown)
    assert pa.ipc.open_stream(buf).read_all().equals(table)


def test_timed_repeats_at_least_three_times_and_is_bounded() -> None:
    calls: list[int] = []
    assert S.timed(lambda: calls.append(1), 0.0) >= 0 and len(calls) == 3
    calls.clear()
    S.timed(lambda: calls.append(1), 10.0, max_repeats=7)
    assert len(calls) == 7


def test_a_sweep_measures_every_operation() -> None:
    r = S.sweep([256, 2048], min_seconds=0.0)
    a, b = r["sizes"]
    assert b["bytes"] > a["bytes"] > 256 * 64  # 64 B a row, plus the schema and metadata
    for x in (a, b):
        for fmt in S.FORMATS:
            assert (
                x[f"{fmt}_serialize_s"] > 0 and x[f"{fmt}_deserialize_s"] > 0 and x[f"{fmt}_over_memcpy"] > 0
            )
    with pytest.raises(ValueError, match="row counts"):
        S.sweep([0])


def test_the_bench_teaches_and_writes(tmp_path: Path) -> None:
    run = [sys.executable, str(BENCH)]
    h = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and "memcpy" in h.stdout and "--min-seconds" in h.stdout
    r = subprocess.run([*run, "--rows", "512,1024", "--min-seconds", "0", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "serialization.json").read_text())
    assert [x["rows"] for x in out["sizes"]] == [512, 1024] and out["seed"]["rows"] == 131_072
    assert (tmp_path / "serialization.png").stat().st_size > 10_000
    bad = subprocess.run([*run, "--rows", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "metrics_serialization:" in bad.stderr and "Traceback" not in bad.stderr


def test_the_injection_share_by_hand() -> None:
    """1.25 MB over 10 Gbit/s is 1 ms on the wire; with 0.25 ms to serialize, 80% is transfer."""
    x = {"rows": 1, "bytes": 1_250_000, "arrow_serialize_s": 0.25e-3, "arrow_sized_serialize_s": 1e-3}
    (ten,) = S.injection_shares([x], links=[10.0])
    assert ten["transfer_s"] == pytest.approx(1e-3)
    assert ten["transfer_share"] == {"arrow": pytest.approx(0.8), "arrow_sized": pytest.approx(0.5)}
