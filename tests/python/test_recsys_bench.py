"""offload.recsys.bench, plots and memlimit: every strategy side by side on a tiny model (the
answers agree, the counters add up, the ratios against ssd-s are the counters' ratios), the CLI's
JSON and PNGs, the locality sweep, and the memory cgroup that holds ssd-s to its DRAM share."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from offload.cli import app
from offload.recsys import bench as B
from offload.recsys import engine as E
from offload.recsys import memlimit
from offload.recsys import traces as T
from offload.recsys.models import SPECS

INPROC = B.RunOptions(device="in-process")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> E.ModelDir:
    # rows not a multiple of the page's vectors, so the last page is partial
    return E.create(tmp_path_factory.mktemp("rmc1") / "m", SPECS["rmc1"], [3001] * 8, seed=3)


def trace(d: E.ModelDir, batches: int = 3, kind: str = "hotset") -> T.EmbeddingTrace:
    cfg = T.TraceConfig(rows=d.rows, batch_size=4, lookups=6, dense_width=d.spec.dense_width, kind=kind)  # type: ignore[arg-type]
    return T.generate_trace(cfg, batches)


def test_every_strategy_side_by_side_agrees_and_counts(tiny: E.ModelDir) -> None:
    res = B.run(tiny, trace(tiny), list(E.STRATEGIES), "flash", B.RunOptions(warmup=1))
    runs = res["strategies"]
    assert list(runs) == list(E.STRATEGIES) and res["reference_strategy"] == "dram"
    for name, r in runs.items():
        assert r["samples"] == 8 and r["batches"] == 2, name
        assert r["max_abs_diff_vs_first"] < 1e-5, name
        assert r["throughput_per_s"] > 0 and r["latency_s"]["p99"] >= r["latency_s"]["p50"] > 0
        assert r["io"]["lookups"] == 2 * 4 * 6 * 8
    assert runs["dram"]["traffic_bytes"] == 0 and runs["dram"]["read_amplification"] == 0
    # vector reads read no more than the vectors; page reads read pages
    assert runs["emb-vectorsum"]["read_amplification"] <= 1.0 < runs["emb-pagesum"]["read_amplification"]
    vs = res["vs_ssd_s"]
    s, v = runs["ssd-s"], runs["emb-vectorsum"]
    assert vs["emb-vectorsum"]["traffic_reduction_x"] == pytest.approx(
        s["traffic_bytes"] / v["traffic_bytes"]
    )
    assert vs["rm-ssd"]["traffic_reduction_x"] > vs["emb-vectorsum"]["traffic_reduction_x"]
    assert vs["ssd-s"]["throughput_x"] == pytest.approx(1.0)
    assert runs["recssd"]["host_cache_hit_rate"] is not None
    json.dumps(res)  # machine-readable as it stands


def test_flash_mode_is_reproducible(tiny: E.ModelDir) -> None:
    """The media and the device are modelled: the device's time does not change between runs."""
    tr = trace(tiny)
    a = B.run(tiny, tr, ["emb-vectorsum"], "flash", INPROC)["strategies"]["emb-vectorsum"]
    b = B.run(tiny, tr, ["emb-vectorsum"], "flash", INPROC)["strategies"]["emb-vectorsum"]
    assert a["stages_s"]["emb_ssd"] == b["stages_s"]["emb_ssd"] and a["io"] == b["io"]


def test_unknown_strategy_is_named(tiny: E.ModelDir) -> None:
    with pytest.raises(ValueError, match="unknown strategy 'ssd-xl'"):
        B.run(tiny, trace(tiny), ["dram", "ssd-xl"], "flash")


