"""`offload plan cost`: the seed's Table 1 matched cell for cell by the scenario's fitted variant
(its share back-solved, its rounding chosen; the stated-input variant is in
test_plan_stated_vs_fitted.py); the model's properties on random inputs; bad inputs located by file,
line and column."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.plan import cost as c

ROOT = Path(__file__).resolve().parents[2]
TABLE1 = ROOT / "data" / "plans" / "seed-table1.toml"


def offload(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "offload.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def fitted_table1() -> c.Scenario:
    """The scenario's fitted variant: the figures back-solved from the seed's own cells."""
    return next(v for v in c.every_variant(c.load_scenario(TABLE1)) if v.fitted)


def test_the_fitted_variant_matches_the_seeds_table_1_cell_for_cell() -> None:
    lines = c.cost(fitted_table1())
    got = [(ln.group, ln.item.name, ln.units) for ln in lines]
    assert got == [
        ("On-premises", "CPU server", 400),
        ("On-premises", "CPU + Alveo U200", 244),
        ("On-premises", "CPU + Alveo U55c", 244),
        ("AWS", "c5.12xlarge", 400),
        ("AWS", "f1.2xlarge", 1464),
        ("Azure", "F48s v2", 400),
        ("Azure", "NP10s", 1171),
    ]
    # The exact totals (USD; per year for the cloud rows) ...
    assert [ln.total_usd for ln in lines] == [
        4_000_000, 4_880_000, 3_172_000,
        Fraction("5087808"), Fraction("15730703.424"),
        Fraction("4234233.6"), Fraction("10679562.156"),
    ]  # fmt: skip
    assert [ln.per_year for ln in lines] == [False] * 3 + [True] * 4
    # ... and as the seed prints them: millions truncated to its decimals.
    published = ["4", "4.88", "3.17", "5.0", "15.7", "4.2", "10.6"]
    decimals = [len(p.partition(".")[2]) for p in published]
    assert [c.as_published(ln.total_usd, d) for ln, d in zip(lines, decimals, strict=True)] == published
    # 244 = 400 × (1 − 0.39) exactly, and 1,171 is 1,171.2 rounded to the nearest unit.
    assert lines[1].units_exact == 244 and lines[6].units_exact == Fraction("1171.2")
    # "The cost increase of 3x for AWS and 2.5x for Azure over a CPU-only design."
    assert round(float(lines[4].relative or 0), 1) == 3.1 and round(float(lines[6].relative or 0), 1) == 2.5
    # 60 billion queries per USD: 20 M queries/s on an f1.2xlarge, to one significant digit.
    qpu = lines[4].queries_per_usd
    assert qpu is not None and float(f"{qpu:.1g}") == 60e9


def test_cli_prints_the_table_with_its_arithmetic_and_json(tmp_path: Path) -> None:
    r = offload("plan", "cost", str(TABLE1), "--out", str(tmp_path / "cost.json"))
    assert r.returncode == 0, r.stderr
    for shown in ("1,464", "400 × (1 − 0.39) = 244", "244 × 48 / 10 = 1,171.2"):
        assert shown in r.stdout
    assert "Europe (Ireland), 1-year savings plan, 2023-03" in r.stdout
    j = json.loads((tmp_path / "cost.json").read_text())
    assert [d["units"] for d in j["variants"][0]["deployments"]] == [400, 244, 244, 400, 1464, 400, 1171]
    r = offload("plan", "cost", str(TABLE1), "--json", "--offload-share", "0.4", "--rounding", "up")
    assert r.returncode == 0, r.stderr
    units = [d["units"] for d in json.loads(r.stdout)["deployments"]]
    assert units == [400, 240, 240, 400, 1440, 400, 1152]  # 240 × 4.8 = 1,152 exactly


def _scenario(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(f'catalog = "{ROOT / "data" / "prices" / "catalog.toml"}"\n' + body)
    return p


BASE = """
[workload]
requests_per_s = 12000
server_capacity_rps = 30
queries_per_request = [[10, 1], [200, 1]]
server_vcpus = 48
offload_share = 0.4

[accelerator]
queries_per_s = 5_000

[[deployment]]
group = "AWS"
name = "original"
item = "aws-c5.12xlarge"

[[deployment]]
group = "AWS"
name = "co-located"
item = "aws-f1.2xlarge"
offload = true

