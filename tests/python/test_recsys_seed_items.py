"""The mechanics of issue 27's seed-002 experiments (not the seed's numbers): Table VI beside the
seed's (`fpga.resource_table`, `offload recsys resources`), Fig. 9's composition run in software
(`fpga.compose`), the batch-size sweep of Figs. 12/13 and the dram probe of Fig. 15
(`sweeps`), Fig. 14's two sets of trace constants, their plots, and the scripts' --help."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from offload.cli import app
from offload.recsys import bench as B
from offload.recsys import engine as E
from offload.recsys import plots as P
from offload.recsys import sweeps as S
from offload.recsys import traces as T
from offload.recsys.fpga import compose as C
from offload.recsys.fpga import resource_table as RT
from offload.recsys.models import SPECS

ROOT = Path(__file__).resolve().parents[2]
INPROC = B.RunOptions(device="in-process")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> E.ModelDir:
    return E.create(tmp_path_factory.mktemp("rmc3") / "m", SPECS["rmc3"], [2001] * 10, seed=5)


# ---------------------------------------------------------------- Table VI


def test_table_vi_rows_put_ours_beside_the_seeds() -> None:
    r = RT.report()
    assert [(x["model"], x["unit"]) for x in r["rows"]] == [
        (m, u) for m in ("RMC1", "RMC2", "RMC3") for u in ("MLP-naïve", "MLP", "MLP-op")
    ]
    for row in r["rows"]:
        for k in RT.RESOURCES:
            assert row["ours_over_paper"][k] == pytest.approx(row["ours"][k] / row["paper"][k])
            assert row["ours_minus_paper"][k] == pytest.approx(row["ours"][k] - row["paper"][k])
        assert set(row["overflows"]) == set(row["paper_overflows"]) == {"XC7A200T", "XCVU9P"}
    # the seed's own Table VI against the parts: RMC3 fits the low-end FPGA only as MLP-op
    rmc3 = {x["unit"]: x["paper_overflows"]["XC7A200T"] for x in r["rows"] if x["model"] == "RMC3"}
    assert rmc3["MLP-op"] == [] and rmc3["MLP-naïve"] and rmc3["MLP"]
    assert r["verdict"] == "deviation" and "not synthesis" in r["why"]
    assert "not used to set them" in r["provenance"] and "fmul 3 DSP / 321 LUT / 143 FF" in r["provenance"]
    d = r["distance"]
    assert d["cells"] == 36 and 0 <= d["cells_within_10pct"] <= 36 and d["median_factor"] >= 1


def test_table_vi_provenance_follows_the_costs() -> None:
    from offload.recsys.fpga import CostModel, OpCost

    r = RT.report(cost=CostModel(fmul=OpCost(dsp=1, lut=1, ff=1)))
    assert r["provenance"].startswith("operator costs given by the caller")


def test_rmc3_speedup_is_the_designs_throughput_ratio() -> None:
    sp = RT.rmc3_speedup()
    assert sp["paper"] == 3.5
    assert sp["ours"] == pytest.approx(sp["mlp_op"]["samples_per_s"] / sp["mlp_naive"]["samples_per_s"])
    assert sp["naive_cycles_needed_for_paper"] == pytest.approx(3.5 * sp["mlp_op"]["cycles_per_sample"])
    assert sp["mlp_naive"]["dram_layer"]["name"] == "L_b0"


def test_cli_resources_json_and_table(tmp_path: Path) -> None:
    out = tmp_path / "t6.json"
    r = CliRunner().invoke(app, ["recsys", "resources", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(out.read_text())
    text = CliRunner().invoke(app, ["recsys", "resources"])
    assert text.exit_code == 0 and "RMC3 MLP-op ÷ MLP-naïve" in text.output and "seed" in text.output
    bad = CliRunner().invoke(app, ["recsys", "resources", "--composition", "max"])
    assert bad.exit_code == 2 and "unknown composition" in bad.output


# ---------------------------------------------------------------- Fig. 9: composition


def test_scan_patterns() -> None:
    assert C.scans(4, "same") == ["row"] * 4
    assert C.scans(3, "alternating") == ["column", "row", "column"]
    with pytest.raises(ValueError, match="unknown pattern"):
        C.scans(2, "diagonal")  # type: ignore[arg-type]


def test_alternating_scan_overlaps_the_pair_and_computes_the_layers() -> None:
    chain = [C.ChainLayer("a", 32, 16, 4, 2), C.ChainLayer("b", 16, 8, 2, 4)]
    f = C.formulas(chain, ii=8)
    assert f == {"sum_of_layers": 64 * 8 + 16 * 8, "sum_of_pair_max": 64 * 8, "slowest_layer": 64 * 8}
    same = C.run(chain, "same", samples=4, ii=8)
    alt = C.run(chain, "alternating", samples=4, ii=8)
    # (a) the next layer waits for the last stripe: about the sum; (b) about the slower layer
    assert f["sum_of_pair_max"] < same["latency_cycles"] <= f["sum_of_layers"]
    assert f["sum_of_pair_max"] <= alt["latency_cycles"] < same["latency_cycles"]
    # a stream of samples: each layer has its own kernel, so both run at the slowest layer's pace
    assert same["interval_cycles"] == alt["interval_cycles"] == f["slowest_layer"]
    assert same["max_abs_diff"] < 1e-5 and alt["max_abs_diff"] < 1e-5
    assert set(same["finish"]) == {"a", "b"} and len(same["finish"]["a"]) == 4


def test_composition_run_on_given_weights() -> None:
    chain = [C.ChainLayer("a", 3, 2, 2, 1)]
    w = [np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)]
    x = np.array([[1, 1, 1]], dtype=np.float32)
    r = C.run(chain, "same", weights=w, inputs=x, ii=1)
    assert r["latency_cycles"] == 4 and r["max_abs_diff"] == 0.0  # 2 stripes x 2 blocks, 1 cycle each


def test_composition_refuses_bad_chains() -> None:
    with pytest.raises(ValueError, match="gives 16 outputs but b reads 8"):
        C.run([C.ChainLayer("a", 8, 16, 2, 2), C.ChainLayer("b", 8, 4, 2, 2)], "same")
    with pytest.raises(ValueError, match="block steps"):
        C.run([C.ChainLayer("a", 4096, 4096, 1, 1)], "same")


def test_composition_report_on_a_table_iii_model() -> None:
    from offload.recsys.fpga import TABLE_III

    r = C.report({"RMC1": TABLE_III["RMC1"]}, samples=2)
    chains = r["models"]["RMC1"]["chains"]
    assert set(chains) == {"bottom", "top"}
    assert [x["name"] for x in chains["bottom"]["layers"]] == ["L_b0", "L_b1", "L_b"]
    assert chains["bottom"]["latency_same_over_alternating"] > 1


def test_cli_composition(tmp_path: Path) -> None:
    out = tmp_path / "f9.json"
    args = ["recsys", "composition", "--models", "rmc1", "--samples", "2", "--out", str(out)]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(out.read_text()) and "RMC1" in json.loads(r.stdout)["models"]
    text = CliRunner().invoke(app, args[:-2])
    assert text.exit_code == 0 and "RMC1 kernels" in text.output and "one sample" in text.output
    bad = CliRunner().invoke(app, ["recsys", "composition", "--models", "RMC9"])
    assert bad.exit_code == 2 and "unknown model" in bad.output


# ---------------------------------------------------------------- Figs. 12/13: batch size


def test_device_mlp_at_charges_the_mlp_once_per_batch() -> None:
    one, four = S.device_mlp_at(SPECS["rmc3"], 1), S.device_mlp_at(SPECS["rmc3"], 4)
    # the same design; the stages per batch do not grow with the batch, the flash reads do
    assert one["cycles_per_batch"]["bottom"] == four["cycles_per_batch"]["bottom"]
    assert four["cycles_per_batch"]["flash"] >= 4 * one["cycles_per_batch"]["flash"] - 4
    assert four["per_sample"][0] == math.ceil(four["cycles_per_batch"]["bottom"] / 4)
    assert four["eq1_samples_per_s"] >= one["eq1_samples_per_s"]


def test_batch_sweep_runs_every_strategy_at_every_batch(tiny: E.ModelDir, tmp_path: Path) -> None:
    res = S.batch_sweep(
        tiny, [1, 2], ["dram", "rm-ssd"], samples=2, warmup=1, min_batches=2, device="in-process"
    )
    assert [p["batch_size"] for p in res["points"]] == [1, 2]
    for p in res["points"]:
        for s in ("dram", "rm-ssd"):
            r = p["strategies"][s]
            assert r["throughput_per_s"] > 0 and r["max_abs_diff_vs_first"] < 1e-4
        assert p["rm_ssd_eq1"]["per_sample"] == list(
            S.device_mlp_at(tiny.spec, p["batch_size"])["per_sample"]
        )
    sh = res["shape"]["rm-ssd"]
    assert sh["batch_sizes"] == [1, 2] and sh["rise"][0] == 1.0 and sh["saturates_at"] in (1, 2)
    assert res["paper_shape"].startswith("rises linearly")
    assert P.batch_sweep([res], tmp_path / "f12.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="positive"):
        S.batch_sweep(tiny, [0], ["dram"])


def test_rm_ssd_takes_the_given_device_mlp_cycles(tiny: E.ModelDir) -> None:
    cfg = T.TraceConfig(rows=tiny.rows, batch_size=2, lookups=2, dense_width=tiny.spec.dense_width)
    tr = T.generate_trace(cfg, 3)
    slow = B.RunOptions(device="in-process", device_mlp_cycles=(10_000_000, 1, 1))
    r, _ = B.run_strategy(tiny, tr, "rm-ssd", "flash", slow)
    assert r["stages_s"]["bot_mlp"] == pytest.approx(2 * 2 * 10_000_000 / 200e6)  # 2 batches of 2


# ---------------------------------------------------------------- Fig. 14: the trace's constants


def test_recssd_own_constants_come_from_its_generator() -> None:
    c = T.recssd_own_constants()
    assert c["recssd_decay"] == pytest.approx(0.1497, abs=1e-4)
    assert c["recssd_base_new"] == pytest.approx(1 - math.exp(-c["recssd_decay"]))
    assert c["recssd_k_scale"] == 1.0 and c["recssd_max_distance"] == 49
    assert T.LOCALITY_CONSTANTS["fitted"]["recssd_base_new"] == T.RECSSD_BASE_NEW
    assert set(T.LOCALITY_CONSTANTS_WHY) == set(T.LOCALITY_CONSTANTS)


def test_lru_hit_rate_follows_the_constants() -> None:
    c = T.LOCALITY_CONSTANTS["recssd"]
    cfg = T.TraceConfig(rows=(10**6,), batch_size=200, lookups=50, kind="recssd", recssd_k=1.0, **c)  # type: ignore[arg-type]
    tr = T.generate_trace(cfg, 4)
    want = (1 - c["recssd_base_new"]) / (1 + c["recssd_k_scale"])
    assert T.lru_hit_rate(T.table_streams(tr), 1000) == pytest.approx(want, abs=0.02)


def test_locality_sweep_records_its_constants(tiny: E.ModelDir, tmp_path: Path) -> None:
    opts = B.RunOptions(host_cache_vectors=256, device="in-process")
    res = {
        c: B.locality_sweep(tiny, [0, 1], "flash", opts, batches=3, batch_size=2, constants=c)
        for c in ("fitted", "recssd")
    }
    assert (
        res["fitted"]["constants"]["label"] == "fitted"
        and "by construction" in res["fitted"]["constants"]["why"]
    )
    own = res["recssd"]["constants"]
    assert own["recssd_k_scale"] == 1.0 and own["hit_rate_formula"][1] == pytest.approx(
        (1 - own["recssd_base_new"]) / 2
    )
    assert P.locality_constants(res, tmp_path / "f14.png").stat().st_size > 0
    with pytest.raises(ValueError, match="unknown constants"):
        B.locality_sweep(tiny, [0], "flash", opts, constants="tuned")


# ---------------------------------------------------------------- Fig. 15: dram


def test_dram_probe_counts_runs_faults_and_huge_pages(tiny: E.ModelDir, tmp_path: Path) -> None:
    r = S.dram_probe(tiny, S.trace_for(tiny, 4, 2), repeats=2)
    assert len(r["runs"]) == 2 and r["samples_per_run"] == 4 and r["throughput_spread"] >= 1
    for run in r["runs"]:
        assert (
            run["throughput_per_s"] > 0 and run["lookup_ns"] > 0 and set(run["faults"]) == {"minor", "major"}
        )
        assert run["anon_huge_bytes"] is None or run["anon_huge_bytes"] >= 0
    assert set(S.thp_mode()) == {"enabled", "defrag"}
    with pytest.raises(ValueError, match="more than 2 batches"):
        S.dram_probe(tiny, S.trace_for(tiny, 2, 2))
    res = {"models": {"rmc3": {"rm_ssd": {"throughput_per_s": 10.0}, "dram": [r | {"pages": "4k"}]}}}
    assert P.dram_by_size(res, tmp_path / "f15.png").stat().st_size > 0


# ---------------------------------------------------------------- the scripts


@pytest.mark.parametrize("script", ["recsys_batch.py", "recsys_locality.py", "recsys_dram.py"])
def test_scripts_teach_with_help(script: str) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benches" / script), "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "seed 002" in out.stdout and "Writes" in out.stdout


def test_dram_verdict_compares_only_quiet_runs() -> None:
    def run(tp: float, lookup: float, mlp: float) -> dict[str, object]:
        return {"throughput_per_s": tp, "lookup_ns": lookup, "mlp_us_per_sample": mlp,
                "faults": {"minor": 0, "major": 0}}  # fmt: skip

    entry = {
        "rm_ssd": {"throughput_per_s": 100.0},
        "dram": [
            {"table_bytes": 64 << 20, "pages": "huge", "runs": [run(150.0, 100, 10), run(60.0, 100, 30)]},
            {"table_bytes": 4 << 30, "pages": "4k", "runs": [run(40.0, 5000, 10)]},  # paged: not compared
        ],
    }
    v = S.dram_verdict(entry)
    small, big = v["configs"]["64 MiB, huge pages"], v["configs"]["4096 MiB, 4k pages"]
    assert (
        small["quiet"] == 1
        and small["best_quiet"] == 150.0
        and small["rm_ssd_over_dram"] == pytest.approx(100 / 150)
    )
    assert big["quiet"] == 0 and big["slow_lookups"] == 1 and big["rm_ssd_over_dram"] is None
    assert v["rm_ssd_beats_quiet_dram"] is False and "does not beat" in v["text"]
