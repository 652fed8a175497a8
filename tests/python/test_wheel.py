"""A real install: the wheel, built as a user would (`maturin build --release`) and installed into a
fresh virtual environment outside the checkout, carries its data and runs every part from there
(issue 23, item 13).

The wheel is built with the interpreter `make develop` uses, so cargo reuses the release build
(a few seconds after `make develop`; a different PYO3_PYTHON would rebuild pyo3 and all that
depends on it). OFFLOAD_WHEEL=path tests a wheel built elsewhere instead. The fresh environment
gets the wheel alone (`--no-deps --no-index`); its third-party dependencies (numpy, pyarrow, ...)
come from the project's own environment through a .pth line, so nothing is downloaded and
`offload` itself can only come from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 60.0  # per command; the whole smoke run takes ~20 s on 2 cores


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("OFFLOAD_WHEEL")
    if given:
        return Path(given)
    maturin = shutil.which("maturin") or shutil.which("maturin", path=str(Path(sys.executable).parent))
    if maturin is None:
        pytest.skip("maturin is not installed (pip install maturin): cannot build the wheel")
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed (rustup): cannot build the wheel")
    out = tmp_path_factory.mktemp("wheel")
    cmd = [maturin, "build", "--release", "--interpreter", sys.executable, "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}"
    (whl,) = out.glob("*.whl")
    return whl


def test_the_wheel_carries_the_native_module_and_every_data_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        sizes = {i.filename: i.file_size for i in z.infolist()}
    assert sizes.get("offload/_native.abi3.so", 0) > 1 << 20, sorted(sizes)[:20]
    assert "offload/cli.py" in sizes and "offload/datafiles.py" in sizes
    shipped = {n.removeprefix("offload/data/") for n in sizes if n.startswith("offload/data/")}
    in_repo = {p.relative_to(ROOT / "data").as_posix() for p in (ROOT / "data").rglob("*") if p.is_file()}
    assert in_repo and in_repo <= shipped, f"not in the wheel: {sorted(in_repo - shipped)}"
    assert any(n.endswith(".dist-info/entry_points.txt") for n in sizes)
    assert "linux" in wheel.name  # no manylinux repair (it would need patchelf): see pyproject.toml


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the fresh environment, a working directory), both outside the checkout."""
    home = tmp_path_factory.mktemp("installed")
    assert not home.resolve().is_relative_to(ROOT), f"{home} is inside the checkout"
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()
    )  # fmt: skip
    # Third-party dependencies from the project's environment (after the venv's own site-packages).
    (site / "_offload_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index"]
    r = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    work = home / "work"
    work.mkdir()
    yield venv, work


def _inside(path: str) -> bool:
    return Path(path).resolve().is_relative_to(ROOT)


def _env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # Nothing of the checkout on PATH (its .venv/bin has a development `offload`).
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not _inside(p)]
    return env | {
        "PATH": os.pathsep.join([str(venv / "bin"), *path]),
        "VIRTUAL_ENV": str(venv),
        "COLUMNS": "200",
        "OFFLOAD_PROGRESS": "plain",
    }


def test_the_installed_package_comes_from_the_wheel_and_finds_its_data(installed: tuple[Path, Path]) -> None:
    venv, work = installed
    code = (
        "import json, offload, offload._native; from offload.datafiles import data_path; "
        "print(json.dumps([offload.__file__, str(data_path('prices', 'catalog.toml')), "
        "str(data_path('plans', 'whatif'))]))"
    )
    r = subprocess.run([venv / "bin" / "python", "-c", code], cwd=work, env=_env(venv), capture_output=True,
                       text=True, timeout=LIMIT_S)  # fmt: skip
    assert r.returncode == 0, r.stderr
    module, catalog, whatif = (Path(p) for p in json.loads(r.stdout))
    for p in (module, catalog, whatif):
        assert p.is_relative_to(venv), f"{p} is not inside the fresh environment"
    assert catalog.is_file() and sorted(whatif.glob("*.toml"))


