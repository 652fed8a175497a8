"""The seeds' fitted figures beside the ones from their stated inputs (issue 27, item 3): Table 1
and its 3× / 2.5× from the seed's stated 40 % with units rounded up, the fitted variant labelled
fitted; queries per USD at the stated 50 M q/s and at the assumed 20 M; the reuse ratio from the
stated DMA rates and from the back-solved one. The tests check the mechanics (what is computed
from which input, and how it is labelled), not the seed's numbers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest

from offload.plan import cost as c
from offload.probe import presets
from offload.report.plan import cost_section

ROOT = Path(__file__).resolve().parents[2]
TABLE1 = ROOT / "data" / "plans" / "seed-table1.toml"


def offload(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "offload.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_the_stated_table_is_the_scenarios_own_figures_rounded_up() -> None:
    raw = tomllib.loads(TABLE1.read_text())
    catalog = c.load_catalog()
    s = c.load_scenario(TABLE1)
    assert not s.fitted and s.name == "stated inputs" and s.workload.rounding == "up"
    assert s.workload.offload_share == Fraction(2, 5)  # the seed's "up to 40 %", not a back-solved 0.39
    w = raw["workload"]
    hosts = Fraction(w["cpu_servers"]) * (1 - Fraction(str(w["offload_share"])))
    lines = c.cost(s)
    for ln, d in zip(lines, raw["deployment"], strict=True):
        vcpus = catalog[d["item"]].vcpus
        base = hosts if d.get("offload") else Fraction(w["cpu_servers"])
        assert ln.units == math.ceil(base * w["server_vcpus"] / vcpus), d["item"]
        # each cell beside the published one, the difference ours minus it
        x = c.against_published(ln)
        assert x["units"] == d["published"]["units"] and x["units_diff"] == ln.units - d["published"]["units"]
        assert x["total_rel_diff"] == pytest.approx(
            float(ln.total_usd) / (d["published"]["total_musd"] * 1e6) - 1
        )


def test_a_variant_changes_only_its_figures_and_is_labelled() -> None:
    s = c.load_scenario(TABLE1)
    stated, fitted = c.every_variant(s)
    assert fitted.fitted and "fitted" in fitted.name and fitted.variants == ()
    assert (
        fitted.deployments == stated.deployments
        and fitted.workload.cpu_servers == stated.workload.cpu_servers
    )
    assert (fitted.workload.offload_share, fitted.workload.rounding) != (
        stated.workload.offload_share, stated.workload.rounding,
    )  # fmt: skip
    assert fitted.accelerator_qps != stated.accelerator_qps
    assert "assumed" in fitted.accelerator_basis and "stated" in stated.accelerator_basis


def test_published_figures_compare_as_printed_truncated_totals_and_rounded_ratios(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(f'''catalog = "{ROOT / "data" / "prices" / "catalog.toml"}"
[workload]
cpu_servers = 10
server_vcpus = 48
offload_share = 0.5
[accelerator]
queries_per_s = 1_000
[[deployment]]
group = "g"
name = "orig"
item = "aws-c5.12xlarge"
published = {{ units = 10, total_musd = 0.12 }}
[[deployment]]
group = "g"
name = "acc"
item = "aws-f1.2xlarge"
offload = true
published = {{ units = 31, total_musd = 0.3, relative = 2.6, queries_per_usd = 3e6 }}
''')
    orig, acc = c.cost(c.load_scenario(p))
    # 10 × 1.452 × 8,760 = 127,195.2 USD: printed truncated to 2 decimals of a million, 0.12
    x = c.against_published(orig)
    assert x["ours_printed"] == "0.12" and x["printed_matches"] and x["total_rel_diff"] > 0
    # 5 hosts × 6 = 30 f1.2xlarge = 322,350.29 USD a year: "0.3"; 2.53× rounds to 2.5, not 2.6
    y = c.against_published(acc)
    assert (y["units_diff"], y["ours_printed"], y["printed_matches"]) == (-1, "0.3", True)
    assert y["relative_ours_printed"] == "2.5" and not y["relative_printed_matches"]
    assert y["queries_per_usd_rel_diff"] == pytest.approx(1_000 * 3600 / 1.2266 / 3e6 - 1)


def test_one_command_gives_both_variants_the_fitted_one_labelled(tmp_path: Path) -> None:
    r = offload("plan", "cost", str(TABLE1), "--out", str(tmp_path / "cost.json"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "— stated inputs" in out and "— fitted" in out and "Against the published figures" in out
    assert "400 × (1 − 0.4) = 240" in out and "400 × (1 − 0.39) = 244" in out
    # where queries per USD are printed, the rate they assume and whether the seed states it
    assert "one accelerator at full load at 50,000,000 queries/s: stated:" in out
    assert "one accelerator at full load at 20,000,000 queries/s: assumed:" in out
    j = json.loads((tmp_path / "cost.json").read_text())
    assert j["variant"]["fitted"] is False and [v["variant"]["fitted"] for v in j["variants"]] == [True]
    fitted = j["variants"][0]
    assert fitted["variant"]["name"] == "fitted" and fitted["workload"]["offload_share"] == 0.39
    assert "assumed" in fitted["accelerator_basis"] and "stated" in j["accelerator_basis"]
    f1 = next(d for d in j["deployments"] if d["item"] == "aws-f1.2xlarge")
    assert f1["published"]["units"] == 1464 and f1["published"]["units_diff"] == f1["units"] - 1464
    # the report shows both, the fitted one said to be fitted
    page = str(cost_section(j))
    assert "stated inputs (nothing fitted)" in page and "fitted (fitted: back-solved" in page


def test_overrides_drop_the_variants_and_say_so() -> None:
    r = offload("plan", "cost", str(TABLE1), "--json", "--offload-share", "0.3")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["variants"] == [] and "--offload-share 0.3" in j["variant"]["name"]


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (("fitted = true", "fited = true"), "unknown key 'fited'"),
        (('rounding = "nearest"', 'rounding = "down"'), "rounding must be 'up' or 'nearest'"),
        (("units = 1_171,", "units = 1171.5,"), "units must be an integer"),
        (("relative = 2.5", "ratio = 2.5"), "unknown key 'ratio'"),
    ],
)
def test_bad_variants_and_published_figures_are_located(
    tmp_path: Path, edit: tuple[str, str], words: str
) -> None:
    text = TABLE1.read_text().replace(
        '"../prices/catalog.toml"', f'"{ROOT / "data" / "prices" / "catalog.toml"}"'
    )
    assert edit[0] in text
    p = tmp_path / "s.toml"
    p.write_text(text.replace(*edit, 1))
    r = offload("plan", "cost", str(p))
    assert r.returncode == 2 and words in r.stderr and "s.toml:" in r.stderr, r.stderr


def test_the_reuse_ratio_from_the_stated_rates_and_the_fitted_one() -> None:
    p = presets.load()["platforms"]
    dev, shared = p["alpha_data"]["device_read_gbps"], p["xeon_fpga_v1"]["read_gbps"]
    steps = p["alpha_data"]["dma_breakdown_gbps"]
    v = presets.reuse_variants(steps, dev, shared, 7)
    assert [s["step"] for s in v["stated"]] == list(presets.ITERATIVE_DMA_STEPS)
    for s in v["stated"]:  # each from its stated rate, by the formula, beside the seed's 7
        assert s["dma_gbps"] == steps[s["step"]]
        assert s["r_threshold"] == pytest.approx(presets.reuse_threshold(s["dma_gbps"], dev, shared))
        assert s["diff"] == pytest.approx(s["r_threshold"] - 7)
    f = v["fitted"]
    assert f["fitted"] is True and "fitted" in f["label"] and f["r_threshold"] == pytest.approx(7)
    assert f["dma_gbps"] not in steps.values()  # a rate the seed does not state
    r = json.loads(offload("probe", "reuse", "--json").stdout)
    assert [s["dma_gbps"] for s in r["stated"]] == [2.7, 5.2] and r["fitted"]["fitted"] is True
    text = offload("probe", "reuse").stdout
    assert "stated: staged" in text and "stated: vendor stack" in text and "fitted (back-solved)" in text