[[deployment]]
group = "AWS"
name = "network-attached pool"
item = "aws-c5.12xlarge"
pool_item = "aws-f1.2xlarge"
pool_queries_per_s = 20_000_000
"""


def test_workload_rate_accelerator_binding_and_a_separately_scaled_pool(tmp_path: Path) -> None:
    lines = c.cost(c.load_scenario(_scenario(tmp_path, BASE)))
    orig, colo, pool = lines
    assert orig.units == 400  # 12,000 / 30
    # 12,000 requests/s × 105 queries = 1.26 M queries/s; at 5,000 per accelerator 252 are needed,
    # fewer than the 240 × 6 = 1,440 instances the CPU side needs: the CPU side binds.
    assert colo.units == 1440 and colo.binding == "cpu"
    assert any("1,260,000 queries/s" in s for s in colo.steps)
    # The pool: 240 hosts of the original type + ⌈1.26 M / 20 M⌉ = 1 accelerator instance.
    assert (pool.units, pool.pool_units) == (240, 1)
    assert pool.total_usd == (240 * Fraction("1.452") + Fraction("1.2266")) * 8760
    assert pool.relative is not None and pool.relative < 1 < (colo.relative or 0)


def test_slow_accelerators_bind(tmp_path: Path) -> None:
    slow = BASE.replace("queries_per_s = 5_000", "queries_per_s = 500")
    lines = c.cost(c.load_scenario(_scenario(tmp_path, slow)))
    assert lines[1].binding == "accelerator" and lines[1].units == math.ceil(1_260_000 / 500)


@given(
    servers=st.fractions(min_value=Fraction(1, 10), max_value=10**6, max_denominator=1000),
    share=st.fractions(min_value=0, max_value=Fraction(99, 100), max_denominator=1000),
    vcpus=st.integers(1, 256),
    item_vcpus=st.integers(1, 256),
    rounding=st.sampled_from(["up", "nearest"]),
)
def test_units_and_cost_follow_the_model(
    servers: Fraction, share: Fraction, vcpus: int, item_vcpus: int, rounding: str
) -> None:
    item = c.Item("x", "x", "hourly", item_vcpus, Fraction("1.5"), "r", "p", "d", "s")
    w = c.Workload(servers, "given", vcpus, share, None, rounding)
    deployments = [c.Deployment("g", "orig", item), c.Deployment("g", "acc", item, True)]
    lines = c.cost(c.Scenario(None, w, None, deployments))
    for ln, hosts in zip(lines, (servers, servers * (1 - share)), strict=True):
        assert ln.units_exact == hosts * vcpus / item_vcpus
        if rounding == "up":
            assert ln.units_exact <= ln.units < ln.units_exact + 1  # never under-provisions
        else:
            assert abs(ln.units - ln.units_exact) <= Fraction(1, 2)
        assert ln.total_usd == ln.units * Fraction("1.5") * 8760
    assert lines[1].units <= lines[0].units  # offloading never needs more hosts


@pytest.mark.parametrize(
    ("edit", "line", "col", "words"),
    [
        (("offload_share = 0.4", "offload_share = 1.4"), 8, 17, "must be in [0, 1)"),
        (("offload_share = 0.4", "ofload_share = 0.4"), 8, 16, "unknown key 'ofload_share'"),
        (('item = "aws-f1.2xlarge"', 'item = "aws-f2"'), 21, 8, "no item 'aws-f2' in the price catalog"),
        (("server_vcpus = 48", "server_vcpus = 48.5"), 7, 16, "must be a positive integer"),
        (("queries_per_s = 5_000", "queries_per_s = = 5"), 11, 17, "Invalid value"),
    ],
)
def test_bad_input_is_located(tmp_path: Path, edit: tuple[str, str], line: int, col: int, words: str) -> None:
    p = _scenario(tmp_path, BASE.replace(*edit, 1))
    with pytest.raises(c.InputError) as e:
        c.load_scenario(p)
    assert (e.value.line, e.value.column) == (line, col), str(e.value)
    assert words in e.value.message
    r = offload("plan", "cost", str(p))
    assert r.returncode == 2 and f"s.toml:{line}:{col}:" in r.stderr and words in r.stderr


def test_the_commands_overrides_replace_the_workloads_figures_or_name_the_option() -> None:
    s = fitted_table1()
    t = c.with_overrides(s, offload_share=0.5, cpu_servers=300, rounding="nearest")
    assert (t.workload.offload_share, t.workload.cpu_servers, t.workload.rounding) == (
        Fraction(1, 2), Fraction(300), "nearest",
    )  # fmt: skip
    assert "(--cpu-servers)" in t.workload.cpu_servers_text
    assert c.with_overrides(s) == s
    for kw, option in (({"offload_share": 1.0}, "--offload-share"), ({"cpu_servers": 0}, "--cpu-servers"),
                       ({"rounding": "down"}, "--rounding")):  # fmt: skip
        with pytest.raises(ValueError, match=option):
            c.with_overrides(s, **kw)  # type: ignore[arg-type]
    assert c.item_of("aws-c5.12xlarge").vcpus == 48
    with pytest.raises(ValueError, match="no item 'nope' in the price catalog; known: "):
        c.item_of("nope")
