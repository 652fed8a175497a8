"""CPU against the accelerator per user request with early stop (seed 000/001, Fig. 10 and §4.2;
offload.serve.earlystop, benches/serve_earlystop.py): what each side checks, where the times
cross, and a short run through a daemon with the emulated FPGA on the example rule set. The
mechanics are tested, not this machine's figures; every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from offload.serve import breakdown, earlystop

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "data" / "examples" / "mct-mini"


def test_invocations_grow_and_cover_the_request() -> None:
    assert earlystop.Policy().chunks(500) == [(0, 64), (64, 192), (192, 448), (448, 500)]
    assert earlystop.Policy(10, 1.0).chunks(25) == [(0, 10), (10, 21), (21, 25)]  # growth 1 still advances
    assert earlystop.Policy().chunks(0) == []


def test_the_cpu_stops_at_the_wanted_valid_answer_and_the_accelerator_at_a_chunk_end() -> None:
    valid = np.array([True] * 70 + [False] * 10 + [True] * 200)
    assert earlystop.cpu_checked(valid, 70) == 70
    assert earlystop.cpu_checked(valid, 71) == 81  # the invalid ones are checked too
    assert earlystop.cpu_checked(valid, 1000) == len(valid)  # never enough: all of them
    assert earlystop.cpu_checked(valid, 0) == 0
    chunks = earlystop.accelerator_chunks(valid, 70, earlystop.Policy())
    assert chunks == [(0, 64), (64, 192)]  # 64 valid after the first: a second invocation
    assert earlystop.accelerator_chunks(valid, 10, earlystop.Policy()) == [(0, 64)]
    assert earlystop.accelerator_chunks(valid, 1000, earlystop.Policy())[-1][1] == len(valid)


def test_the_crossover_is_where_the_accelerator_stays_below_the_cpu() -> None:
    # The CPU costs 1 µs a query, the accelerator 400 µs plus 0.1 µs a query: they cross near 444.
    pts = [(float(x), 1.0 * x, 400 + 0.1 * x) for x in np.geomspace(10, 10_000, 60)]
    c = earlystop.crossover(pts)
    assert c["checked"] == pytest.approx(444, rel=0.15)
    assert earlystop.crossover([(10.0, 1.0, 5.0), (1000.0, 10.0, 50.0)])["checked"] is None
    assert earlystop.crossover([(10.0, 5.0, 1.0), (1000.0, 50.0, 10.0)]).get("always") is True


def test_a_short_run_through_the_emulated_fpga(tmp_path: Path) -> None:
    requests = tmp_path / "requests.csv"
    requests.write_text("REQUEST_ID,FIRST_QUERY,N_QUERIES,WANTED\nR1,0,6,3\nR2,6,0,5\nR3,6,2,10\n")
    lines: list[str] = []
    result = earlystop.run(
        str(MINI / "ruletype.toml"), str(MINI / "rules.csv"), MINI / "queries.csv", requests,
        [breakdown.BACKENDS["erbium"]], ["fast"], earlystop.Policy(2, 2.0), window=8, windows_per_w=1,
        wanted=(2,), repeats=1, say=lines.append,
    )  # fmt: skip
    recs = result["records"]
    assert [r["source"] for r in recs] == ["trace", "trace", "sweep"]  # the empty request is skipped
    for r in recs:
        assert r["accelerator_checked"] >= r["cpu_checked"] and r["invocations"] >= 1
        assert r["erbium_us"] >= 140 * r["invocations"]  # each call holds the profile's 70 + 70 µs at least
        assert r["erbium_one_request_checked"] >= r["cpu_checked"]
        assert r["cpu_fast_match_us"] > 0
    s = result["summary"]
    assert s["trace"]["requests"] == 2 and s["trace"]["extra_queries"] >= 0
    names = {c["name"] for c in s["crossover"]}
    assert {"erbium/fast/trace", "erbium_one_request/fast/sweep"} <= names
    assert result["emulated"]["erbium"]["misses"] == 0
    assert earlystop.plot(result, tmp_path / "e.png").stat().st_size > 1000
    assert json.loads(earlystop.dumps(result)) == result  # one line per record, the same JSON


def test_the_bench_teaches_and_says_what_is_missing_in_one_line(tmp_path: Path) -> None:
    script = ROOT / "benches" / "serve_earlystop.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Fig. 10" in done.stdout
    assert "23%" in done.stdout and "--first-chunk" in done.stdout
    rules = ["--ruletype", str(MINI / "ruletype.toml"), "--rules", str(MINI / "rules.csv")]
    args = [*rules, "--trace", str(tmp_path), "--out", str(tmp_path / "o.json")]  # an empty trace directory
    bad = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert (
        bad.returncode == 2 and bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1
    )
    assert not (tmp_path / "o.json").exists()
