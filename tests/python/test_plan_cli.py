"""`offload plan ...` as a user meets it: bounded simulations, one-line located errors, one
vocabulary with `offload serve inject` (-p/--processes, the daemon's 200 µs batching timeout),
`--json` on every command that reports, and progress on stderr where it takes a while."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offload.plan import cost as c
from offload.plan import simulate as sim

ROOT = Path(__file__).resolve().parents[2]
SWEEP = Path(__file__).parent / "data" / "sweep-2cpu"  # a trace (requests.csv) with a recorded sweep
CAL = ROOT / "benches" / "results" / "calibration-100k.json"
GPU = ROOT / "benches" / "results" / "gpu"


# progress lines in a pipe from the start, not after 2 s of silence
PROGRESS = {**os.environ, "OFFLOAD_PROGRESS_AFTER_S": "0"}


def plan(*args: str, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "offload.cli", "plan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


# ---- simulate: nothing to simulate, bounded, meaningless results refused or flagged ----------


def test_simulate_without_any_stage_cost_says_what_to_give() -> None:
    t0 = time.monotonic()
    line = one_line_error(plan("simulate", "-p", "2"))
    assert time.monotonic() - t0 < 20
    assert "--costs" in line and "--calibration" in line and "--preset" in line


def test_a_simulation_too_large_stops_at_its_documented_limit(tmp_path: Path) -> None:
    costs = tmp_path / "c.toml"
    costs.write_text("[costs]\nkernel_query_s = 1e-9\n")
    t0 = time.monotonic()
    quiet = {**os.environ, "OFFLOAD_PROGRESS_AFTER_S": "60"}  # no progress line before the error
    args = ["simulate", "--costs", str(costs), "-p", "2", "--max-requests", "5000"]
    line = one_line_error(plan(*args, env=quiet))
    assert time.monotonic() - t0 < 30
    assert "5,000 requests" in line and "--duration" in line and "--max-requests" in line
    # the model itself: the same limit, as a ValueError that says so
    with pytest.raises(sim.SimulationLimit, match="5,000 requests"):
        sim.simulate(sim.Pipeline(p=2), sim.Costs(kernel_query_s=1e-9), sim.Load(max_requests=5_000))


def test_zero_service_times_are_refused(tmp_path: Path) -> None:
    costs = tmp_path / "c.toml"
    costs.write_text("[costs]\nkernel_query_s = 0\n")
    line = one_line_error(plan("simulate", "--costs", str(costs), "-p", "2", "--duration", "0.001"))
    assert "takes no time" in line


def test_too_few_requests_for_a_percentile_are_flagged(tmp_path: Path) -> None:
    costs = tmp_path / "c.toml"
    costs.write_text("[costs]\nkernel_query_s = 1e-3\n")  # 1,000 requests/s
    saved = tmp_path / "sim.json"  # --out: the same JSON, written whole (as every plan command does)
    r = plan("simulate", "--costs", str(costs), "--duration", "0.03", "--json", "--out", str(saved))
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert json.loads(saved.read_text()) == j
    assert 10 <= j["requests"] < 100
    assert j["latency_s"]["p99"] is None and j["latency_s"]["p50"] == pytest.approx(1e-3)
    assert any("p99" in w and "100" in w for w in j["warnings"])
    text = plan("simulate", "--costs", str(costs), "--duration", "0.03")
    assert text.returncode == 0 and "p99 n/a" in text.stdout and "warning" in text.stdout


# ---- located errors, one line, exit 2 ---------------------------------------------------------

SCENARIO = """\
[workload]
cpu_servers = 400
server_vcpus = 48
offload_share = 0.39
hours_per_year = 8760

[[deployment]]
group = "AWS"
name = "original"
item = "aws-c5.12xlarge"

