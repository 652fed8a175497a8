"""The device side in its own process (`Engine(..., device="process")`): the same predictions and
I/O counters as in process, the channel moves what `link_bytes` counts, the process gets its CPU
and memory budget, and it never outlives its engine."""

from __future__ import annotations

import gc
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from offload.recsys import engine as E
from offload.recsys.models import SPECS, ModelSpec

SERVED = ("emb-pagesum", "emb-vectorsum", "recssd", "rm-ssd")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> E.ModelDir:
    spec = ModelSpec(
        name="tiny",
        kind="dlrm",
        dense_width=5,
        bottom=[8, 32],
        top=[6, 1],
        dim=32,
        tables=3,
        lookups=SPECS["rmc1"].lookups,
    )
    return E.create(tmp_path_factory.mktemp("tiny-device"), spec, [600, 37, 1], seed=5)


def batch(rows: list[int], n: int, seed: int) -> tuple[np.ndarray, list, list]:
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((n, 5)).astype(np.float32)
    offsets, indices = [], []
    for r in rows:
        lens = rng.integers(0, 6, size=n)
        lens[1 % n] = 0
        offsets.append(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
        indices.append(rng.integers(0, r, size=int(lens.sum())).astype(np.int64))
    return dense, offsets, indices


def disk_unavailable(tiny: E.ModelDir) -> str | None:
    try:
        E.Engine(tiny, "emb-vectorsum", "disk")
    except E.RecsysError as e:
        if e.kind == "unsupported":
            return str(e)
        raise
    return None


@pytest.mark.parametrize("mode", E.MODES)
@pytest.mark.parametrize("strategy", SERVED)
def test_process_answers_as_in_process(tiny: E.ModelDir, strategy: str, mode: str) -> None:
    if mode == "disk" and (why := disk_unavailable(tiny)):
        pytest.skip(why)
    kw = {"host_cache_vectors": 4, "device_mlp_cycles": (100, 50, 200)}
    local = E.Engine(tiny, strategy, mode, **kw)
    with E.Engine(tiny, strategy, mode, device="process", **kw) as far:
        info = far.device_info
        assert info["at"] == "process" and info["pid"] != os.getpid() and alive(info["pid"])
        link = 0
        for seed in range(3):
            dense, offs, idx = batch(tiny.rows, 4, seed)
            want, a = local.infer(dense, offs, idx)
            got, b = far.infer(dense, offs, idx)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
            for k in ("lookups", "useful_bytes", "media_reads", "media_bytes", "link_bytes", "cache_hits"):
                assert a["io"][k] == b["io"][k], (k, a["io"], b["io"])
            assert b["stages"]["emb_ssd"] > 0
            link += b["io"]["link_bytes"]
        if strategy in ("emb-vectorsum", "rm-ssd"):
            ch = far.channel_bytes
            assert ch["to_device"] + ch["from_device"] == link
    assert not alive(info["pid"])


def test_budget_is_applied_or_explained(tiny: E.ModelDir) -> None:
    budget = 512 << 20
    eng = E.Engine(tiny, "emb-vectorsum", "flash", device="process", device_memory_bytes=budget)
    info = eng.device_info
    pid = info["pid"]
    assert info["cpu"] == max(os.sched_getaffinity(0)) or info["cpu_reason"]
    if info["cpu"] is not None:
        assert os.sched_getaffinity(pid) == {info["cpu"]}
    cgroup = info["memory_cgroup"]
    if cgroup is not None:
        assert info["memory_limit_bytes"] == budget
        assert str(pid) in Path(cgroup, "cgroup.procs").read_text().split()
    else:
        assert info["memory_reason"]
    dense, offs, idx = batch(tiny.rows, 3, 9)
    eng.infer(dense, offs, idx)
    del eng
    gc.collect()
    assert not alive(pid)
    if cgroup is not None:
        assert not Path(cgroup).exists()


def test_host_strategies_need_no_device_process(tiny: E.ModelDir) -> None:
    eng = E.Engine(tiny, "ssd-s", "flash", device="process")
    assert eng.device_info["at"].startswith("in-process")
    assert eng.device_info["pid"] == os.getpid()


def test_a_killed_device_is_a_clear_error(tiny: E.ModelDir) -> None:
    eng = E.Engine(tiny, "rm-ssd", "flash", device="process", device_timeout_s=30)
    dense, offs, idx = batch(tiny.rows, 3, 1)
    eng.infer(dense, offs, idx)
    pid = eng.device_info["pid"]
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(E.RecsysError, match=r"device process .* is gone") as err:
        eng.infer(dense, offs, idx)
    assert err.value.kind == "device"
    assert time.monotonic() - t0 < 5
    with pytest.raises(E.RecsysError, match="gone"):
        eng.infer(dense, offs, idx)
    eng.close()
    assert not alive(pid)


def test_rm_ssd_pipelines_send_inputs_and_read_outputs(tiny: E.ModelDir) -> None:
    """RM_send_inputs / RM_read_outputs: the next batch is in the device before this one's outputs
    are read; the answers are infer's, in order; a third batch waits for a read."""
    batches = [batch(tiny.rows, 4, seed) for seed in (1, 2, 3)]
    with E.Engine(tiny, "rm-ssd", "flash") as ref:
        want = [ref.infer(*b)[0] for b in batches]
    with E.Engine(tiny, "rm-ssd", "flash", device="process") as eng:
        eng.send_inputs(*batches[0])
        eng.send_inputs(*batches[1])
        with pytest.raises(E.RecsysError, match="in flight"):
            eng.send_inputs(*batches[2])
        got = [eng.read_outputs()[0]]
        eng.send_inputs(*batches[2])
        got += [eng.read_outputs()[0], eng.read_outputs()[0]]
        with pytest.raises(E.RecsysError, match="no batch"):
            eng.read_outputs()
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


def test_the_budget_comes_from_host_cgroups_or_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from offload.host import cgroups
    from offload.recsys import device as D

    cgroup, info = D.budget_cgroup(None)
    assert cgroup is None and info["memory_reason"] == "no memory limit asked"
    assert "--memory-cgroup" not in D.command(cgroup, None)
    monkeypatch.setattr(cgroups, "unavailable_reason", lambda *a, **k: "cgroup v2 host: not supported yet")
    cgroup, info = D.budget_cgroup(1 << 20)
    assert cgroup is None and info["memory_limit_bytes"] is None
    assert info["memory_reason"] == "cgroup v2 host: not supported yet"
    monkeypatch.setattr(cgroups, "unavailable_reason", lambda *a, **k: None)
    monkeypatch.setattr(cgroups, "own", lambda *a, **k: Path("/sys/fs/cgroup/memory/x"))
    cgroup, info = D.budget_cgroup(1 << 20)
    assert cgroup is not None and cgroup.parent == Path("/sys/fs/cgroup/memory/x")
    assert info == {"memory_limit_bytes": 1 << 20, "memory_cgroup": str(cgroup), "memory_reason": None}
    assert D.command(cgroup, 1 << 20)[-4:] == ["--memory-cgroup", cgroup.name, "--memory-bytes", str(1 << 20)]


def test_a_device_without_its_channel_says_how_to_start_it() -> None:
    from offload.recsys import device as D

    with pytest.raises(SystemExit) as e:
        D.main([])
    assert e.value.code == 2
