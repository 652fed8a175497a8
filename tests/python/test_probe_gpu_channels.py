"""`offload probe gpu-channels` (seed 004's device-side channels and case studies): without a GPU
it says why in one line and in its JSON; the pure helpers (sizes, falloff, the measured reuse
threshold, the chase's chain) on made-up curves; the tables, plot and JSON from a measurement
built by the same functions as a real one; the kernels compile where a CUDA compiler exists."""

from __future__ import annotations

import ctypes
import itertools
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from offload.cli import app
from offload.probe import gpuchannels as gc

runner = CliRunner()


def _curve(bps: float, latency_s: float = 5e-6) -> Any:
    return lambda n: [latency_s + n / bps] * 5


def fake_measurement(matvec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A result of the shape `measure` returns, from the same builders, with made-up times."""
    sizes = gc.sweep_sizes(4 * gc.KIB, 64 * gc.MIB)

    def capi_like(n: int) -> list[float]:  # a falloff at 4 MiB, as CAPI's (§3.2.2)
        return [5e-6 + n / (3e9 if n == 4 * gc.MIB else 20e9)] * 5

    ks = [1, 2, 3, 4, 8, 16]
    props = {"name": b"Fake H100", "totalGlobalMem": 80 << 30, "l2CacheSize": 50 << 20}
    dram, shared = gc.SEED_TABLE5["device"], gc.SEED_TABLE5["shared"]
    return {
        **gc._header(), "available": True, "mode": "quick",
        "device": gc._device(props, 132),
        "method": "made up",
        "channels": {
            "device/read": gc._entry("device/read", "a kernel reads", sizes, _curve(3e12)),
            "mapped/read": gc._entry("mapped/read", "zero-copy", sizes, capi_like),
        },
        "latency": {
            "device reads device memory": gc.latency_entry("chase", [6e-7, 6.2e-7, 5.9e-7], 4096, dram),
            "device reads mapped host memory": gc.latency_entry("chase", [1.1e-6] * 3, 4096, shared),
        },
        "matmul": {"rows": [gc.matmul_row(4096, 3e-3, 4.5e-3, 4.8e-3)], "operation": "C = A·B"},
        "matvec": matvec
        or gc.matvec_summary(4096, ks, [1.4e-3 + k * 3e-5 for k in ks], [k * 1.5e-3 for k in ks], 1.35e-3),
        "seconds": 12.0,
    }  # fmt: skip


def _text(parts: list[Any]) -> str:
    con = Console(record=True, width=200)
    for p in parts:
        con.print(p)
    return con.export_text()


def test_without_a_gpu_one_line_and_the_json_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc, "why_unavailable", lambda: "no NVIDIA GPU here (a test)")
    out = tmp_path / "ch.json"
    r = runner.invoke(app, ["probe", "gpu-channels", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines() == ["GPU channels skipped: no NVIDIA GPU here (a test)"]
    got = json.loads(out.read_text())
    assert got["available"] is False and got["why"] == "no NVIDIA GPU here (a test)"
    assert got["tool"] == "offload probe gpu-channels"
    r = runner.invoke(app, ["probe", "gpu-channels", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["available"] is False


def test_the_real_reason_here_is_one_line() -> None:
    why = gc.why_unavailable()
    if why is None:
        pytest.skip("CuPy sees a GPU here")
    assert why and "\n" not in why


def test_sweep_sizes_are_powers_of_two_within_the_limit() -> None:
    sizes = gc.sweep_sizes()
    assert sizes[0] == 4096 and sizes[-1] == 1 << 30 and len(sizes) == 19
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))
    assert gc.sweep_sizes(limit=(100 << 20) + 5)[-1] == 64 << 20
    assert gc.sweep_sizes(limit=1000) == []
    with pytest.raises(ValueError):
        gc.sweep_sizes(lo=3000)


def test_falloff_finds_the_largest_drop_and_whether_it_recovers() -> None:
    pts = [
        {"bytes": 1 << k, "bandwidth_bps": bw}
        for k, bw in zip(range(20, 26), [4, 6, 8, 3, 7, 9], strict=True)
    ]
    f = gc.falloff(pts)
    assert f is not None and f["at_bytes"] == 1 << 23 and f["from_bps"] == 8 and f["to_bps"] == 3
    assert f["drop"] == pytest.approx(5 / 8) and f["recovered_bps"] == 9
    assert gc.falloff([{**p, "bandwidth_bps": i + 1.0} for i, p in enumerate(pts)]) is None  # rises only
    assert gc.falloff(pts, min_drop=0.7) is None


def test_crossover_is_where_the_device_starts_to_win_and_stays_ahead() -> None:
    ks = [1, 2, 3, 4, 5, 6, 8, 10]
    copy, dev, shared = 10.0, 0.5, 2.0  # private(k) = copy + k·dev, shared(k) = k·shared
    priv = [copy + k * dev for k in ks]
    sh = [k * shared for k in ks]
    c = gc.crossover(ks, priv, sh)
    assert c["first"] == 8  # 6.67 exactly: 8 is the first measured count past it
    assert c["line"] == pytest.approx(copy / (shared - dev))
    noisy = [*priv[:2], 0.1, *priv[3:]]  # one lucky sample at 3 does not make the threshold 3
    assert gc.crossover(ks, noisy, sh)["first"] == 8
    assert gc.crossover(ks, [100.0] * len(ks), [1.0] * len(ks))["first"] is None
    swapped = gc.crossover(ks, sh, priv)  # the shared platform's curve as the private one: never
    assert swapped["first"] is None and swapped["line"] is None
    with pytest.raises(ValueError):
        gc.crossover([2, 1], [1.0, 1.0], [1.0, 1.0])


def test_matvec_summary_feeds_the_seeds_formula_with_the_measured_rates() -> None:
    ks = [1, 2, 4, 8, 16]
    mv = gc.matvec_summary(1024, ks, [2e-3 + k * 1e-4 for k in ks], [k * 1e-3 for k in ks], 2e-3)
    s = 1024 * 1024 * 4
    assert mv["rates"]["dma_bps"] == pytest.approx(s / 2e-3)
    assert mv["rates"]["device_bps"] == pytest.approx(s / 1e-4)
    assert mv["r_model"] == pytest.approx(1 / ((s / 2e-3) * (1e-3 / s - 1e-4 / s)))
    assert mv["r_measured"] == 4 and mv["r_seed"] == 7
    assert mv["r_probe_reuse"]["fitted"] == pytest.approx(7.0)


def test_the_chain_is_one_cycle_of_distinct_blocks() -> None:
    blocks, nexts = gc.chain(1000, 200)
    assert len(set(blocks.tolist())) == 200 and all(int(b) % 8 == 0 for b in blocks)
    link = dict(zip(blocks.tolist(), nexts.tolist(), strict=True))
    at = int(blocks[0])
    for _ in range(50):
        at = link[at]
    assert at == int(blocks[50])
    c = gc._Chain.make(1 << 20, 2)  # two segments of CHASE_STEPS links in 16,384 blocks
    assert len(c.starts) == 2 and int(c.ends[0]) == int(c.starts[1]) and int(c.ends[1]) == int(c.starts[0])
    with pytest.raises(ValueError):
        gc.chain(10, 20)


def test_tables_and_json_from_a_measurement(tmp_path: Path) -> None:
    result = fake_measurement()
    text = _text(gc.render(result))
    wanted = (
        "device/read", "mapped/read", "at 4 MiB, recovers", "device reads mapped host memory",
        "882 ns (CAPI)", "r measured: 1 (the fewest", "the seed (§5.2, Fig. 7): 7", "Fake H100",
    )  # fmt: skip
    for want in wanted:
        assert want in text, want
    assert json.loads(json.dumps(result)) == result
    assert gc.failed(result) == []
    png = gc.plot(result, tmp_path / "ch.png")
    assert Path(png).stat().st_size > 1000


def test_the_command_with_a_measurement_writes_json_plot_and_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc, "why_unavailable", lambda: None)
    monkeypatch.setattr(gc, "measure", lambda quick, say: fake_measurement())
    out = tmp_path / "ch.json"
    r = runner.invoke(app, ["probe", "gpu-channels", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "r measured" in r.stdout and (tmp_path / "ch.png").is_file()
    assert json.loads(out.read_text())["matvec"]["r_seed"] == 7
    broken = fake_measurement(matvec={"error": "RuntimeError: a test"})
    monkeypatch.setattr(gc, "measure", lambda quick, say: broken)
    r = runner.invoke(app, ["probe", "gpu-channels", "--out", str(out), "--no-plots"])
    assert r.exit_code == 1 and "matrix-vector failed" in r.stdout
    assert json.loads(out.read_text())["channels"]["device/read"]["points"]  # the rest is kept


def test_the_kernels_compile(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc") or next(iter(Path("/usr/local/cuda/bin").glob("nvcc")), None)
    if nvcc is None:
        pytest.skip("no CUDA compiler (nvcc) on this machine")
    for name, src in gc.KERNELS.items():
        cu = tmp_path / f"{name}.cu"
        cu.write_text(src)
        r = subprocess.run([str(nvcc), "--ptx", "-o", str(tmp_path / f"{name}.ptx"), str(cu)],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert f".entry {name}" in (tmp_path / f"{name}.ptx").read_text()


# ---- a fake CuPy on host memory: the measuring code runs end to end here, kernels emulated ----


class _Mem:
    """An allocation: host bytes kept alive, at a real address (device, pinned and managed alike)."""

    def __init__(self, n: int, flags: int = 0) -> None:
        self.buf = np.zeros(max(n, 1), np.uint8)
        self.ptr, self.size = self.buf.ctypes.data, n


class _Ptr:
    def __init__(self, mem: Any, offset: int = 0) -> None:
        self.mem, self.ptr = mem, mem.ptr + offset


class _Unowned:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr, self.size, self.owner = ptr, size, owner


class _Pinned(np.ndarray):
    @property
    def ptr(self) -> int:
        return int(self.ctypes.data)


class _Array:
    """The part of cupy.ndarray the measuring code uses, over memory at an address."""

    def __init__(self, shape: Any, dtype: Any, memptr: _Ptr) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dt.itemsize
        raw = (ctypes.c_uint8 * nbytes).from_address(memptr.ptr)
        self.a, self.data, self.nbytes = np.frombuffer(raw, dt).reshape(shape), memptr, nbytes

    def view(self, dtype: Any) -> _Array:
        return _Array(self.nbytes // np.dtype(dtype).itemsize, dtype, self.data)

    def reshape(self, *shape: int) -> _Array:
        return _Array(shape, self.a.dtype, self.data)

    def fill(self, v: Any) -> None:
        self.a.fill(v)

    def get(self) -> np.ndarray:
        return self.a.copy()

    def __setitem__(self, key: Any, value: Any) -> None:
        key = key.a if isinstance(key, _Array) else key
        self.a[key] = value.a if isinstance(value, _Array) else value


def _new(n: int, dtype: Any, fill: Any = None) -> _Array:
    arr = _Array(n, dtype, _Ptr(_Mem(int(np.prod(n)) * np.dtype(dtype).itemsize)))
    if fill is not None:
        arr.fill(fill)
    return arr


class _Kernel:
    def __init__(self, src: str, name: str) -> None:
        assert f"void {name}(" in src
        self.name = name

    def __call__(self, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        if self.name == "offload_read":
            arr, n16, total = args
            words = arr.a.view(np.uint32)[: int(n16) * 4]
            total.a[0] = (int(total.a[0]) + int(words.sum(dtype=np.uint64))) & 0xFFFFFFFF
        else:
            words, start, steps, out = args
            i = int(start)
            for _ in range(int(steps)):
                i = int(words.a[i])
            out.a[:] = [int(steps) * 600, i, 0]  # 600 ns a link


_PROPS = {"name": b"Fake GPU", "multiProcessorCount": 4, "totalGlobalMem": 16 << 30, "l2CacheSize": 1 << 20}


def fake_cupy() -> types.ModuleType:
    rt = types.SimpleNamespace(
        memcpyHostToDevice=1, memcpyDeviceToHost=2, memcpyDeviceToDevice=3, hostAllocPortable=1,
        hostAllocMapped=2, getDeviceCount=lambda: 1, memGetInfo=lambda: (8 << 30, 16 << 30),
        memcpy=lambda dst, src, n, kind: ctypes.memmove(dst, src, n),
        memPrefetchAsync=lambda ptr, n, dev, stream: None,
        getDeviceProperties=lambda i: _PROPS,
    )  # fmt: skip
    cuda = types.SimpleNamespace(
        runtime=rt, Device=lambda: types.SimpleNamespace(id=0, synchronize=lambda: None),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0), PinnedMemory=_Mem, UnownedMemory=_Unowned,
        MemoryPointer=_Ptr, malloc_managed=lambda n: _Ptr(_Mem(n)),
        alloc_pinned_memory=lambda n: np.zeros(n, np.uint8).view(_Pinned),
    )  # fmt: skip
    cp = types.ModuleType("cupy")
    cp.__dict__.update(
        cuda=cuda, ndarray=_Array, RawKernel=_Kernel, uint8=np.uint8, uint32=np.uint32, uint64=np.uint64,
        float32=np.float32, ones=lambda n, dt: _new(n, dt, 1), zeros=lambda n, dt: _new(n, dt, 0),
        empty=lambda n, dt: _new(n, dt), asarray=lambda a: _copy(np.asarray(a)),
        dot=lambda a, b, out: np.dot(a.a, b.a, out=out.a),
        get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None),
    )  # fmt: skip
    return cp


def _copy(a: np.ndarray) -> _Array:
    arr = _new(a.size, a.dtype)
    arr.a[:] = a.ravel()
    return arr


def test_the_measuring_code_runs_end_to_end_on_a_fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    monkeypatch.setattr(gc, "CHASE_STEPS", 64)
    tiny = gc.Mode(64 * gc.KIB, 1e-5, 2, 2, 64 * 64 * 8, 3, (32, 64), 64, (1, 2, 4, 8), 2)
    monkeypatch.setitem(gc.MODES, True, tiny)
    said: list[str] = []
    result = gc.measure(True, said.append)
    assert gc.failed(result) == [], gc.failed(result)
    assert set(result["channels"]) == {
        "device/copy", "device/read", "mapped/read", "managed/read-first-touch", "managed/read-resident"
    }  # fmt: skip
    assert [p["bytes"] for p in result["channels"]["mapped/read"]["points"]] == gc.sweep_sizes(
        4096, 64 * gc.KIB
    )
    lat = result["latency"]
    assert lat["device reads device memory"]["per_access_s"] == pytest.approx(600e-9)  # the emulated link
    assert lat["device reads device memory"]["samples"] == 3  # the warm-up segment dropped
    assert {r["n"] for r in result["matmul"]["rows"]} == {32, 64}
    mv = result["matvec"]
    assert mv["iterations"] == [1, 2, 4, 8] and len(mv["private_s"]) == 4 and mv["r_seed"] == 7
    assert "channels: managed memory" in said and result["device"]["name"] == "Fake GPU"
    assert "r measured" in _text(gc.render(result))


def test_a_kernel_that_misses_bytes_fails_its_part_and_the_others_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp = fake_cupy()
    real = cp.RawKernel

    def short_read(src: str, name: str) -> Any:
        k = real(src, name)
        if name != "offload_read":
            return k
        return lambda grid, block, args: k(grid, block, (args[0], np.uint64(int(args[1]) - 1), args[2]))

    cp.RawKernel = short_read
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(gc, "CHASE_STEPS", 64)
    monkeypatch.setitem(
        gc.MODES, True, gc.Mode(16 * gc.KIB, 1e-5, 2, 2, 64 * 64 * 8, 3, (32,), 32, (1, 2), 2)
    )
    result = gc.measure(True)
    assert [f.split(":")[0] for f in gc.failed(result)] == ["channels"]
    assert "read kernel over device memory" in result["channels"]["error"]
    assert "rows" in result["matmul"] and "r_measured" in result["matvec"]


def test_the_matrix_multiply_verdict_follows_the_measured_ratio() -> None:
    near = [gc.matmul_row(1024, 1e-3, 4e-3, 9e-3), gc.matmul_row(4096, 3e-3, 4.5e-3, 4.8e-3)]
    assert "Here too" in gc.matmul_verdict(near) and "1.07×" in gc.matmul_verdict(near)
    far = [gc.matmul_row(4096, 2.8e-3, 6.6e-3, 112e-3)]
    said = gc.matmul_verdict(far)
    assert "Not here" in said and "17.0×" in said and "58%" in said
