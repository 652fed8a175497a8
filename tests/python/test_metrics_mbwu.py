"""The MBWU (seed 003): plateau and steady-state detection on synthetic series, the $/kWh/m³
arithmetic on hand-computed cases, the seed's case study against its slide, and tiny real runs of
RocksDB and an Arrow scan on this machine's disk."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.metrics import mbwu as M
from offload.metrics.mbwu import procedure
from offload.plan.cost import Item, load_catalog

# ---- plateau ------------------------------------------------------------------------------


def test_plateau_on_hand_made_sweeps() -> None:
    assert M.plateau([100, 180, 250, 255, 240], 0.05) == 2  # 255 is within 5% of 250
    assert M.plateau([100, 100, 100], 0.05) == 0  # flat from the start
    assert M.plateau([100, 200, 400], 0.05) is None  # still rising: no plateau yet
    assert M.plateau([100], 0.05) is None  # one step is no evidence
    assert M.plateau([], 0.05) is None
    assert M.plateau([100, 90, 200], 0.05) == 0  # a drop stops the sweep at the best so far


@given(st.lists(st.floats(0, 1e9), min_size=1, max_size=30), st.floats(0, 1))
def test_plateau_is_the_best_before_a_step_that_gains_too_little(xs: list[float], th: float) -> None:
    p = M.plateau(xs, th)
    if p is None:  # every step beat the one before by more than the threshold
        assert all(b > a * (1 + th) for a, b in itertools.pairwise(xs))
    else:
        assert xs[p + 1] <= xs[p] * (1 + th)
        assert all(b > a * (1 + th) for a, b in itertools.pairwise(xs[: p + 1]))


@given(st.lists(st.floats(1, 1e6), min_size=1, max_size=20))
def test_a_strictly_doubling_sweep_never_plateaus(xs: list[float]) -> None:
    rising = [2.0**i * 10 for i in range(len(xs))]
    assert M.plateau(rising, 0.5) is None


@pytest.mark.parametrize("bad", [[1.0, float("nan")], [1.0, -2.0], [float("inf")]])
def test_plateau_refuses_bad_samples(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        M.plateau(bad)
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        M.plateau([1.0, 2.0], -0.1)


# ---- steady state -------------------------------------------------------------------------


def test_steady_window_skips_the_warm_up() -> None:
    warm = [10.0, 40.0, 70.0, 95.0, 100.0, 102.0, 98.0, 101.0]
    assert M.steady_window(warm, 0.1, 3) == (3, 8)  # 95..102: spread 7 <= 10% of 100
    assert M.steady_window([5.0] * 6, 0.0, 3) == (0, 6)  # flat: all of it, even with no slack
    assert M.steady_window([1.0, 100.0, 1.0, 100.0], 0.1, 2) is None  # noise everywhere
    assert M.steady_window([7.0], 0.1, 1) == (0, 1)
    assert M.steady_window([], 0.1, 1) is None
    assert M.steady_window([0.0, 0.0, 0.0], 0.1, 2) == (0, 3)  # a dead device is steady at 0


@given(st.lists(st.floats(0, 1e6), min_size=0, max_size=40), st.floats(0, 1), st.integers(1, 8))
def test_the_window_is_the_longest_steady_tail(xs: list[float], bound: float, k: int) -> None:
    w = M.steady_window(xs, bound, k)

    def ok(t: list[float]) -> bool:
        s = sorted(t)
        med = (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2
        return max(t) - min(t) <= bound * med

    tails = [i for i in range(len(xs) - k + 1) if ok(xs[i:])]
    if w is None:
        assert not tails
    else:
        assert w == (tails[0], len(xs)) and w[1] - w[0] >= k


@given(st.floats(1, 1e6), st.lists(st.floats(-0.04, 0.04), min_size=5, max_size=30))
def test_noise_within_the_bound_is_steady(level: float, noise: list[float]) -> None:
    xs = [level * (1 + e) for e in noise]  # spread <= 8% of level, median >= 0.96 level
    assert M.steady_window(xs, 0.1, 5) == (0, len(xs))


def test_steady_window_refuses_bad_inputs() -> None:
    with pytest.raises(ValueError, match="bound must be >= 0"):
        M.steady_window([1.0], -1)
    with pytest.raises(ValueError, match="at least 1 sample"):
        M.steady_window([1.0], 0.1, 0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        M.steady_window([1.0, float("nan")])


def test_sweep_stops_at_the_plateau_and_flags_unsteady_steps() -> None:
    table = {1: [50.0] * 8, 2: [10.0, 90.0, 100.0, 100.0, 101.0, 99.0], 4: [102.0] * 6, 8: [500.0] * 6}
    ran: list[int] = []

    def step(n: int) -> list[float]:
        ran.append(n)
        return table[n]

    r = M.sweep(step, [1, 2, 4, 8], threshold=0.05, bound=0.05, min_len=3)
    assert ran == [1, 2, 4]  # 4 gains 2%: the plateau; 8 never runs
    assert r["plateau_reached"] and r["mbwu"] == 100.0 and r["threads_at_mbwu"] == 2
    assert r["steps"][1]["window"] == [2, 6]  # 90 is 10% off and r["steps"][1]["steady"]
    noisy = M.summarize(3, [1.0, 100.0, 1.0, 100.0], 0.1, 2)
    assert not noisy["steady"] and noisy["value"] == 50.5  # median of the second half
    with pytest.raises(ValueError, match="rising"):
        M.sweep(step, [2, 1])
    with pytest.raises(ValueError, match="no samples"):
        M.summarize(1, [], 0.1, 2)


# ---- zipfian keys -------------------------------------------------------------------------


def test_zipf_keys_are_skewed_and_in_range() -> None:
    import numpy as np

    ranks = M.zipf_keys(1000)
    perm = np.random.default_rng(0).permutation(1000)
    ids = M.zipf_ids(np.random.default_rng(1), ranks, perm, 50_000)
    assert ids.min() >= 0 and ids.max() < 1000
    counts = np.bincount(ids, minlength=1000)
    assert counts[perm[0]] == counts.max()  # rank 1 is the hottest key
    assert counts[perm[0]] > 20 * np.median(counts)
    with pytest.raises(ValueError, match="at least one key"):
        M.zipf_keys(0)


# ---- $/MBWU, kWh/MBWU, m³/MBWU ------------------------------------------------------------


def item(id_: str, usd: float, watts: float | None, m3: float | None) -> Item:
    f = None if watts is None else Fraction(watts)
    v = None if m3 is None else Fraction(str(m3))
    return Item(id_, id_, "purchase", 4, Fraction(str(usd)), "x", "x", "2024", "test", None, f, v, "test")


def test_per_mbwu_arithmetic_by_hand() -> None:
    host = item("h", 3000, 200, 0.015)
    r = M.per_mbwu(host, 6.0)
    assert r["usd_per_mbwu"] == pytest.approx(500.0)
    assert r["kwh_per_mbwu"] == pytest.approx(200 * 8760 / 1000 / 6)  # 292 kWh a year per MBWU
    assert r["m3_per_mbwu"] == pytest.approx(0.0025)
    assert M.per_mbwu(item("n", 10, None, None), 2.0) == {
        "usd_per_mbwu": 5.0, "kwh_per_mbwu": None, "m3_per_mbwu": None,
    }  # fmt: skip


def test_reductions_and_implied_ratios_by_hand() -> None:
    c = M.compare(item("h", 3000, 200, 0.015), item("e", 100, 10, 0.0003), 6.0, 0.5)
    # $/MBWU: 500 vs 200 -> 60% less; kWh: 292 vs 175.2 -> 40%; m³: 0.0025 vs 0.0006 -> 76%
    assert c["reduction"]["usd_per_mbwu"] == pytest.approx(0.6)
    assert c["reduction"]["kwh_per_mbwu"] == pytest.approx(0.4)
    assert c["reduction"]["m3_per_mbwu"] == pytest.approx(0.76)
    assert M.reduction(100.0, 150.0) == pytest.approx(-0.5)  # the embedded side needs more
    assert M.reduction(None, 1.0) is None
    # 60% less at MBWUs 6 : 0.5 means the host costs (6 / 0.5) / (1 - 0.6) = 30 times as much
    assert M.implied_ratio(0.6, 6.0, 0.5) == pytest.approx(30.0)


def test_cost_arithmetic_refuses_bad_inputs() -> None:
    with pytest.raises(ValueError, match="> 0 MBWUs"):
        M.per_mbwu(item("h", 1, 1, 1), 0.0)
    hourly = Item("c", "c", "hourly", 4, Fraction(1), "x", "x", "2024", "test")
    with pytest.raises(ValueError, match="compares purchases"):
        M.per_mbwu(hourly, 1.0)
    with pytest.raises(ValueError, match="must be > 0"):
        M.reduction(0.0, 1.0)
    with pytest.raises(ValueError, match="must be < 1"):
        M.implied_ratio(1.0, 2.0, 1.0)


def test_the_seeds_cost_reductions_reproduce_from_its_mbwus_and_33x() -> None:
    r = M.seed_case_study()
    assert r["catalog_host_over_embedded"]["price"] == pytest.approx(33.0, abs=0.01)
    for t in r["tests"]:
        # within 0.6 points: the slide rounds the MBWUs and the ratio ("33x")
        assert t["reduction"]["usd_per_mbwu"] == pytest.approx(t["reported"]["usd_per_mbwu"], abs=0.006)
        assert 32.9 < t["implied_host_over_embedded"]["price"] < 33.5
        assert t["reduction"]["m3_per_mbwu"] is not None and t["reported"]["m3_per_mbwu"] is None
    watts = [t["implied_host_over_embedded"]["watts"] for t in r["tests"]]
    assert watts == pytest.approx([22.0, 23.3, 30.3], abs=0.05)  # no single catalog figure fits all


def test_catalog_specs_are_optional_but_sourced(tmp_path: Path) -> None:
    items = load_catalog()
    assert items["onprem-cpu"].watts is None and items["rockpro64"].watts is not None
    assert all(i.spec_source for i in items.values() if i.watts is not None or i.volume_m3 is not None)
    bad = tmp_path / "c.toml"
    bad.write_text(
        '[[item]]\nid = "x"\nname = "x"\nkind = "purchase"\nvcpus = 1\nunit_usd = 1\nregion = "r"\n'
        'plan = "p"\ndate = "2024"\nsource = "s"\nwatts = 5\n'
    )
    with pytest.raises(Exception, match="spec_source"):
        load_catalog(bad)
    bad.write_text(bad.read_text().replace("watts = 5", 'watts = -5\nspec_source = "s"'))
    with pytest.raises(Exception, match="positive"):
        load_catalog(bad)


# ---- real, tiny runs ----------------------------------------------------------------------


def test_a_tiny_rocksdb_run(tmp_path: Path) -> None:
    layout = M.KvLayout(tmp_path / "kv", 3000, 2)
    pre = M.precondition(layout, overwrite=0.5, rate=20_000)
    assert pre["keys"] == 3000 and pre["overwrites"] == 1500 and pre["bytes_on_disk"] > 3000 * 1024
    assert pre["overwrite_s"] >= 1500 / 20_000 * 0.9  # the rate held the overwrites back
    xs = M.run_kv_step(layout, "ycsb-a", 2, seconds=1.0, bucket_s=0.25)
    assert len(xs) == 4 and all(x > 0 for x in xs)
    slow = M.run_kv_step(layout, "ycsb-c", 1, seconds=1.0, bucket_s=0.5, rate=200)
    assert math.isclose(sum(slow) * 0.5, 200, rel_tol=0.25)  # open loop at 200 ops/s
    with pytest.raises(ValueError, match=r"workers must be in 1\.\.2"):
        M.run_kv_step(layout, "ycsb-a", 3)
    with pytest.raises(ValueError, match="unknown key-value workload"):
        M.run_kv_step(layout, "ycsb-z", 1)
    with pytest.raises(ValueError, match="rate must be > 0"):
        M.run_kv_step(layout, "ycsb-a", 1, rate=0)
    with pytest.raises(ValueError, match="warm-up must be >= 0"):
        M.run_kv_step(layout, "ycsb-a", 1, warmup_s=-1)
    warm = M.run_kv_step(layout, "ycsb-c", 2, seconds=0.5, bucket_s=0.25, warmup_s=0.5)
    assert len(warm) == 2 and all(x > 0 for x in warm)  # the warm-up is run, not counted


def test_a_tiny_arrow_scan(tmp_path: Path) -> None:
    info = M.make_scan_data(tmp_path / "scan", rows=20_000, files=2)
    assert info["rows"] == 20_000 and len(list((tmp_path / "scan").glob("*.parquet"))) == 2
    xs = M.run_scan_step(tmp_path / "scan", threads=2, seconds=0.2)
    assert len(xs) >= 3 and all(x > 0 for x in xs)
    with pytest.raises(ValueError, match="no Parquet files"):
        M.run_scan_step(tmp_path, 1)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        M.run_scan_step(tmp_path / "scan", 0)


def test_plans_are_checked_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown workload ycsb-q"):
        M.Plan(("ycsb-q",), tmp_path).check()
    with pytest.raises(ValueError, match="fewer than the 4 shards"):
        M.Plan(("ycsb-a",), tmp_path, keys=2, threads=(1, 4)).check()
    with pytest.raises(ValueError, match="bucket"):
        M.Plan(("ycsb-a",), tmp_path, seconds=1, bucket_s=2).check()
    if Path("/dev/shm").is_dir() and procedure._tmpfs(Path("/dev/shm")):
        with pytest.raises(ValueError, match="memory file system"):
            M.Plan(("ycsb-a",), Path("/dev/shm/offload-mbwu")).check()


def test_cli_prints_the_case_study_and_refuses_bad_input(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from offload.cli import app

    run = CliRunner().invoke
    r = run(app, ["metrics", "mbwu", "--no-measure", "--json"])
    assert r.exit_code == 0, r.output
    tests = json.loads(r.output)["seed_case_study"]["tests"]
    assert [t["test"] for t in tests] == ["network", "integrated", "disaggregated"]
    r = run(app, ["metrics", "mbwu", "--no-measure"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "64.0%" in r.output and "implied" in r.output, r.output
    for args, msg in (
        (["--workloads", "ycsb-q"], "unknown workload ycsb-q"),
        (["--threads", "4,2"], "rising"),
        (["--warmup", "-1"], "greater than or equal to 0"),  # the option's range
        (["--embedded", "nope"], "unknown profile nope"),
        (["--no-measure", "--plot", str(tmp_path / "p.png")], "needs --measure"),
    ):
        r = run(app, ["metrics", "mbwu", *args])
        assert r.exit_code == 2 and msg in " ".join(r.output.replace("│", " ").split()), (args, r.output)
