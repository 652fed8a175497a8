"""The gpu matcher from Python and the CLI. Without a CUDA device (CI, this project's usual
machines) every GPU path must say why and stop cleanly; with one, the device must answer exactly
as `linear` does. The kernel's logic itself is checked on every machine as `gpu-host` (the same
source built for the CPU) by the property tests of test_rules_api.py and crates/rules/tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from offload import rules

DATA = Path(__file__).parent / "data" / "mini"
MINI = ["--ruletype", str(DATA / "ruletype.toml"), "--rules", str(DATA / "rules.csv")]


def _device() -> dict[str, object] | str:
    try:
        return rules.gpu_device()
    except RuntimeError as e:
        return str(e)


DEVICE = _device()
HAS_GPU = isinstance(DEVICE, dict)


def offload(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "offload.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_nvrtc_compiles_the_kernel() -> None:
    """The device build of the kernel compiles (NVRTC needs no GPU): what CI can check of the
    CUDA side. `make test` installs NVRTC from the nvidia-cuda-nvrtc-cu12 wheel."""
    try:
        ptx = rules.gpu_kernel_ptx("compute_90")
    except RuntimeError as e:
        if str(e).startswith("no NVRTC"):
            pytest.skip(str(e))
        raise
    assert ".visible .entry match_kernel(" in ptx and ".target sm_90" in ptx
    # the four parameters: image, queries, n, out
    assert ptx.count("match_kernel_param_") >= 4


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present: the device tests below run instead")
def test_without_a_gpu_compiling_for_it_says_why() -> None:
    assert isinstance(DEVICE, str) and DEVICE.startswith(("no GPU", "no NVRTC")), DEVICE
    rs = rules.load(DATA / "ruletype.toml", DATA / "rules.csv")
    with pytest.raises(RuntimeError, match=r"^no (GPU|NVRTC)"):
        rules.compile(rs, "gpu")
    q = str(DATA / "queries.csv")
    r = offload("rules", "eval", *MINI, "--queries", q, "--out", "/dev/null", "--matcher", "gpu")
    assert r.returncode == 2 and "no GPU" in r.stderr and "Traceback" not in r.stderr
    # the service sweep says so before starting any daemon
    r = offload("serve", "sweep", *MINI, "--trace", str(DATA), "--matcher", "gpu", "--out", "/dev/null")
    assert r.returncode == 2 and "no GPU" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_bench_skips_gpu_with_the_reason_and_runs_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    r = offload(
        "rules", "bench", *MINI, "--queries", str(DATA / "queries.csv"), "--matcher", "gpu,gpu-host",
        "--threads", "1", "--batches", "64", "--repeats", "1", "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["skipped"]["gpu"].startswith("no GPU")
    assert list(res["matchers"]) == ["gpu-host"]
    assert "gpu: skipped" in r.stderr


@pytest.mark.skipif(not HAS_GPU, reason=f"{DEVICE}")
def test_the_device_answers_as_linear_does() -> None:
    from offload.rules.bench import load_query_columns

    rs = rules.load(DATA / "ruletype.toml", DATA / "rules.csv")
    _, cols = load_query_columns(rs, DATA / "queries.csv")
    lin = rules.compile(rs, "linear")
    gpu = rules.compile(rs, "gpu")
    codes = lin.encode(cols)
    # more than one chunk (2^20 queries) over both lanes, and a batch of one
    many = np.ascontiguousarray(np.tile(codes, (-(-(3 << 20) // len(codes)), 1)))
    assert np.array_equal(gpu.match(many).rule, lin.match(many, threads=2).rule)
    assert np.array_equal(gpu.match(codes[:1]).rule, lin.match(codes[:1]).rule)
    stages = gpu.stats()["last_batch"]
    assert stages["queries"] == 1 and stages["kernel_s"] > 0


def test_cpu_matchers_have_no_device_profile() -> None:
    rs = rules.load(DATA / "ruletype.toml", DATA / "rules.csv")
    for m in rules.MATCHERS:
        eng = rules.compile(rs, m)
        codes = np.zeros((3, eng._native.width), np.uint32)
        assert eng._native.device_profile(codes, 1) is None


@pytest.mark.skipif(not HAS_GPU, reason=f"{DEVICE}")
def test_the_device_profile_says_where_the_time_goes() -> None:
    from offload.rules.bench import load_query_columns

    rs = rules.load(DATA / "ruletype.toml", DATA / "rules.csv")
    _, cols = load_query_columns(rs, DATA / "queries.csv")
    gpu = rules.compile(rs, "gpu")
    codes = np.ascontiguousarray(np.tile(gpu.encode(cols), (1000, 1)))
    prof = gpu._native.device_profile(codes, 3)
    assert prof["queries"] == len(codes) and prof["pipeline_queries_per_s"] > 0
    assert set(prof["kernel_queries_per_s_by_block"]) == {"64", "128", "256", "512", "1024"}
    assert all(s > 0 for s in prof["kernel_s_by_batch"].values())
    # the profile leaves the matcher answering as before
    assert np.array_equal(gpu.match(codes).rule, rules.compile(rs, "linear").match(codes).rule)
