"""What every `offload` subcommand shares: the two consoles (``console`` for stdout, ``err`` for
stderr), the one ``--json`` and ``--out`` options and ``emit``, which writes a JSON result to both,
located-error exits (``fail``, ``failing``, ``oneline``), comma lists, sizes with K/M/G/T, how a
duration is printed, tables that read in 80 columns, and re-running a command inside a network
namespace."""

from __future__ import annotations

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


def ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected integers separated by commas, e.g. 1,2,4") from None


def floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected numbers separated by commas, e.g. 0,5000") from None


def choices(text: str, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    """Comma-separated names, each one of ``known``; a located error (exit 2) otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise fail(f"unknown {what} {', '.join(bad) or repr(text)}; one of {', '.join(known)}")
    return names


def size_bytes(text: str) -> int:
    """'8G', '512M', '64k' or a plain byte count (binary multiples); ValueError if neither."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise ValueError(f"size {text!r}: write bytes or a number with K, M, G or T (e.g. 8G)") from None


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
