"""Host-to-device throughput by query batch from a recorded probe (seed 000/001, Fig. 9;
offload.serve.h2d, benches/serve_h2d_curve.py): payloads restated as query batches, shares of
the link read off nvidia-smi, and a probe without a GPU refused. No GPU is needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload.serve import h2d

ROOT = Path(__file__).resolve().parents[2]


def _probe(points: list[tuple[int, float]], smi: str = "NVIDIA H200, 5, 16") -> dict:
    pts = [{"bytes": b, "bandwidth_bps": bw} for b, bw in points]
    return {
        "date": "d",
        "gpu": {"device": "X", "nvidia_smi": smi, "channels": {h2d.CHANNEL: {"points": pts}}},
    }


def test_payloads_become_query_batches_with_their_share_of_the_link() -> None:
    r = h2d.curve(_probe([(64, 1e7), (4 * 2**20, 31.5e9), (16 * 2**20, 45e9)]))
    assert r["link_bps"] == pytest.approx(63.0e9, rel=1e-3) and r["link"].startswith("PCIe Gen5 x16")
    at = r["at_seed_batch"]
    assert at["queries"]["64"] == 65536 and at["queries"]["48"] == pytest.approx(4 * 2**20 / 48)
    assert at["share_of_link"] == pytest.approx(0.5, rel=1e-2) and at["share_of_peak"] == pytest.approx(0.7)
    assert r["points"][0]["queries"]["64"] == 1


def test_an_unreadable_link_leaves_the_shares_of_the_link_out() -> None:
    r = h2d.curve(_probe([(64, 1e7)], smi="unknown"))
    assert r["link_bps"] is None and "share_of_link" not in r["points"][0]
    gen4 = h2d.link_bps("NVIDIA A100, 4, 16")
    assert gen4 == (pytest.approx(31.5e9, rel=1e-3), "PCIe Gen4 x16 (31.5 GB/s)")


def test_a_probe_without_a_gpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no gpu/h2d-pinned"):
        h2d.curve({"gpu": {"present": False}})
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"gpu": {"present": False}}))
    script = ROOT / "benches" / "serve_h2d_curve.py"
    args = ["--probe", str(probe), "--out", str(tmp_path / "o.json")]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no gpu/h2d-pinned channel" in done.stderr
    assert not (tmp_path / "o.json").exists()


def test_the_recorded_curve_draws(tmp_path: Path) -> None:
    probe = ROOT / "benches" / "results" / "gpu" / "probe-gpu.json"
    r = h2d.curve(json.loads(probe.read_text()))
    assert r["at_seed_batch"] is not None and 0 < r["at_seed_batch"]["share_of_link"] < 1
    assert h2d.plot(r, tmp_path / "h.png").stat().st_size > 1000
