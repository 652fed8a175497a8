"""Every `offload` command, as a new user meets it: `--help` teaches without failing, and a bad
argument gets one line that says what is wrong (exit 2), never a traceback, and never a hang.

The bad argument: every text option and argument of the command (paths, endpoints, names) is
given a path under a regular file, which can be neither read, nor created, nor parsed as
anything else; numbers keep their defaults. A command that nevertheless accepts it must still
end within its deadline, with no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from offload.cli import app

DEADLINE_S = 60


def _leaves(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    if hasattr(command, "commands"):
        return [leaf for name, sub in command.commands.items() for leaf in _leaves(sub, [*path, name])]
    return [(path, command)]


COMMANDS = _leaves(typer.main.get_command(app), [])


def _texty(param: Any) -> bool:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    text = str(annotation)
    return annotation in (str, Path) or "str" in text or "Path" in text


def _bad_invocation(path: list[str], command: Any, bad: str) -> list[str]:
    argv = list(path)
    for p in command.params:
        if getattr(p, "is_flag", False) or p.name in ("help", "version") or getattr(p, "hidden", False):
            continue
        if not _texty(p):
            continue
        if p.param_type_name == "argument":
            argv += [bad] * (1 if p.nargs in (1, -1) else p.nargs)
        elif p.opts:
            argv += [p.opts[0], bad]
    return argv


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "OFFLOAD_TRACEBACK": ""}
    try:
        return subprocess.run(
            [sys.executable, "-m", "offload.cli", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(argv, -9, str(e.stdout or ""), f"HUNG past {DEADLINE_S} s")


def _ids() -> list[str]:
    return [" ".join(p) for p, _ in COMMANDS]


def test_every_command_is_found() -> None:
    names = set(_ids())
    assert {"rules eval", "serve stats", "recsys create", "plan simulate", "node serve"} <= names


def test_help_of_every_command() -> None:
    runner = CliRunner()
    for path, _ in COMMANDS:
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert r.exit_code == 0, f"{' '.join(path)}: {r.output[-500:]}"
        assert r.exception is None and "Usage" in r.output, " ".join(path)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=_ids())
def test_bad_argument_is_one_line(path: list[str], command: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file\n")
    bad = str(blocker / "x")
    r = _run(_bad_invocation(path, command, bad), tmp_path)
    out = r.stdout + r.stderr
    assert "HUNG" not in r.stderr, f"{' '.join(path)} hung"
    assert "Traceback" not in out, out[-2000:]
    assert "internal error" not in out, out[-2000:]
    if r.returncode != 0:
        assert r.returncode == 2, f"rc {r.returncode}: {out[-1000:]}"
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        usage = "Usage:" in r.stderr
        assert usage or len(errors) == 1, r.stderr[-1000:]
    assert not any(tmp_path.rglob("*.tmp")), "a half-written file was left"


# Quick commands (about a second each) of the parts whose JSON goes through clitools.emit.
ROOT = Path(__file__).resolve().parents[2]
MINI = Path(__file__).parent / "data" / "mini"
JSON_COMMANDS = [
    ["plan", "cost", str(ROOT / "data" / "plans" / "seed-table1.toml")],
    ["probe", "ctc", "--queries-per-s", "1e7"],
    ["metrics", "availability"],
    ["rules", "check", "--ruletype", str(MINI / "ruletype.toml"), "--rules", str(MINI / "rules.csv")],
    ["recsys", "kernels"],
    ["flows", "compression", "--results", str(ROOT / "benches" / "results" / "flows" / "partition.json")],
]


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=[" ".join(a[:2]) for a in JSON_COMMANDS])
def test_json_and_out_hold_the_same_result(argv: list[str], tmp_path: Path) -> None:
    """`--json --out F`: stdout is the JSON and nothing else, and F holds the same, whole, in a
    directory made for it."""
    out = tmp_path / "made" / "result.json"
    r = _run([*argv, "--json", "--out", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr[-1000:]
    assert r.stdout == out.read_text() + "\n"
    assert json.loads(r.stdout)


def test_the_cli_starts_without_the_data_service_stack() -> None:
    """`offload` loads pyarrow, datasketches and pandas only in the commands that use them: the
    GPU machines (benches/gpu/run.sh) have none of them."""
    heavy = "{'pyarrow', 'datasketches', 'pandas', 'datafusion'}"
    code = f"import sys, offload.cli; print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr)