def test_every_part_runs_from_the_installed_wheel(installed: tuple[Path, Path]) -> None:
    venv, work = installed
    env, exe = _env(venv), str(venv / "bin" / "offload")
    took: dict[str, float] = {}

    def offload(*args: str) -> str:
        t0 = time.monotonic()
        r = subprocess.run([exe, *args], cwd=work, env=env, capture_output=True, text=True, timeout=LIMIT_S)
        took[" ".join(args[:2])] = time.monotonic() - t0
        assert r.returncode == 0 and "Traceback" not in r.stderr, f"offload {' '.join(args)}:\n{r.stderr}"
        return r.stdout

    data = Path(json.loads(_data_dir(venv, work)))  # the installed offload/data
    # rules
    offload("rules", "synth", "--out", "r", "--rules", "50", "--requests", "20")
    rt, rules = "--ruletype=r/ruletype.xml", "--rules=r/rules.csv"
    offload("rules", "check", rt, rules)
    offload("rules", "eval", rt, rules, "--queries", "r/queries.csv", "--out", "answers.csv")
    assert len((work / "answers.csv").read_text().splitlines()) > 1
    # serve + inject, over IPC
    sock, ctl = work / "o.sock", work / "c.sock"
    cmd = [exe, "serve", rt, rules, "-e", f"ipc://{sock}", "-c", f"ipc://{ctl}"]
    serve = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and serve.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists(), f"serve did not bind {sock}: {serve.poll()=}"
        offload("serve", "inject", "-e", f"ipc://{sock}", rt, rules, "--trace", "r", "--duration", "0.5",
                "-p", "1", "--out", "inject.json")  # fmt: skip
        assert json.loads((work / "inject.json").read_text())["requests"] > 0
    finally:
        serve.terminate()
        serve.communicate(timeout=20)
    # probe: the derived metrics read the shipped presets
    assert json.loads(offload("probe", "reuse", "--json"))["seed_reported"] == 7
    assert json.loads(offload("probe", "ctc", "--queries-per-s", "1e7", "--json"))["rows"]
    # plan: the default catalog, a bundled preset, the fleet
    cost = json.loads(offload("plan", "cost", str(data / "plans" / "seed-table1.toml"), "--json"))
    assert cost
    # the shipped scenario by the names that work in the checkout: the help's path, its name
    for name in ("data/plans/seed-table1.toml", "seed-table1"):
        assert json.loads(offload("plan", "cost", name, "--json")) == cost, name
    shutil.copy(ROOT / "benches" / "results" / "calibration-100k.json", work / "calibration.json")
    cal = "--calibration=calibration.json"
    assert json.loads(offload("plan", "simulate", cal, "--preset=erbium-fpga", "--duration=0.05", "--json"))
    fleet = json.loads(offload("plan", "fleet", cal, "--trace", "r",
                               "--item", "aws-c5.12xlarge", "--requests-per-s", "1e5", "-p", "4", "--w", "2",
                               "--k", "1", "--json"))  # fmt: skip
    assert fleet["nodes"] >= 1
    # recsys, node, flows, metrics, report
    offload("recsys", "create", "--out", "model", "--model", "rmc1", "--size", "2M")
    offload("recsys", "info", "-m", "model")
    offload("node", "particles", "-o", "particles.parquet", "--rows", "5000")
    offload("flows", "partition", "--datasets", "particles", "--rows", "3000", "--parts", "2",
            "--codecs", "none", "--profiles", "core", "--work", "flows", "--json")  # fmt: skip
    assert json.loads(offload("metrics", "mbwu", "--no-measure", "--json"))
    offload("report", "--out", "report.html")
    assert (work / "report.html").stat().st_size > 1000
    print("smoke timings (s):", {k: round(v, 2) for k, v in took.items()})


def _data_dir(venv: Path, work: Path) -> str:
    code = "import json; from offload.datafiles import data_path; print(json.dumps(str(data_path())))"
    r = subprocess.run([venv / "bin" / "python", "-c", code], cwd=work, env=_env(venv), capture_output=True,
                       text=True, timeout=LIMIT_S, check=True)  # fmt: skip
    return r.stdout
