"""A what-if kernel made from a GPU machine's measurements (`offload plan preset`) and what-ifs
checked against measured runs (`offload plan check`), on the H200 runs recorded in
benches/results/gpu/. The bundled preset was made from the run with 32-bit codes on the bus
(`rules-gpu-wide.json`), the one the service sweeps it is checked against ran with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload.plan import measured
from offload.plan.calibrate import predict, trace_sizes
from offload.plan.simulate import Costs, load_preset, presets, with_preset

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benches" / "results" / "gpu"
SWEEP = Path(__file__).parent / "data" / "sweep-2cpu"  # a trace (requests.csv) with a recorded sweep
PLAN = [sys.executable, "-m", "offload.cli", "plan"]


def _load(name: str) -> dict:
    return json.loads((GPU / name).read_text())


def test_the_preset_is_the_measured_figures() -> None:
    probe, bench = _load("probe-gpu.json"), _load("rules-gpu-wide.json")
    about, costs = measured.gpu_preset(probe, bench, batch=256)
    g, m = probe["gpu"], bench["matchers"]["gpu"]
    prof = m["device_profile"]
    assert about["status"] == "measured" and "NVIDIA H200" in about["name"]
    assert costs["kernel_on_host"] is False
    assert costs["invoke_s"] == g["launch"]["launch_and_sync_s"]
    h2d, d2h = g["channels"]["gpu/h2d-pinned"]["fit"], g["channels"]["gpu/d2h-pinned"]["fit"]
    assert costs["transfer_latency_s"] == pytest.approx(h2d["latency_s"] + d2h["latency_s"])
    assert costs["transfer_bps"] == h2d["bandwidth_bps"]
    assert prof["bytes_per_query"] < costs["transfer_bytes_per_query"] < prof["bytes_per_query"] + 8
    assert costs["kernel_query_s"] == pytest.approx(1 / m["kernel_queries_per_s"])
    # the floor plus the rate give the measured kernel time at the fitted batch size
    at_256 = costs["kernel_fixed_s"] + 256 * costs["kernel_query_s"]
    assert at_256 == pytest.approx(prof["kernel_s_by_batch"]["256"])
    # the nearest measured size stands in for one that was not measured
    _, c300 = measured.gpu_preset(probe, bench, batch=300)
    assert c300["kernel_fixed_s"] == costs["kernel_fixed_s"]


def test_the_preset_round_trips_through_toml(tmp_path: Path) -> None:
    about, costs = measured.gpu_preset(_load("probe-gpu.json"), _load("rules-gpu-wide.json"))
    about["notes"] = 'quotes " and back\\slashes survive'
    f = tmp_path / "p.toml"
    f.write_text(measured.to_toml(about, costs))
    got_about, got_costs = load_preset(str(f))
    assert got_about == about and got_costs == costs
    # the bundled one was made the same way from the same files
    assert "gpu-h200" in presets()
    assert load_preset("gpu-h200")[1] == costs


def test_missing_measurements_are_said() -> None:
    probe, bench = _load("probe-gpu.json"), _load("rules-gpu-wide.json")
    with pytest.raises(ValueError, match="saw no GPU"):
        measured.gpu_preset({**probe, "gpu": {"present": False}}, bench)
    with pytest.raises(ValueError, match="no gpu device profile"):
        measured.gpu_preset(probe, _load("rules-gpu-nogpu.json"))
    no_fit = json.loads(json.dumps(probe))
    del no_fit["gpu"]["channels"]["gpu/d2h-pinned"]
    with pytest.raises(ValueError, match="d2h-pinned"):
        measured.gpu_preset(no_fit, bench)


def test_check_scores_each_row_against_its_prediction() -> None:
    """Rows whose measured figures are the model's own predictions are off by nothing; a row
    measured at half the predicted throughput is off by +100%."""
    rows = json.loads((SWEEP / "sweep.json").read_text())["rows"][:2]
    costs = with_preset(Costs(**_load("calibration-fast-16cpu.json")["costs"]), load_preset("gpu-h200")[1])
    sizes = trace_sizes(SWEEP)
    exact = [{**r, **predict(r, costs, sizes, 2)} for r in rows]
    r = measured.check(exact, costs, sizes, 2)
    assert r["median_abs_error"] == {"queries_per_s": 0.0, "p50": 0.0, "p99": 0.0}
    half = [{**exact[0], "queries_per_s": exact[0]["queries_per_s"] / 2}]
    assert measured.check(half, costs, sizes, 2)["table"][0]["error"]["queries_per_s"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no rows"):
        measured.check([], costs, sizes, 2)


def test_cli_makes_the_preset_and_checks_a_sweep(tmp_path: Path) -> None:
    out = tmp_path / "gpu.toml"
    a = [
        "preset",
        "--probe",
        str(GPU / "probe-gpu.json"),
        "--bench",
        str(GPU / "rules-gpu-wide.json"),
        "--out",
        str(out),
    ]
    c = subprocess.run([*PLAN, *a], capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stderr
    assert "kernel_fixed_s" in c.stdout and load_preset(str(out))[1] == load_preset("gpu-h200")[1]
    sweep = tmp_path / "sweep.json"
    rows = json.loads((SWEEP / "sweep.json").read_text())["rows"][:2]
    sweep.write_text(json.dumps({"rows": rows}))
    chk = tmp_path / "check.json"
    a = ["check", "--sweep", str(sweep), "--calibration", str(GPU / "calibration-fast-16cpu.json")]
    a += ["--preset", str(out), "--trace", str(SWEEP), "--cpus", "2", "--out", str(chk)]
    c = subprocess.run([*PLAN, *a], capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stderr
    assert "median absolute error over 2 configurations" in c.stdout
    r = json.loads(chk.read_text())
    assert [t["config"] for t in r["table"]] == [row["label"] for row in rows]
    assert r["preset"]["status"] == "measured"
    a = ["preset", "--probe", str(GPU / "rules-gpu.json"), "--bench", str(GPU / "rules-gpu.json")]
    bad = subprocess.run([*PLAN, *a], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode != 0 and "saw no GPU" in bad.stderr
