"""Every input of `offload recsys` bounded (issue 39): damaged model weights are found (the
manifest's checksum), NaN or inf dense features are refused naming the sample and feature, Ctrl-C
during an rm-ssd run is one line and leaves no device process, and every numeric option has a
stated domain. Real processes (`python -m offload.cli`, the device process); small tables."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from offload.recsys import engine as E
from offload.recsys import traces as T

ENV = {**os.environ, "OFFLOAD_PROGRESS_AFTER_S": "600", "COLUMNS": "200"}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "offload.cli", "recsys", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ENV)


def one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2, one line on stderr (`error: ...`) holding every word, no traceback."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def ctrl_c(p: subprocess.Popen[str]) -> None:
    """A terminal's Ctrl-C to the command's whole process group: it says `interrupted`, exit 130."""
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert [ln for ln in err.splitlines() if ln.strip()] == ["interrupted"], err


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bounds") / "m"
    r = cli("create", "--out", str(out), "--model", "rmc1", "--rows", "500")
    assert r.returncode == 0, r.stderr
    r = cli("synth", "-m", str(out), "-o", str(out / "trace.npz"), "--batches", "2", "--batch-size", "4")
    assert r.returncode == 0, r.stderr
    return out


def copy(model: Path, tmp_path: Path) -> Path:
    d = tmp_path / "copy"
    shutil.copytree(model, d)
    return d


# ------------------------------------------------------------------------------ item 1: weights
def test_damaged_weights_are_reported_by_info_and_refused_by_infer_and_bench(
    model: Path, tmp_path: Path
) -> None:
    d = copy(model, tmp_path)
    weights = d / "model.safetensors"
    with weights.open("r+b") as f:  # the reproduction: 8 bytes at offset 200,000
        f.seek(200_000)
        f.write(b"\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f")
    r = cli("info", "-m", str(d), "--json")
    one_line_error(r, str(weights), "checksum", "recreate")
    assert json.loads(r.stdout)["weights"]["status"] == "damaged"  # info reports what it found
    one_line_error(cli("infer", "-m", str(d), "-t", str(d / "trace.npz")), str(weights), "checksum")
    one_line_error(cli("bench", "-m", str(d), "-s", "dram", "--batches", "2"), str(weights), "checksum")
    with pytest.raises(ValueError, match="checksum"):  # the API opens the same way
        E.ModelDir.open(d)


def test_a_model_without_a_weights_checksum_says_not_verifiable(model: Path, tmp_path: Path) -> None:
    d = copy(model, tmp_path)
    man = d / "manifest.json"
    m = json.loads(man.read_text())
    assert len(m.pop("weights_sha256")) == 64  # made before weights had a checksum
    man.write_text(json.dumps(m))
    r = cli("info", "-m", str(d), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["weights"]["status"] == "not verifiable"
    r = cli("infer", "-m", str(d), "-t", str(d / "trace.npz"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["weights"] == "not verifiable"
    assert "weights not verifiable" in r.stderr and "Traceback" not in r.stderr


# -------------------------------------------------------------------------- item 3: dense values
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_dense_features_in_a_trace_are_refused(model: Path, tmp_path: Path, bad: float) -> None:
    with np.load(model / "trace.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["dense"][1, 2, 5] = bad  # batch 1, sample 2, feature 5
    trace = tmp_path / "bad.npz"
    np.savez(trace, **arrays)
    line = one_line_error(cli("infer", "-m", str(model), "-t", str(trace)), str(trace), "batch 1")
    assert "sample 2" in line and "feature 5" in line, line
    one_line_error(cli("bench", "-m", str(model), "-t", str(trace), "-s", "dram"), "sample 2", "feature 5")


@pytest.mark.parametrize(("strategy", "device"), [("dram", "in-process"), ("rm-ssd", "process")])
def test_non_finite_dense_features_are_refused_by_the_api(model: Path, strategy: str, device: str) -> None:
    d = E.ModelDir.open(model)
    b = T.load_trace(model / "trace.npz").batches[0]
    dense = b.dense.copy()
    dense[3, 7] = np.nan
    with E.Engine(d, strategy, "flash", device=device) as eng:
        with pytest.raises(ValueError, match=r"sample 3.*feature 7"):
            eng.infer(dense, b.offsets, b.indices)
        p, _ = eng.infer(b.dense, b.offsets, b.indices)  # the engine goes on with good input
        assert np.isfinite(p).all()
    with pytest.raises(ValueError, match=r"sample 3.*feature 7"):
        T.save_trace(Path(os.devnull).with_name("unused.npz"), T.EmbeddingTrace([T.Batch(dense, b.offsets,
                     b.indices)], tuple(d.rows)))  # fmt: skip


# ------------------------------------------------------------------------------- item 17: Ctrl-C
def _device_pids(parent: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            stat, cmd = (p / "stat").read_text(), (p / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"offload.recsys.device" in cmd:
            out.append(int(p.name))
    return out


def test_ctrl_c_during_rm_ssd_infer_is_one_line_and_leaves_no_device(model: Path, tmp_path: Path) -> None:
    d = E.ModelDir.open(model)
    rng = np.random.default_rng(0)
    one = [np.array([0, 1], np.int64)] * d.spec.tables
    batches = [
        T.Batch(rng.random((1, d.spec.dense_width), np.float32), one, [rng.integers(0, 500, 1) for _ in one])
        for _ in range(20_000)
    ]  # ~1 ms each in the device: a run of many seconds
    trace = T.save_trace(tmp_path / "long.npz", T.EmbeddingTrace(batches, tuple(d.rows)))
    argv = [
        sys.executable,
        "-m",
        "offload.cli",
        "recsys",
        "infer",
        "-m",
        str(model),
        "-t",
        str(trace),
        "-s",
        "rm-ssd",
    ]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         start_new_session=True)  # fmt: skip
    try:
        deadline, devices = time.monotonic() + 60, []
        while time.monotonic() < deadline and not devices and p.poll() is None:
            devices = _device_pids(p.pid)
            time.sleep(0.05)
        assert devices, "no device process started"
        time.sleep(0.5)  # batches running
        ctrl_c(p)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{pid}").exists() for pid in devices) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in devices), "the device process outlived the host"


def test_ctrl_c_during_create_stops_it_and_leaves_nothing(tmp_path: Path) -> None:
    """The table writer runs in Rust: Ctrl-C is seen at its next chunk (it was lost, and the
    model finished as if nothing had been pressed)."""
    argv = [
        sys.executable,
        "-m",
        "offload.cli",
        "recsys",
        "create",
        "--out",
        str(tmp_path / "big"),
        "--size",
        "4G",
    ]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            if any(t.stat().st_size > 1 << 20 for t in tmp_path.glob(".big.*/tables/*")):
                break  # tables being written
            time.sleep(0.02)
        ctrl_c(p)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert list(tmp_path.iterdir()) == []  # neither the model nor its temporary


# ----------------------------------------------------------------- item 19 and every numeric option
def test_every_numeric_option_states_its_domain() -> None:
    from offload.cli import command

    numeric = (int, float, int | None, float | None)
    recsys = command().commands["recsys"]
    options = [
        (f"recsys {name} {p.opts[0]}", p)
        for name, sub in recsys.commands.items()
        for p in sub.params
        if getattr(p.type_descriptor, "annotation", None) in numeric and not getattr(p, "is_flag", False)
    ]
    assert len(options) >= 15, [o for o, _ in options]
    assert not [o for o, p in options if p.min is None and p.max is None]
    r = cli("synth", "--help")
    assert r.returncode == 0 and "1<=x<=1000000" in r.stdout.replace(" ", ""), r.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["synth", "--batches", "-1"], ["--batches", "-1"]),
        (["synth", "--batch-size", "0"], ["--batch-size"]),
        (["bench", "--queue-depth", "0"], ["--queue-depth"]),
        (["create", "--size", "0"], ["--size", "0"]),
        (["create", "--size", "-1"], ["--size", "-1"]),
        (["create", "--size", "nan"], ["--size", "nan"]),
        (["create", "--size", "inf"], ["--size", "inf"]),
        (["bench", "--flash", "t_page_us=nan"], ["--flash", "t_page_us"]),
        (["bench", "--flash", "channels=0"], ["--flash", "channels"]),
    ],
)
def test_numeric_options_refuse_values_outside_their_domain(
    model: Path, tmp_path: Path, args: list[str], words: list[str]
) -> None:
    where = {"synth": ["-o", str(tmp_path / "t.npz"), "-m", str(model)], "bench": ["-m", str(model)],
             "create": ["--out", str(tmp_path / "new")]}[args[0]]  # fmt: skip
    one_line_error(cli(*args, *where), *words)
    assert not (tmp_path / "t.npz").exists() and not (tmp_path / "new").exists()


def test_a_weights_file_holding_nan_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    """A foreign weights file (no manifest to check it against) is still read with its numbers
    checked: a NaN weight would make every prediction NaN."""
    from offload.recsys.models import SPECS, Model, ModelError

    m = Model.random(SPECS["rmc1"], rows=[1] * 8, seed=0, with_tables=False)
    m.weights["top_l.0.weight"][1, 2] = np.nan
    m.save(tmp_path / "w.safetensors")
    with pytest.raises(ModelError, match=r"top_l\.0\.weight\[1, 2\] is nan"):
        Model.load(tmp_path / "w.safetensors")
