"""Nothing silent in `offload recsys` (issue 23): damaged rows and swapped tables are found and
named, an existing model is not overwritten, a bench keeps what it measured when the device dies,
a full disk leaves no half-written file and says which, and the commands agree on their options.
Real processes and files; small tables, short runs."""

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

from conftest import half_written
from offload.recsys import engine as E
from offload.recsys.models import SPECS, ModelSpec

OFFLOAD = str(Path(sys.executable).with_name("offload"))
SPEC = ModelSpec(
    name="tiny",
    kind="dlrm",
    dense_width=4,
    bottom=[8, 16],
    top=[6, 1],
    dim=16,
    tables=2,
    lookups=SPECS["rmc1"].lookups,
)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OFFLOAD, "recsys", *args], capture_output=True, text=True, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> str:
    """rc 2, no traceback, the error on one line holding every word."""
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout, err)
    assert "Traceback" not in err and "Aborted" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("integrity") / "m"
    r = cli("create", "--out", str(out), "--model", "rmc1", "--rows", "500", "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["rows_per_table"] == [500] * 8 and made["out"] == str(out)
    r = cli(
        "synth", "-m", str(out), "-o", str(out / "trace.npz"), "--batches", "2", "--batch-size", "4", "--json"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["out"] == str(out / "trace.npz")
    return out


def copy(model: Path, tmp_path: Path) -> Path:
    d = tmp_path / "copy"
    shutil.copytree(model, d)
    return d


def test_damaged_rows_are_found_by_info_and_infer(model: Path, tmp_path: Path) -> None:
    d = copy(model, tmp_path)
    t3 = d / "tables" / "t003.emb"
    trace = np.load(d / "trace.npz")
    row = int(trace["indices_3"][0])  # a row the trace looks up
    stride = int.from_bytes(t3.read_bytes()[24:28], "little")  # the header's row bytes
    with t3.open("r+b") as f:  # 8 bytes of the rows, as the reproduction
        f.seek(4096 + row * stride + 8)
        f.write(b"\x00\x00\x80\x3f\x00\x00\x80\x3f")
    one_line_error(cli("info", "-m", str(d)), "t003.emb", "checksum")
    for device in ("in-process", "process"):
        one_line_error(
            cli("infer", "-m", str(d), "-t", str(d / "trace.npz"), "-s", "emb-vectorsum", "--device", device),
            "t003.emb",
            f"rows {row // 4 * 4}-{row // 4 * 4 + 3}",  # the 512 B checksum block of 4 rows
        )
    one_line_error(
        cli("infer", "-m", str(d), "-t", str(d / "trace.npz"), "-s", "dram"), "t003.emb", "checksum"
    )
    # --no-verify skips the row check (header and checksum area only) and says so
    r = cli("info", "-m", str(d), "--no-verify", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rows_checked"] is False


def test_a_table_of_another_model_is_refused(model: Path, tmp_path: Path) -> None:
    d = copy(model, tmp_path)
    other = tmp_path / "other"
    assert cli("create", "--out", str(other), "--rows", "1000").returncode == 0
    shutil.copy(other / "tables" / "t002.emb", d / "tables" / "t002.emb")
    one_line_error(cli("info", "-m", str(d), "--no-verify"), "t002.emb", "rows", "1000", "500")
    # the same shape from another seed: the contents' fingerprint differs
    same = tmp_path / "same"
    assert cli("create", "--out", str(same), "--rows", "500", "--seed", "9").returncode == 0
    shutil.copy(same / "tables" / "t002.emb", d / "tables" / "t002.emb")
    one_line_error(cli("infer", "-m", str(d), "-t", str(d / "trace.npz")), "t002.emb", "manifest")


def test_damaged_or_empty_manifest_and_trace_are_named(model: Path, tmp_path: Path) -> None:
    d = copy(model, tmp_path)
    (d / "manifest.json").write_text("")
    one_line_error(cli("info", "-m", str(d)), "manifest.json")
    d2 = copy(model, tmp_path / "b")
    (d2 / "trace.npz").write_bytes(b"")
    one_line_error(cli("infer", "-m", str(d2), "-t", str(d2 / "trace.npz")), "trace.npz")
    (d2 / "trace.npz").write_bytes(b"PK\x03\x04 not really a zip")
    one_line_error(cli("infer", "-m", str(d2), "-t", str(d2 / "trace.npz")), "trace.npz")


def test_create_refuses_an_existing_model_unless_forced(model: Path, tmp_path: Path) -> None:
    d = copy(model, tmp_path)
    before = (d / "tables" / "t000.emb").read_bytes()
    one_line_error(cli("create", "--out", str(d), "--rows", "300"), str(d), "--force")
    assert (d / "tables" / "t000.emb").read_bytes() == before
    (d / "trace.npz").unlink()  # --force replaces only what create made (issue 39), not a trace
    r = cli("create", "--out", str(d), "--rows", "300", "--force")
    assert r.returncode == 0, r.stderr
    assert E.ModelDir.open(d).rows == [300] * 8 and not half_written(tmp_path)
    # too small for one row per table: refused with the minimum
    one_line_error(cli("create", "--out", str(tmp_path / "z"), "--size", "1000"), "at least", "1024")
    assert not (tmp_path / "z").exists()


def test_infer_options_match_bench_and_out_is_the_path_given(model: Path, tmp_path: Path) -> None:
    import inspect

    from offload.recsys import cli as C

    assert "--device" in cli("infer", "--help").stdout
    infer, bench = inspect.signature(C.infer).parameters, inspect.signature(C.bench).parameters
    for opt in ("mode", "device"):
        assert infer[opt].default == bench[opt].default, opt
    out = tmp_path / "p.npy"
    r = cli("infer", "-m", str(model), "-t", str(model / "trace.npz"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert np.load(out).shape == (8,) and not Path(str(out) + ".npy").exists()
    csv = tmp_path / "p.csv"
    assert cli("infer", "-m", str(model), "-t", str(model / "trace.npz"), "--out", str(csv)).returncode == 0
    assert np.allclose(np.loadtxt(csv), np.load(out), atol=1e-6)
    one_line_error(
        cli("infer", "-m", str(model), "-t", str(model / "trace.npz"), "--out", str(tmp_path / "x.bin")),
        "x.bin",
        ".npy",
    )
    assert not (tmp_path / "x.bin").exists() and not (tmp_path / "x.bin.npy").exists()


def _device_pids(parent: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"offload.recsys.device" in cmd:
            out.append(int(p.name))
    return out


def test_bench_keeps_what_it_measured_when_the_device_dies(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    p = subprocess.Popen(
        [OFFLOAD, "recsys", "bench", "-m", str(model), "-s", "dram,emb-vectorsum", "--batches", "400",
         "--batch-size", "1", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        killed = False
        while time.monotonic() < deadline and not killed:
            if out.exists() and "dram" in json.loads(out.read_text())["strategies"]:
                for pid in _device_pids(p.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed = True
            time.sleep(0.02)
        assert killed, "no device process to kill"
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 2, err
    assert "Traceback" not in err and "device" in err and str(out) in err, err
    res = json.loads(out.read_text())
    assert list(res["strategies"]) == ["dram"]
    assert res["complete"] is False
    assert res["failure"]["strategy"] == "emb-vectorsum" and "gone" in res["failure"]["error"]
    assert not half_written(tmp_path)


def test_a_full_disk_leaves_nothing_and_names_the_file(small_tmpfs: Path, model: Path) -> None:
    m = small_tmpfs / "m"
    one_line_error(cli("create", "--out", str(m), "--size", "64M"), str(m), "no space")
    assert list(small_tmpfs.iterdir()) == []
    # fill the disk but for a little, then write a trace bigger than that
    filler = small_tmpfs / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * ((16 << 20) - (64 << 10)))
    tr = small_tmpfs / "t.npz"
    one_line_error(
        cli("synth", "-m", str(model), "-o", str(tr), "--batches", "64", "--batch-size", "64"),
        str(tr),
        "no space",
    )
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler"]
    fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
    try:  # now the disk is full
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    one_line_error(
        cli("infer", "-m", str(model), "-t", str(model / "trace.npz"), "--out", str(small_tmpfs / "p.json")),
        "p.json",
        "no space",
    )
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler"]


def test_infer_shows_progress_on_stderr_and_keeps_stdout_for_json(model: Path) -> None:
    env = os.environ | {"TTY_COMPATIBLE": "1", "FORCE_COLOR": "1", "COLUMNS": "100"}
    r = subprocess.run(
        [OFFLOAD, "recsys", "infer", "-m", str(model), "-t", str(model / "trace.npz"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["samples"] == 8
    assert "dram (flash)" in r.stderr and "%" in r.stderr