def test_cli_bench_writes_json_and_the_figures(tiny: E.ModelDir, tmp_path: Path) -> None:
    out, plots = tmp_path / "b.json", tmp_path / "plots"
    r = CliRunner().invoke(
        app,
        ["recsys", "bench", "-m", str(tiny.path), "--batches", "2", "--batch-size", "2", "--out", str(out),
         "--plots", str(plots), "-s", "dram,ssd-s,emb-vectorsum", "--flash", "t_page_us=40"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["flash"] == {"t_page_us": 40.0} and list(res["strategies"]) == [
        "dram",
        "ssd-s",
        "emb-vectorsum",
    ]
    assert sorted(p.name for p in plots.iterdir()) == [
        "rmc1-flash-breakdown.png",
        "rmc1-flash-io.png",
        "rmc1-flash-sls.png",
    ]
    for p in plots.iterdir():
        assert p.read_bytes()[:4] == b"\x89PNG"
    bad = CliRunner().invoke(app, ["recsys", "bench", "-m", str(tiny.path), "--flash", "t_page_us"])
    assert bad.exit_code != 0 and "key=number" in bad.output


def test_locality_sweep_hit_rate_falls_with_k(tiny: E.ModelDir, tmp_path: Path) -> None:
    from offload.recsys import plots as P

    opts = B.RunOptions(host_cache_vectors=256, device="in-process")
    res = B.locality_sweep(tiny, [0, 2], "flash", opts, batches=3, batch_size=4)
    hits = [p["recssd"]["host_cache_hit_rate"] for p in res["points"]]
    assert hits[0] > hits[1], hits
    assert res["points"][0]["paper_hit_rate"] == 0.80
    assert P.locality(res["points"], tmp_path / "f14.png").stat().st_size > 0


def test_memory_cgroup_holds_the_page_cache_to_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = memlimit.unavailable_reason()
    if why:
        pytest.skip(why)
    monkeypatch.setattr(memlimit, "SLACK_BYTES", 16 << 20)
    f = tmp_path / "big"
    # well above the process's own memory + slack + budget (what the suite loaded before counts)
    size = max(256 << 20, (memlimit._anon_bytes() + (16 << 20) + (8 << 20) + (128 << 20)) >> 20 << 20)
    with f.open("wb") as out:
        for _ in range(size >> 20):
            out.write(b"\x5a" * (1 << 20))
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    before = memlimit.own_cgroup()
    with memlimit.page_cache_budget(8 << 20) as info, f.open("rb") as fh:
        while fh.read(1 << 20):
            pass
    assert info["method"] in ("cgroup-v1-memory", "cgroup-v2-memory")
    # the whole file went through a cgroup that never held more than its limit: reclaim ran
    assert info["max_usage_bytes"] <= info["limit_bytes"] < size and info["failcnt"] > 0
    assert memlimit.own_cgroup() == before and not Path(info["cgroup"]).exists()


def test_disk_mode_ssd_s_records_its_dram_limit(tiny: E.ModelDir) -> None:
    r, _ = B.run_strategy(tiny, trace(tiny, batches=2), "ssd-s", "disk")
    lim = r["dram_limit"]
    assert lim["budget_bytes"] == int(0.25 * tiny.table_bytes)
    assert lim["method"] in ("cgroup-v1-memory", "cgroup-v2-memory", "none") and (
        lim["method"] != "none" or lim["reason"]
    )


def test_flash_page_cache_starts_full_and_ssd_m_misses_less(tiny: E.ModelDir) -> None:
    """Steady state as the seed measures it: the modelled page cache is filled with fresh lookups
    of the trace's distribution before the recorded batches, so the DRAM share shows."""
    tr = trace(tiny, batches=4)
    res = B.run(tiny, tr, ["ssd-s", "ssd-m"], "flash", INPROC)["strategies"]
    for name in ("ssd-s", "ssd-m"):
        fill = res[name]["page_cache_fill"]
        assert fill["pages_held"] == fill["capacity"] > 0 and fill["lookups"] > 0, fill
    assert res["ssd-m"]["page_cache_fill"]["capacity"] > res["ssd-s"]["page_cache_fill"]["capacity"]
    assert res["ssd-m"]["io"]["cache_misses"] < res["ssd-s"]["io"]["cache_misses"]
    assert res["ssd-s"]["io"]["cache_hits"] > 0


def test_more_lookups_share_the_hot_set_but_not_the_draws() -> None:
    cfg = T.TraceConfig(rows=(200_000,), batch_size=64, lookups=32, dense_width=4)
    trace_rows = T.generate_trace(cfg, 1).batches[0].indices[0]
    a, b = T.more_lookups(cfg, 0, 4096, stream=1), T.more_lookups(cfg, 0, 4096, stream=2)
    assert not (a[: len(trace_rows)] == trace_rows).all() and not (a == b).all()
    other = T.more_lookups(
        T.TraceConfig(rows=(200_000,), batch_size=64, lookups=32, dense_width=4, seed=9), 0, 4096
    )
    seen = set(trace_rows.tolist())
    # the same hot set (and permutation) as the trace: far more rows in common than another seed's
    assert len(seen & set(a.tolist())) > 2 * len(seen & set(other.tolist()))
