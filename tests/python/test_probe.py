"""`offload probe`: the quick suite runs for real and keeps its orderings; the derived metrics
(reuse ratio, CTC) against hand-computed and published figures; errors are clear."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.probe import presets


def offload(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offload.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_quick_probe_writes_profile_and_plots_and_passes_its_checks(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = offload("probe", "--quick", "--dir", str(tmp_path), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    prof = json.loads(out.read_text())
    from offload.probe import CHANNELS

    assert set(prof["channels"]) == set(CHANNELS)
    assert prof["checks"] and all(c["ok"] for c in prof["checks"]), prof["checks"]
    names = {c["check"] for c in prof["checks"]}
    assert "64 B round trip: shared memory < pipe < TCP loopback (kernel channels on one core)" in names
    assert "copy into a prefaulted buffer >= 2x a copy into a fresh mapping" in names
    fit = prof["channels"]["ipc/pipe"]["fit"]
    assert fit["latency_s"] > 0 and fit["bandwidth_bps"] > 0
    assert fit["n_half_bytes"] == pytest.approx(fit["latency_s"] * fit["bandwidth_bps"])
    assert prof["channels"]["ipc/pipe"]["fraction_of_limit"] > 0
    rr = prof["io_uring"]["random_reads"]["points"]
    assert [p["queue_depth"] for p in rr] == [1, 4, 16, 64] and all(p["iops"] > 0 for p in rr)
    assert prof["gpu"]["present"] is False and "skipped" in prof["gpu"]["note"]
    for suffix in ("bandwidth", "loss", "uring"):
        assert (tmp_path / f"p-{suffix}.png").stat().st_size > 5_000
    assert not list(tmp_path.glob("offload-probe-*.dat"))  # the io_uring file is removed


def test_probe_errors_name_the_problem(tmp_path: Path) -> None:
    r = offload("probe", "--quick", "--channel", "ipc/carrier-pigeon", "--out", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "unknown channel 'ipc/carrier-pigeon'" in r.stderr
    r = offload("probe", "--quick", "--dir", str(tmp_path / "missing"), "--out", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "not a directory" in r.stderr
    r = offload("probe", "ctc")
    assert r.returncode == 2 and "--queries-per-s" in r.stderr


def test_reuse_threshold_matches_the_formula_and_the_seed() -> None:
    p = presets.load()["platforms"]
    dev, shared = p["alpha_data"]["device_read_gbps"], p["xeon_fpga_v1"]["read_gbps"]
    # by hand: r = 1 / (bw_dma * (1/bw_shared - 1/bw_dev)) with the effective 1.6 GB/s DMA
    assert presets.reuse_threshold(1.6, dev, shared) == pytest.approx(1 / (1.6 * (1 / 7.0 - 1 / 9.5)))
    assert presets.reuse_threshold(1.6, dev, shared) == pytest.approx(16.6, abs=0.05)
    # the seed's ≈7 lies between the vendor-stack and the staged DMA rates
    assert presets.reuse_threshold(5.2, dev, shared) < 7 < presets.reuse_threshold(2.7, dev, shared)  # type: ignore[operator]
    assert presets.reuse_threshold(1.6, 5.0, 7.0) is None  # device memory slower: never wins
    r = json.loads(offload("probe", "reuse", "--json").stdout)
    assert r["seed_reported"] == 7 and 3.5 < r["dma_gbps_that_gives_7"] < 4.0


@given(dma=st.floats(0.1, 50), dev=st.floats(1, 100), shared=st.floats(0.5, 99), r=st.floats(0.01, 1e4))
def test_private_bandwidth_properties(dma: float, dev: float, shared: float, r: float) -> None:
    bw = presets.private_bandwidth(r, dma, dev)
    assert 0 < bw < dev and bw <= r * dma * (1 + 1e-12)  # bounded by both stages
    assert presets.private_bandwidth(2 * r, dma, dev) > bw  # more reuse, more bandwidth
    t = presets.reuse_threshold(dma, dev, shared)
    if t is not None:
        assert presets.private_bandwidth(t, dma, dev) == pytest.approx(shared, rel=1e-9)


def test_ctc_rises_with_batch_and_reads_a_bench_file(tmp_path: Path) -> None:
    ratios = [presets.ctc(1e7, 32, n, 50e-6, 2e9).ratio for n in (1, 64, 1024, 4096)]
    # latency amortised over bigger batches; the limit is B / (q/s x bytes/query) = 6.25
    assert ratios == sorted(ratios) and ratios[-1] < 2e9 / (1e7 * 32)
    c = presets.ctc(1e6, 100, 1000, 0.0, 1e8)  # 1 ms compute vs 1 ms transfer
    assert c.ratio == pytest.approx(1.0)
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps({"matchers": {"fast": {"runs": [{"threads": 1, "queries_per_s": 1e7}]}}}))
    r = offload("probe", "ctc", "--bench", str(bench), "--batch", "1,4096", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    alpha = [x for x in rows if x["channel"] == "preset alpha_data"]
    assert [x["batch"] for x in alpha] == [1, 4096] and alpha[0]["ctc"] < alpha[1]["ctc"]


def test_gpu_section_is_skipped_cleanly_without_a_gpu() -> None:
    from offload.probe import gpu as gpu_probe

    if gpu_probe.available():
        pytest.skip("a GPU is present: the quick probe test covers the measured section")
    section = gpu_probe.measure(quick=True)
    assert section["present"] is False and "skipped" in section["note"]


def test_the_rust_fit_is_reachable_for_channels_measured_in_python() -> None:
    from offload import _native

    f = _native.probe_fit([(64.0, 1e-6 + 64 / 1e9), (1 << 20, 1e-6 + (1 << 20) / 1e9)])
    assert f["latency_s"] == pytest.approx(1e-6) and f["bandwidth_bps"] == pytest.approx(1e9)
    assert _native.probe_fit([(64.0, 1e-6)]) is None


def test_zmq_peer_process_that_cannot_start_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from offload import _native

    with pytest.raises(ValueError, match="starting the ZeroMQ peer"):
        _native.probe_channel("zmq/ipc-round-trip", True, str(tmp_path), None, ["/nonexistent/python"])
    with pytest.raises(ValueError, match="unknown ZeroMQ peer role"):
        _native.probe_zmq_peer("juggle", "ipc:///nowhere", "-", "-")


def test_a_pure_latency_fit_prints_and_feeds_ctc(tmp_path: Path) -> None:
    """JSON has no infinity: a fit whose time did not grow with n has null bandwidth and n½."""
    from offload.probe.cli import _channels_for_ctc, print_profile

    point = {
        "bytes": 64,
        "median_s": 1e-6,
        "p10_s": 1e-6,
        "p90_s": 1e-6,
        "bandwidth_bps": 6.4e7,
        "samples": 5,
    }
    flat = {"latency_s": 1e-6, "bandwidth_bps": None, "n_half_bytes": None, "median_rel_error": 0.0}
    profile = {
        "mode": "quick", "environment": {"cpu": "test"}, "gpu": {"note": "none"}, "checks": [],
        "channels": {"zmq/tcp-stream": {"points": [point], "fit": flat, "fraction_of_limit": None}},
    }  # fmt: skip
    print_profile(profile)  # no exception
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    assert not any(name == "measured zmq/tcp-stream" for name, _l, _b in _channels_for_ctc(path))


def test_memory_backed_dir_is_labelled_memory_not_disk(tmp_path: Path) -> None:
    """tmpfs takes O_DIRECT on Linux >= 6.6, so a probe of /dev/shm would report memory as a disk."""
    from offload.probe import filesystem

    shm = Path("/dev/shm")
    assert filesystem(tmp_path)["memory_backed"] is (filesystem(tmp_path)["type"] in ("tmpfs", "ramfs"))
    if not shm.is_dir() or filesystem(shm)["type"] != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    assert filesystem(shm) == {"path": "/dev/shm", "type": "tmpfs", "memory_backed": True}
    out = tmp_path / "shm.json"
    args = ["probe", "--quick", "--dir", str(shm), "--out", str(out), "--no-plots", "--channel", "ipc/pipe"]
    r = offload(*args)
    assert r.returncode == 0, r.stderr
    prof = json.loads(out.read_text())
    assert prof["directory"] == {"path": "/dev/shm", "type": "tmpfs", "memory_backed": True}
    rr = prof["io_uring"].get("random_reads")
    if rr is not None:  # an older kernel refuses O_DIRECT on tmpfs: then the section says skipped
        assert rr["memory_backed"] is True and "memory, not a disk" in rr["note"]
        assert "tmpfs: memory, not a disk" in r.stdout
    else:
        assert "tmpfs" in prof["io_uring"]["skipped"]


def test_unphysical_figures_are_flagged_against_this_machines_memcpy() -> None:
    """ZeroMQ inproc passes a pointer: its 'bandwidth' at large messages exceeds any copy."""
    from offload.probe import flag_unphysical
    from offload.probe.cli import print_profile

    def pts(*bw: tuple[int, float]) -> list[dict[str, float]]:
        return [{"bytes": n, "median_s": n / b, "p10_s": n / b, "p90_s": n / b, "bandwidth_bps": b}
                for n, b in bw]  # fmt: skip

    fit = {"latency_s": 1e-7, "bandwidth_bps": 2.5e12, "n_half_bytes": 2.5e5, "median_rel_error": 0.5}
    channels = {
        "memory/memcpy": {"points": pts((64, 5e9), (1 << 18, 40e9), (1 << 24, 20e9)), "fit": None},
        "ipc/shared-memory": {
            "points": pts((64, 3e8), (1 << 18, 18e9)),
            "fit": fit | {"bandwidth_bps": 15e9},
        },
        "zmq/inproc-stream": {"points": pts((64, 4e8), (1 << 18, 4.9e15)), "fit": fit},
    }
    bound = flag_unphysical(channels)
    assert bound is not None and bound["memcpy_bps"] == 40e9 and bound["bandwidth_bps"] == 2 * 40e9
    assert channels["ipc/shared-memory"]["unphysical"] is None
    why = channels["zmq/inproc-stream"]["unphysical"]
    assert why is not None and "memcpy" in why and "262144 B" in why
    assert channels["memory/memcpy"]["unphysical"] is None
    profile = {
        "mode": "quick", "environment": {"cpu": "test"}, "gpu": {"note": "none"}, "checks": [],
        "channels": channels, "physical_bound": bound,
    }  # fmt: skip
    from rich.console import Console

    from offload.probe import cli

    cli.console, saved = Console(width=200, record=True), cli.console
    try:
        print_profile(profile)
        text = cli.console.export_text()
    finally:
        cli.console = saved
    assert "zmq/inproc-stream (unphysical)" in text and "unphysical: zmq/inproc-stream" in text
    assert "ipc/shared-memory (unphysical)" not in text
    # without memcpy measured there is nothing to compare with: said, not guessed
    assert flag_unphysical({"zmq/inproc-stream": {"points": pts((64, 1e20)), "fit": None}}) is None


def test_unphysical_channels_are_left_out_of_ctc(tmp_path: Path) -> None:
    from offload.probe.cli import _channels_for_ctc

    fit = {"latency_s": 1e-7, "bandwidth_bps": 2.5e12, "n_half_bytes": 2.5e5, "median_rel_error": 0.5}
    path = tmp_path / "p.json"
    channels = {"zmq/inproc-stream": {"fit": fit, "unphysical": "zero copy"},
                "zmq/ipc-stream": {"fit": fit, "unphysical": None}}  # fmt: skip
    path.write_text(json.dumps({"channels": channels}))
    names = [name for name, _l, _b in _channels_for_ctc(path)]
    assert "measured zmq/ipc-stream" in names and "measured zmq/inproc-stream" not in names


def test_probe_json_prints_the_profile_on_stdout(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    only = ["--channel", "memory/memcpy", "--channel", "zmq/inproc-stream"]
    r = offload("probe", "--quick", "--no-uring", "--no-plots", *only, "--dir", str(tmp_path),
                "--out", str(out), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    prof = json.loads(r.stdout)
    assert prof == json.loads(out.read_text())
    assert set(prof["channels"]) == {"memory/memcpy", "zmq/inproc-stream"}
    assert prof["physical_bound"]["bandwidth_bps"] > 0
    assert "unphysical" in prof["channels"]["zmq/inproc-stream"]


def test_ctc_and_reuse_name_a_bad_bench_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "report.json"
    bad.write_text(json.dumps({"rows": []}))
    r = offload("probe", "ctc", "--bench", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--bench {bad}" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = offload("probe", "reuse", "--private", "nope")
    assert r.returncode == 2 and "unknown preset 'nope'" in r.stderr


def test_unreadable_presets_are_one_line_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from offload.probe.cli import _presets

    for content in (None, "platforms = ["):
        path = tmp_path / "platforms.toml"
        if content is not None:
            path.write_text(content)
        monkeypatch.setattr(presets, "PRESETS", path)
        with pytest.raises(typer.Exit) as e:
            _presets()
        assert e.value.exit_code == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith("error: platform presets") and str(path) in line.replace("\n", "")
