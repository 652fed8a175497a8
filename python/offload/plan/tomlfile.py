"""TOML inputs of the planner (price catalogs, scenarios) with errors that say where: every
problem is reported as `file:line:column: what`, also for values that parse but make no sense
(tomllib itself only locates syntax errors)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?")


class InputError(ValueError):
    """A bad planner input, located."""

    def __init__(self, path: Path | str, line: int, column: int, message: str) -> None:
        self.path, self.line, self.column, self.message = Path(path), line, column, message
        super().__init__(f"{path}:{line}:{column}: {message}")


@dataclass(frozen=True)
class Document:
    """A parsed TOML file that can point back at its own keys."""

    path: Path
    text: str
    data: dict[str, Any]

    def error(self, keys: tuple[str | int, ...], message: str) -> InputError:
        line, column = locate(self.text, keys)
        return InputError(self.path, line, column, message)


def load(path: Path | str) -> Document:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InputError(p, 0, 0, f"cannot read: {e.strerror or e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        raise InputError(p, line, col, re.sub(r"\s*\(at line.*\)$", "", str(e))) from None
    return Document(p, text, data)


def locate(text: str, keys: tuple[str | int, ...]) -> tuple[int, int]:
    """(line, column), 1-based, of the value at `keys` — e.g. ("deployment", 2, "item") is the
    `item` of the third [[deployment]]. Falls back to the enclosing table's header, then to
    the top of the file, when the key is not written there (a missing key)."""
    lines = text.splitlines()
    table: list[str | int] = []
    key: str | None = None
    if keys and isinstance(keys[-1], str):
        *table, key = list(keys)
        # ("workload",) names a table, not a key: point at its header.
        if not table and _find_header(lines, [key]) is not None:
            table, key = [key], None
    else:
        table = list(keys)
    start, end = 0, len(lines)
    if table:
        found = _find_header(lines, table)
        if found is None:
            return (1, 1)
        start, end = found
        if key is None:
            return (start + 1, 1)
    else:
        end = next((i for i, ln in enumerate(lines) if _HEADER.match(ln)), len(lines))
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key or '')}[\"']?\s*=\s*")
    for i in range(start + (1 if table else 0), end):
        m = pattern.match(lines[i])
        if m:
            return (i + 1, m.end() + 1)
    return (start + 1, 1)


def _find_header(lines: list[str], table: list[str | int]) -> tuple[int, int] | None:
    """The line span [header, next header) of a table (`name`, or `name`, index for arrays)."""
    name = ".".join(str(k) for k in table if isinstance(k, str))
    index = next((k for k in table if isinstance(k, int)), None)
    seen = -1
    for i, ln in enumerate(lines):
        m = _HEADER.match(ln)
        if not m or m.group(2).replace('"', "").replace("'", "").strip() != name:
            continue
        if index is not None:
            if m.group(1) != "[[":
                continue
            seen += 1
            if seen != index:
                continue
        end = next((j for j in range(i + 1, len(lines)) if _HEADER.match(lines[j])), len(lines))
        return (i, end)
    return None


def check_keys(doc: Document, where: tuple[str | int, ...], table: dict[str, Any], known: set[str]) -> None:
    """Unknown keys are errors (a typo must not silently fall back to a default)."""
    for k in table:
        if k not in known:
            raise doc.error((*where, k), f"unknown key {k!r}; expected one of: {', '.join(sorted(known))}")


def expect_str(doc: Document, keys: tuple[str | int, ...], v: Any) -> str:
    """A text value, or a located error naming the type that was expected."""
    if not isinstance(v, str):
        raise doc.error(keys, f"expected a string, not {v!r}")
    return v


def expect_bool(doc: Document, keys: tuple[str | int, ...], v: Any) -> bool:
    if not isinstance(v, bool):
        raise doc.error(keys, f"expected true or false, not {v!r}")
    return v


def expect_table(doc: Document, keys: tuple[str | int, ...], v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise doc.error(keys, f"expected a table ([{'.'.join(str(k) for k in keys)}]), not {v!r}")
    return v


def expect_tables(doc: Document, keys: tuple[str | int, ...], v: Any) -> list[dict[str, Any]]:
    """An array of tables ([[name]] sections)."""
    if not isinstance(v, list) or not all(isinstance(t, dict) for t in v):
        raise doc.error(keys, f"expected [[{'.'.join(str(k) for k in keys)}]] tables, not {v!r}")
    return v