[[deployment]]
group = "AWS"
name = "ERBIUM"
item = "aws-f1.2xlarge"
offload = true
"""


@pytest.mark.parametrize(
    ("edit", "line", "words"),
    [
        (("offload_share = 0.39", 'offload_share = "lots"'), 4, "expected a number"),
        (("hours_per_year = 8760", 'hours_per_year = "all"'), 5, "expected a positive integer"),
        (("offload = true", 'offload = "yes"'), 16, "expected true or false"),
        (('name = "original"', "name = 3"), 9, "expected a string"),
        (('item = "aws-c5.12xlarge"', "item = 3"), 10, "expected a string"),
        (('group = "AWS"', "group = [1]"), 8, "expected a string"),
    ],
)
def test_a_scenario_field_of_the_wrong_type_is_located(
    tmp_path: Path, edit: tuple[str, str], line: int, words: str
) -> None:
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.replace(*edit, 1))
    with pytest.raises(c.InputError) as e:
        c.load_scenario(p)
    assert e.value.line == line and words in e.value.message, str(e.value)
    err = one_line_error(plan("cost", str(p)))
    assert f"s.toml:{line}:" in err and words in err


def test_a_whatif_preset_field_of_the_wrong_type_is_located(tmp_path: Path) -> None:
    p = tmp_path / "w.toml"
    p.write_text("[about]\nname = 3\n\n[costs]\ninvoke_s = 1e-6\n")
    with pytest.raises(c.InputError, match=r"w.toml:2:\d+: expected a string"):
        sim.load_preset(str(p))
    p.write_text('[about]\nname = "x"\n\n[costs]\ninvoke_s = "fast"\n')
    err = one_line_error(plan("simulate", "--preset", str(p), "--duration", "0.01"))
    assert "w.toml:5:" in err and "expected a number" in err


# ---- one vocabulary ---------------------------------------------------------------------------


def test_processes_is_spelled_as_injects_and_the_old_spelling_still_works(tmp_path: Path) -> None:
    costs = tmp_path / "c.toml"
    costs.write_text("[costs]\nkernel_query_s = 1e-4\n")
    runs = {}
    for flag in ("-p", "--processes", "--p"):
        r = plan("simulate", "--costs", str(costs), flag, "3", "--duration", "0.05", "--json")
        assert r.returncode == 0, r.stderr
        runs[flag] = json.loads(r.stdout)["pipeline"]["p"]
    assert runs == {"-p": 3, "--processes": 3, "--p": 3}
    for cmd in ("simulate", "recommend", "fleet"):
        h = plan(cmd, "--help", env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        assert "--processes" in h.stdout and "--p " not in h.stdout, cmd


def test_the_batching_timeout_defaults_to_the_daemons() -> None:
    import re

    src = (ROOT / "crates" / "serve" / "src" / "config.rs").read_text()  # the daemon's settings
    assert re.search(
        r'default_value = "200"[^\]]*\)\]\s*pub batch_timeout_us', src
    )  # its default, plan's too
    assert sim.Pipeline().batch_timeout_s == pytest.approx(200e-6)
    h = plan("simulate", "--help", env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert "[default: 200.0]" in h.stdout.split("--timeout-us")[1].split("--queue")[0]
    from offload.plan import calibrate as cal
    from offload.serve.grid import DAEMON_BATCH_TIMEOUT_US

    assert DAEMON_BATCH_TIMEOUT_US == 200  # a row that says no timeout had the daemon's
    assert cal.pipeline_of({"p": 1, "w": 1, "k": 1, "e": 1, "batch_max_queries": 64}, 2).batch_timeout_s == (
        pytest.approx(200e-6)
    )


# ---- --json and progress ----------------------------------------------------------------------


def test_recommend_prints_json_and_shows_progress(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "rec.json"
    args = ["recommend", "--calibration", str(CAL), "--trace", str(SWEEP), "-p", "1,2", "--w", "1"]
    args += ["--k", "1", "--p99-us", "5000", "--out", str(out), "--json"]
    r = plan(*args, timeout=120, env=PROGRESS)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert len(j["rows"]) == 2 and j["best_under_p99"]["config"] is not None
    assert json.loads(out.read_text())["pareto"] == j["pareto"] and out.with_suffix(".png").exists()
    assert "simulating" in r.stderr  # progress, on stderr


def test_fleet_shows_progress(tmp_path: Path) -> None:
    args = ["fleet", "--calibration", str(CAL), "--trace", str(SWEEP), "--item", "aws-c5.12xlarge"]
    args += ["--requests-per-s", "1e5", "-p", "4", "--w", "2", "--k", "1", "--json"]
    r = plan(*args, timeout=120, env=PROGRESS)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["nodes"] >= 1
    assert "simulating one node" in r.stderr


def test_preset_and_check_print_json(tmp_path: Path) -> None:
    out = tmp_path / "gpu.toml"
    args = ["preset", "--probe", str(GPU / "probe-gpu.json"), "--bench", str(GPU / "rules-gpu-wide.json")]
    r = plan(*args, "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["costs"] == sim.load_preset(str(out))[1] and j["about"]["status"] == "measured"
    sweep = tmp_path / "sweep.json"
    rows = json.loads((SWEEP / "sweep.json").read_text())["rows"][:1]
    sweep.write_text(json.dumps({"rows": rows}))
    args = ["check", "--sweep", str(sweep), "--calibration", str(GPU / "calibration-fast-16cpu.json")]
    args += ["--preset", str(out), "--trace", str(SWEEP), "--cpus", "2", "--out", str(tmp_path / "k.json")]
    r = plan(*args, "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [t["config"] for t in j["table"]] == [rows[0]["label"]]
    assert json.loads((tmp_path / "k.json").read_text()) == j
