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
from typer.testing import CliRunner

from offload.cli import app, command

DEADLINE_S = 60


def _leaves(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    if hasattr(command, "commands"):
        return [leaf for name, sub in command.commands.items() for leaf in _leaves(sub, [*path, name])]
    return [(path, command)]


COMMANDS = _leaves(command(), [])  # as `offload` runs them: every float option finite


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


# --------------------------------------------------------------------------------------------
# Numbers: every numeric option states its domain (in --help), and 0, -1, nan and inf are each
# taken or refused by it, in one line (issue 39)
# --------------------------------------------------------------------------------------------

EXTREMES = ("0", "-1", "nan", "inf")


def _numeric(param: Any) -> bool:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return annotation in (int, float) and not getattr(param, "is_flag", False) and not param.hidden


NUMERIC = [(path, p) for path, c in COMMANDS for p in c.params if _numeric(p)]


def test_every_numeric_option_states_its_domain() -> None:
    """A bound on each side or one, as typer's min=/max= (shown in --help as a range)."""
    assert len(NUMERIC) > 100
    unbounded = [f"{' '.join(path)} {p.opts[0]}" for path, p in NUMERIC if p.min is None and p.max is None]
    assert not unbounded, unbounded


def _inside(param: Any, text: str) -> bool:
    import math

    value = float(text)
    annotation = param.type_descriptor.annotation
    if not math.isfinite(value) or (annotation is int and text not in ("0", "-1")):
        return False
    return (param.min is None or value >= param.min) and (param.max is None or value <= param.max)


def _argv(command: Any, param: Any, text: str, tmp_path: Path) -> list[str]:
    """``param`` given ``text`` first, then values for the command's other required parameters
    (so that parsing reaches the end): arguments in their order, then options."""
    existing = tmp_path / "a-file"
    existing.write_text("x\n")
    positional: list[str] = []
    options = [] if param.param_type_name == "argument" else [param.opts[0], text]
    for p in command.params:
        if p is param and p.param_type_name == "argument":
            positional.append(text)
        elif p is not param and p.required:
            value = "1" if _numeric(p) else str(existing)
            if p.param_type_name == "argument":
                positional.append(value)
            else:
                options += [p.opts[0], value]
    return options + (["--", *positional] if text.startswith("-") and positional else positional)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=_ids())
def test_each_numeric_option_takes_or_refuses_0_minus1_nan_inf(path: list[str], command: Any,
                                                                tmp_path: Path) -> None:  # fmt: skip
    """Parsed as `offload` parses them (in process: parsing runs nothing): a value outside the
    option's domain is refused naming the option, one inside is taken."""
    import click

    for param in [p for p in command.params if _numeric(p)]:
        for text in EXTREMES:
            argv = _argv(command, param, text, tmp_path)
            try:
                command.make_context(" ".join(["offload", *path]), argv, resilient_parsing=False)
                refused_by = None
            except click.exceptions.ClickException as e:
                refused_by = getattr(e, "param", None)
            except Exception as e:  # typer's vendored click raises its own classes
                refused_by = getattr(e, "param", None) if hasattr(e, "format_message") else e
            where = f"{' '.join(path)} {param.opts[0]} {text}"
            if _inside(param, text):
                assert refused_by is not param, f"{where}: refused though inside its domain"
            else:
                assert refused_by is param, f"{where}: taken though outside its domain ({refused_by!r})"


def test_a_number_outside_its_domain_is_one_line_naming_it(tmp_path: Path) -> None:
    for argv, option in [(["plan", "simulate", "--preset", "erbium-fpga", "--rate", "nan"], "--rate"),
                         (["probe", "ctc", "--queries-per-s", "inf"], "--queries-per-s"),
                         (["plan", "simulate", "--preset", "erbium-fpga", "--cpus", "-1"], "--cpus"),
                         (["plan", "simulate", "--preset", "erbium-fpga", "--duration", "inf"], "--duration"),
                         (["plan", "simulate", "--preset", "erbium-fpga", "--queue", "0"], "--queue"),
                         (["rules", "eval", "--threads", "-1"], "--threads")]:  # fmt: skip
        r = _run(argv, tmp_path)
        assert r.returncode == 2, (argv, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and option in lines[0], (argv, r.stderr)
        assert "--help" in lines[0], lines[0]


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """SIGINT in the middle of a long command: `interrupted`, exit 130, no traceback."""
    import signal
    import time

    argv = [
        "plan",
        "simulate",
        "--preset",
        "erbium-fpga",
        "--duration",
        "1000",
        "--max-requests",
        "100000000",
    ]
    env = {**os.environ, "OFFLOAD_PROGRESS_AFTER_S": "60"}
    with subprocess.Popen([sys.executable, "-m", "offload.cli", *argv], cwd=tmp_path, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as p:  # fmt: skip
        time.sleep(3)  # inside the simulation
        p.send_signal(signal.SIGINT)
        _, stderr = p.communicate(timeout=30)
    assert p.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["interrupted"], stderr


def test_ctrl_c_that_left_generated_code_is_still_130(tmp_path: Path) -> None:
    """A Ctrl-C landing in code Python made from a string (a dataclass's `__init__` as a module
    loads, a namedtuple) once ended `python -m offload.cli` by SIGINT after it said
    `interrupted`: CPython kept it as unhandled though `main` caught it."""
    (tmp_path / "interrupted_in_generated_code.py").write_text(
        "import offload.cli\n\n"
        "class Interrupted:\n"
        "    def main(self, **kwargs):\n"
        "        exec('raise KeyboardInterrupt')\n\n"
        "offload.cli.command = Interrupted\n"
        "offload.cli.main()\n"
    )
    done = subprocess.run([sys.executable, "-m", "interrupted_in_generated_code"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == ["interrupted"], done.stderr
