"""The end-to-end breakdown by request size (seed 000/001, Fig. 2; offload.serve.breakdown,
benches/serve_breakdown.py): how a reply's stages become categories, where work overtakes
movement, and a short run through real daemons (the CPU matcher and the emulated device) on the
example rule set. The mechanics are tested, not this machine's figures; every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload.serve import breakdown

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "data" / "examples" / "mct-mini"


def test_a_device_reply_splits_into_invocation_copies_and_kernel() -> None:
    stages = {"queue": 2_000, "encode": 10_000, "kernel_queue": 3_000, "match": 150_000, "h2d": 1_000,
              "kernel": 70_000, "d2h": 100, "reply": 500}  # fmt: skip
    c = breakdown.categories(stages, rtt_s=300e-6, client_s=20e-6)
    assert c["compute"] == 70.0 and c["h2d"] == 1.0 and c["d2h"] == 0.1
    assert c["invocation"] == pytest.approx(150.0 - 71.1)
    assert c["queues"] == 5.0 and c["encode"] == 10.0 and c["reply"] == 0.5 and c["client"] == 20.0
    assert c["zeromq"] == pytest.approx(300.0 - 165.5)  # the round trip less the server's stages
    # The categories other than the client's add up to the round trip.
    assert sum(v for k, v in c.items() if k != "client") == pytest.approx(300.0)
    # An emulated device's launch is its profile's; the rest of its call is the emulation's own.
    e = breakdown.categories(stages, rtt_s=300e-6, client_s=20e-6, invoke_us=70.0)
    assert e["invocation"] == 70.0 and e["emulation"] == pytest.approx(150.0 - 71.1 - 70.0)
    assert c["emulation"] == 0.0
    assert breakdown.BACKENDS["erbium"].invoke_us() == pytest.approx(70.0)
    assert breakdown.BACKENDS["fast"].invoke_us() is None


def test_a_cpu_reply_has_no_device_parts_and_its_match_is_the_compute() -> None:
    c = breakdown.categories({"encode": 5_000, "match": 8_000, "reply": 100}, rtt_s=50e-6, client_s=0.0)
    assert c["compute"] == 8.0 and c["invocation"] == c["h2d"] == c["d2h"] == 0.0
    late = breakdown.categories({"match": 80_000}, rtt_s=10e-6, client_s=0.0)
    assert late["zeromq"] == 0.0  # never negative


def _row(size: int, movement: float, work: float) -> dict:
    both = {"movement_us": {"p50": movement, "p90": movement}, "work_us": {"p50": work, "p90": work}}
    return {"size": size, **both, "zeromq_share": movement / (movement + work)}


def test_work_dominates_from_the_size_after_which_it_stays_at_or_above_movement() -> None:
    sizes = [(1, 10), (64, 120), (256, 90), (4096, 300), (65536, 900)]
    rows = [_row(size, 100, work) for size, work in sizes]
    assert breakdown.crossover(rows) == 4096  # 64 crosses, but 256 falls back
    s = breakdown.summarize(rows)
    assert s["work_dominates_from"] == 4096 and s["movement_dominates_up_to"] == 256
    assert s["zeromq_share_first"] == pytest.approx(100 / 110)
    assert s["zeromq_share_last"] == pytest.approx(0.1)
    assert breakdown.crossover([_row(1, 100, 10), _row(2, 100, 20)]) is None


def test_windows_are_distinct_and_inside_the_file() -> None:
    assert breakdown.windows(1000, 100, 4) == [0, 225, 450, 675]
    assert breakdown.windows(9, 64, 8) == [0]  # larger than the file: one window, the queries repeat
    with pytest.raises(ValueError):
        breakdown.windows(0, 1, 1)


def test_a_short_sweep_through_the_cpu_matcher_and_the_emulated_fpga(tmp_path: Path) -> None:
    backends = [breakdown.BACKENDS["fast"], breakdown.BACKENDS["erbium"]]
    budget = breakdown.Budget(iterations=5, seconds=1.0, min_iterations=2, warmup=1)
    lines: list[str] = []
    result = breakdown.run(str(MINI / "ruletype.toml"), str(MINI / "rules.csv"), MINI / "queries.csv",
                           backends, sizes=[1, 16], budget=budget, say=lines.append)  # fmt: skip
    assert [b["name"] for b in result["backends"]] == ["fast", "erbium"] and len(lines) == 4
    fast, erbium = result["backends"]
    for b in (fast, erbium):
        assert [r["size"] for r in b["rows"]] == [1, 16]
        for r in b["rows"]:
            assert r["iterations"] == 5 and r["round_trip_us"]["p50"] > 0
            assert all(v["p50"] >= 0 for v in r["categories_us"].values())
            assert sum(r["shares"].values()) == pytest.approx(1.0)
    assert all(r["categories_us"]["h2d"]["p50"] == 0 for r in fast["rows"])
    # The emulated ERBIUM holds every call at least its profile's kernel floor (70 µs).
    assert all(r["categories_us"]["compute"]["p50"] >= 70 for r in erbium["rows"])
    assert erbium["emulated"]["misses"] == 0 and erbium["profile"] == "data/plans/whatif/erbium-fpga.toml"
    assert all("late_batches" in r["emulated"] for r in erbium["rows"])
    png = breakdown.plot(result, tmp_path / "b.png")
    assert png.stat().st_size > 1000
    json.dumps(result)  # the result is JSON as it is


def test_the_bench_teaches_and_refuses_unknown_backends() -> None:
    script = ROOT / "benches" / "serve_breakdown.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Fig. 2" in done.stdout and "erbium" in done.stdout
    bad = subprocess.run(
        [sys.executable, str(script), "--ruletype", "x", "--rules", "x", "--queries", "x", "--out", "x",
         "--backends", "fpga"], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "unknown backend fpga" in bad.stderr
    args = ["--ruletype", "nope.xml", "--rules", "x", "--queries", "x", "--out", "x"]
    missing = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.startswith("error: nope.xml")
    assert len(missing.stderr.strip().splitlines()) == 1
