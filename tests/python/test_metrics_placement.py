"""RocksDB's data access by placement (seed 003, slides 45-46 and 50): the arithmetic by hand, a
tiny run on the host and on a quarter-core node, and the bench's help and refusals. Mechanics,
not the seed's 6x."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offload.metrics.mbwu import placement as PL

BENCH = Path(__file__).resolve().parents[2] / "benches" / "metrics_placement.py"


def test_amplification_by_hand() -> None:
    d = {"reads": 30, "updates": 10, "user_bytes": 4000, "read_bytes": 8000, "write_bytes": 4000,
         "cpu_s": 0.002, "seconds": 2.0}  # fmt: skip
    a = PL.amplification(d)
    assert a["amplification"] == pytest.approx(3.0)
    assert (a["read_amplification"], a["write_amplification"]) == (pytest.approx(2.0), pytest.approx(1.0))
    assert a["device_mb_s"] == pytest.approx(0.006) and a["cpu_us_per_op"] == pytest.approx(50.0)
    none = PL.amplification(d | {"user_bytes": 0, "reads": 0, "updates": 0})
    assert none["amplification"] is None and none["cpu_us_per_op"] is None


def test_a_tiny_run_in_both_placements(tmp_path: Path) -> None:
    r = PL.compare(tmp_path, keys=3000, workers=(1,), seconds=0.5, warmup_s=0.0, memtable=1 << 20)
    host, emb = (r["placements"][p]["steps"][0] for p in PL.PLACEMENTS)
    for s in (host, emb):
        assert s["ops"] > 0 and s["user_mb"] > 0 and s["cpu_us_per_op"] > 0
        assert s["device_write_mb"] >= 0 and s["device_read_mb"] >= 0
    assert emb["mbwus"] == pytest.approx(emb["value"] / r["mbwu_host"])
    assert r["placements"]["embedded"]["budget"]["profile"] == "bluefield2"
    assert r["gain_with_one_more_worker"] is None  # one worker count: no gain to give
    assert not (tmp_path / "placement").exists()  # the key space is removed
    with pytest.raises(ValueError, match="rising"):
        PL.compare(tmp_path, workers=(2, 1))


def test_the_bench_teaches_and_refuses() -> None:
    h = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and "amplification" in h.stdout and "--memtable-mib" in h.stdout
    bad = subprocess.run(
        [sys.executable, str(BENCH), "--workers", "2,1"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "metrics_placement: worker counts" in bad.stderr
