"""`--force` replaces only what offload made (offload.files.atomic_dir and its `.offload-made`
list): a directory output holding a file a person put there is refused, naming that file, and
nothing in it is touched; the product's own earlier output is replaced whole. Real commands:
`rules synth` and `recsys create`, the two that make a directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SYNTH = ["rules", "synth", "--rules", "40", "--requests", "2"]
CREATE = ["recsys", "create", "--model", "rmc1", "--rows", "200"]


def offload(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "OFFLOAD_TRACEBACK": ""}
    return subprocess.run([sys.executable, "-m", "offload.cli", *argv], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)  # fmt: skip


def one_line(p: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (p.returncode, p.stderr)
    for w in words:
        assert w in lines[0], (w, lines[0])


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("argv", [SYNTH, CREATE], ids=["rules synth", "recsys create"])
def test_force_never_deletes_a_file_it_did_not_make(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "mydir"
    (out / "sub").mkdir(parents=True)
    (out / "thesis.txt").write_text("three years of work")
    (out / "sub" / "notes.md").write_text("notes")
    before = tree(out)
    p = offload(*argv, "--out", str(out), "--force")
    one_line(p, "not made by offload", "(and 2 more)")
    assert "thesis.txt" in p.stderr or "sub/notes.md" in p.stderr, p.stderr
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]  # no temporary left beside it


@pytest.mark.parametrize("argv", [SYNTH, CREATE], ids=["rules synth", "recsys create"])
def test_force_replaces_its_own_output_but_not_a_file_added_to_it(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "made"
    assert offload(*argv, "--out", str(out)).returncode == 0
    made = tree(out)
    assert ".offload-made" in made
    assert offload(*argv, "--out", str(out), "--force").returncode == 0  # its own: replaced
    assert set(tree(out)) == set(made)
    (out / "mine.txt").write_text("added by a person")
    one_line(offload(*argv, "--out", str(out), "--force"), "mine.txt")
    assert (out / "mine.txt").read_text() == "added by a person"


def test_the_current_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    one_line(offload(*SYNTH, "--out", ".", cwd=tmp_path), "current directory")
    assert list(tmp_path.iterdir()) == []


def test_a_file_offload_writes_into_its_own_output_is_its_own(tmp_path: Path) -> None:
    """A trace written beside a model (the docs' way: `recsys synth -o MODEL/trace.npz`) is
    offload's: `recsys create --force` replaces the model, trace and all."""
    model = tmp_path / "rmc1"
    assert offload(*CREATE, "--out", str(model)).returncode == 0
    made = offload("recsys", "synth", "-m", str(model), "-o", str(model / "trace.npz"), "--batches", "1")
    assert made.returncode == 0, made.stderr
    assert offload(*CREATE, "--out", str(model), "--force").returncode == 0
    assert not (model / "trace.npz").exists()
