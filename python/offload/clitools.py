"""What every `offload` subcommand shares: the two consoles (``console`` for stdout, ``err`` for
stderr), the one ``--json`` option, located-error exits (``fail``, ``failing``), comma lists,
sizes with K/M/G/T, and how a duration is printed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

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
