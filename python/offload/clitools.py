"""What every `offload` subcommand shares: the two consoles (``console`` for stdout, ``err`` for
stderr), the one ``--json`` and ``--out`` options and ``emit``, which writes a JSON result to both,
``progress`` on stderr (a spinner or a bar on a terminal, lines in a log), located-error exits
(``fail``, ``failing``, ``oneline``), comma lists, sizes with K/M/G/T, how a duration is printed,
tables that read in 80 columns, and re-running a command inside a network namespace."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
"""stdout: results, tables; with --json only the JSON goes here."""
err = Console(stderr=True)
"""stderr: errors, progress, notes."""

JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="Print the machine-readable result as JSON on stdout (nothing else goes to stdout)."
    ),
]


OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", help="Also write the JSON result to this file (whole or not at all). \\[default: none]"
    ),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    """Prints `error: message` to stderr; raise the returned Exit."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@contextmanager
def failing(*errors: type[Exception], code: int = 2) -> Iterator[None]:
    """Turns the known ``errors`` raised in the block into ``fail(str(e), code)``: one line on
    stderr and the exit, no traceback.

    >>> with failing(OSError, ValueError):
    ...     data = read(path)
    """
    try:
        yield
    except errors as e:
        raise fail(str(e), code) from None


def emit(
    result: Any, as_json: bool, out: Path | None = None, *, default: Callable[[Any], Any] | None = None
) -> bool:
    """A command's JSON result, the same way in every command: written whole to ``out`` (its
    directory made) when given, and printed on stdout under ``--json``; both may be asked.
    ``default`` is json.dumps's, for values JSON has no type for (numpy floats, enums).
    True when stdout took the result, so the command prints nothing more there.

    >>> if emit(result, as_json, out):
    ...     return
    """
    from offload.files import write_text

    text = json.dumps(result, indent=2, default=default)
    if out is not None:
        with failing(OSError):
            out.parent.mkdir(parents=True, exist_ok=True)
            write_text(out, text)
    if as_json:
        print(text)
    return as_json


class Steps:
    """What :func:`progress` yields: call it with what is being done now; ``advance`` and
    ``update`` move the bar of a progress that has a total."""

    def __init__(self, first: str, total: float | None, on_change: Callable[[Steps], None]) -> None:
        self.message, self.total, self.completed = first, total, 0.0
        self._on_change = on_change

    def __call__(self, message: str) -> None:
        self.message = message
        self._on_change(self)

    def advance(self, amount: float = 1.0) -> None:
        self.update(self.completed + amount)

    def update(self, completed: float, message: str | None = None, total: float | None = None) -> None:
        self.completed, self.total = completed, self.total if total is None else total
        if message is None:
            self._on_change(self)
        else:
            self(message)

    def line(self, elapsed_s: float) -> str:
        """The log line: the message, how far of the total, and the seconds since the start."""
        done = f"{100 * self.completed / self.total:.0f}%, " if self.total else ""
        return f"{self.message} ({done}{elapsed_s:.0f} s)"


@contextmanager
def progress(first: str, total: float | None = None, *, every_step: bool = False) -> Iterator[Steps]:
    """Progress on stderr (stdout stays the result, e.g. --json) while something takes more than
    a moment: on a terminal a spinner, a bar when there is a ``total``, and the elapsed time. In a
    pipe or a log, after 2 s (OFFLOAD_PROGRESS_AFTER_S), a line when the message changes (looked
    at every 0.5 s) or every 10 s; with ``every_step`` (steps that each take a while), a line for
    every message at once, so a run is never silent for long.

    >>> with progress("simulating") as say:
    ...     say("simulating 2 of 3")
    """
    if err.is_terminal:
        with _terminal_progress(first, total) as steps:
            yield steps
        return
    if every_step:
        yield Steps(first, total, _line_per_message(first))
        return
    with _logged_progress(first, total) as steps:
        yield steps


def _line_per_message(first: str) -> Callable[[Steps], None]:
    """Each new message as a line on stderr (the first is the spinner's title: not a step)."""
    shown = [first]

    def say(steps: Steps) -> None:
        if steps.message != shown[0]:
            shown[0] = steps.message
            err.print(steps.message, markup=False, highlight=False, soft_wrap=True)

    return say


@contextmanager
def _terminal_progress(first: str, total: float | None) -> Iterator[Steps]:
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    bar_columns = (BarColumn(), TextColumn("{task.percentage:>3.0f}%")) if total else ()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), *bar_columns, TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(escape(first), total=total)

        def show(s: Steps) -> None:
            bar.update(task, description=escape(s.message), completed=s.completed, total=s.total)

        yield Steps(first, total, show)


@contextmanager
def _logged_progress(first: str, total: float | None) -> Iterator[Steps]:
    import os
    import threading
    import time

    steps, stop, start = Steps(first, total, lambda _: None), threading.Event(), time.monotonic()
    try:
        quiet = float(os.environ.get("OFFLOAD_PROGRESS_AFTER_S", "2"))
    except ValueError:
        quiet = 2.0

    def log() -> None:  # quiet at first; then what it is doing, when that changes or every 10 s
        shown, at = "", 0.0
        while not stop.wait(0.1 if quiet <= 0 else 0.5):
            now = time.monotonic()
            if now - start >= quiet and (steps.message != shown or now - at >= 10.0):
                shown, at = steps.message, now
                err.print(steps.line(now - start), markup=False, highlight=False, soft_wrap=True)

    thread = threading.Thread(target=log, daemon=True)
    thread.start()
    try:
        yield steps
    finally:
        stop.set()
        thread.join()


def finite_numbers(command: Any) -> Any:
    """Makes every float option and argument of ``command`` and its subcommands refuse nan and
    ±inf (typer takes both as floats, and a range with only a lower bound lets inf through), with
    the usual usage error (exit 2); returns ``command``. The one home of that rule: each option
    states its own range (``min=``/``max=``, shown in --help), never a nan check of its own."""
    for sub in getattr(command, "commands", {}).values():
        finite_numbers(sub)
    for param in command.params:
        descriptor = getattr(param, "type_descriptor", None)
        if getattr(descriptor, "annotation", None) is float:
            param.callback = _finite(param.callback)
    return command


def reflowed_help(command: Any) -> Any:
    """Joins the lines of every prose paragraph of ``command``'s help and its subcommands' into
    one (the terminal wraps them once, not twice: a docstring's own line breaks read raggedly
    after rich wraps them again); indented blocks (examples) and blank lines stay as they are.
    Returns ``command``."""
    import inspect
    import re

    for sub in getattr(command, "commands", {}).values():
        reflowed_help(sub)
    for param in command.params:  # "[costs]" is text, not a rich markup tag that vanishes
        if getattr(param, "help", None):
            param.help = re.sub(r"(?<!\\)\[", r"\\[", param.help)
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(
            p if p.startswith((" ", "\b")) else " ".join(p.split()) for p in paragraphs
        )
    return command


def _finite(callback: Callable[..., Any] | None) -> Callable[..., Any]:
    import math

    def check(ctx: Any, param: Any, value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else (value,)
        bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise typer.BadParameter(f"{bad[0]} is not a finite number", ctx=ctx, param=param)
        return callback(ctx, param, value) if callback is not None else value

    return check


def ints(text: str, *, minimum: int = 0) -> list[int]:
    """Comma-separated integers, each at least ``minimum``; a usage error (exit 2) otherwise."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected integers separated by commas, e.g. 1,2,4") from None
    if any(v < minimum for v in values):
        raise typer.BadParameter(f"{text!r}: every value is at least {minimum}")
    return values


def floats(text: str, *, minimum: float = 0.0) -> list[float]:
    """Comma-separated finite numbers, each at least ``minimum``; a usage error otherwise."""
    import math

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected numbers separated by commas, e.g. 0,5000") from None
    if any(not math.isfinite(v) or v < minimum for v in values):
        raise typer.BadParameter(f"{text!r}: every value is a finite number, at least {minimum:g}")
    return values


def choices(text: str, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    """Comma-separated names, each one of ``known``; a located error (exit 2) otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise fail(f"unknown {what} {', '.join(bad) or repr(text)}; one of {', '.join(known)}")
    return names


def counts_arg(text: str) -> list[int]:
    """An argparse type (the benches' options): comma-separated integers, each at least 1."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected integers separated by commas, e.g. 1,64,4096"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value is at least 1")
    return values


def names_arg(known: tuple[str, ...] | list[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type (the benches' options): comma-separated names, each one of ``known``."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(bad) or repr(text)}; known: {', '.join(known)}"
            )
        return names

    return parse


def size_bytes(text: str) -> int:
    """'8G', '512M', '64k' or a plain byte count (binary multiples), at least 1 byte and finite;
    ValueError if not."""
    import math

    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        number = float(t[:-1] if mult > 1 else t)
    except ValueError:
        raise ValueError(f"size {text!r}: write bytes or a number with K, M, G or T (e.g. 8G)") from None
    if not math.isfinite(number) or number * mult < 1:
        raise ValueError(f"size {text!r}: expected a finite size of at least 1 byte (e.g. 8G)")
    return int(number * mult)


def seconds(s: float | None) -> str:
    """A duration as µs below a millisecond, else ms; "-" for none."""
    return "-" if s is None else (f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms")


def oneline(e: BaseException) -> str:
    """An error as one line: a WriteError's own words (they name the file), else its text."""
    from offload.files import WriteError

    text = e.strerror if isinstance(e, WriteError) and e.strerror else str(e)
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


def compact_table(title: str) -> Table:
    """A table that reads in 80 columns: a rule under the header, no frame, one space between
    columns; cells are never cut short ("nod… unp…"), they wrap instead."""
    from rich import box

    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False,
                 min_width=min(80, len(title)))  # fmt: skip


def enter_netns(netns: str | None) -> None:
    """Re-runs this command inside the network namespace ``netns`` (made if missing) unless it
    runs there already; None: stays where it is. Where namespaces are not available here, a
    located error (exit 2) says why."""
    if netns is None:
        return
    from offload.host import links as L

    why = L.unavailable_reason()
    if why:
        raise fail(f"--netns: {why}")
    L.reexec_inside(netns)
