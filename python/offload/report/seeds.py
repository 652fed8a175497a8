"""The reproduction index (issue 27): every table, figure and headline claim of the seed papers
beside the command that reproduces it, our figure, the machine and a verdict.

The rows live in ``data/seeds/index.toml``. A row's ``our`` figure is text in which ``{expr}`` or
``{expr:format}`` is read from the JSON its ``result`` names (benches/results/), so the markdown
generated from both (docs/seeds.md, by ``offload report --seeds``) cannot drift from either. An
``expr`` is a pointer, a number, or several joined by `` / ``, `` * ``, `` - ``, `` + ``
(spaces around, evaluated left to right). A pointer walks the JSON by dots: ``matchers.fast.qps``;
a number walks a list (``runs.0.qps``) or names a dict key; ``[key=value]`` picks the list element
whose ``key`` equals ``value``; ``@1.`` starts in the second of several ``result`` files.

Every row is checked before anything is written, each failure one line naming the row: unknown
or missing fields, an unknown verdict or seed, a ``result`` file that is not there, a pointer that
does not resolve, a command that is not a command of ``offload`` (the caller gives the command
tree, since this module sits below the CLI), nor ``python <file>``, ``make <target>`` or a script
of the repository; and a row whose claim or reason says it was fitted or back-solved cannot be
called reproduced.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload.datafiles import data_path
from offload.report.markup import Markup, html, meta, table

__all__ = [
    "SEEDS",
    "VERDICTS",
    "Row",
    "SeedIndexError",
    "command_paths",
    "load",
    "markdown",
    "notes",
    "seeds_section",
]

VERDICTS: dict[str, str] = {
    "reproduced": "our measured figure supports the seed's claim, on our machine or at a stated scaling",
    "deviation": "reproduced with a stated deviation: other hardware, scale or method, named in *why*",
    "fitted": "a figure fitted or back-solved to the seed's own number: it agrees by construction, so it "
    "is never counted as reproduced",
    "not-reproduced": "measured and not matching, or not measured: *why* says which",
    "needs-hardware": "needs hardware we lack, named in *why*",
}
"""Verdict → what it means. Order = column order of the summary."""

SEEDS: dict[str, str] = {
    "000/001": "ERBIUM: an FPGA business-rule engine served over ZeroMQ (Amadeus MCT; seeds 000 and 001, "
    "one paper: Maschi & Alonso, DaMoN '23)",
    "002": "RM-SSD: recommendation inference inside an SSD (seed 002)",
    "003": "Composable data services on SmartNICs and embedded storage (seed 003, 74 slides)",
    "004": "CPU-FPGA channel microarchitectures (seed 004: Choi et al., TRETS 2019)",
}

REQUIRED = ("seed", "item", "claim", "command", "result", "our", "machine", "verdict", "why")
FITTED = re.compile(r"\bfit(ted|ting)?\b|back-solv|\btuned to\b", re.IGNORECASE)
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
OPERATOR = re.compile(r"\s([*/+-])\s")
SEGMENT = re.compile(r"\[([^\]=]+)=([^\]]*)\]|[^.\[\]]+")
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")


class SeedIndexError(ValueError):
    """A row of the index (or its file) that cannot be used; the message names it."""


@dataclass(frozen=True)
class Row:
    """One table, figure or claim of a seed, resolved: ``our`` has its figures filled in."""

    seed: str
    item: str
    claim: str
    command: str
    results: tuple[str, ...]
    our: str
    machine: str
    verdict: str
    why: str


def load(
    path: Path | None = None, root: Path = Path("."), commands: Collection[tuple[str, ...]] | None = None
) -> list[Row]:
    """The rows of the index at ``path`` (default: the shipped ``data/seeds/index.toml``), every
    one checked and its figures read from the JSON under ``root`` (the repository). ``commands``:
    the invocable command paths of ``offload`` (:func:`command_paths`); None skips that check."""
    path = path or data_path("seeds", "index.toml")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SeedIndexError(f"{path}: cannot read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise SeedIndexError(f"{path}: not TOML ({e})") from None
    raw = doc.get("item")
    if not isinstance(raw, list) or not raw:
        raise SeedIndexError(f"{path}: no [[item]] rows")
    return [_row(r, f"{path}, row {i}", root, commands) for i, r in enumerate(raw, 1)]


def notes(path: Path | None = None) -> dict[str, str]:
    """The index's ``[notes]``: a line per seed on what has no row, and why."""
    path = path or data_path("seeds", "index.toml")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8")).get("notes", {})
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SeedIndexError(f"{path}: cannot read its notes ({e})") from None
    bad = (
        [k for k, v in raw.items() if k not in SEEDS or not isinstance(v, str)]
        if isinstance(raw, dict)
        else ["?"]
    )
    if bad:
        raise SeedIndexError(
            f"{path}: [notes] takes one text per seed ({', '.join(SEEDS)}); not {', '.join(bad)}"
        )
    return dict(raw)


def _row(r: Any, where: str, root: Path, commands: Collection[tuple[str, ...]] | None) -> Row:
    """One checked, resolved row; ``where`` names it in every error."""
    if not isinstance(r, dict):
        raise SeedIndexError(f"{where}: not a table")
    if isinstance(r.get("seed"), str) and isinstance(r.get("item"), str):
        where = f"{where} ({r['seed']} {r['item']})"
    missing = [k for k in REQUIRED if k not in r]
    unknown = sorted(set(r) - set(REQUIRED))
    problems = [
        f"{what} {', '.join(keys)}" for what, keys in (("missing", missing), ("unknown", unknown)) if keys
    ]
    if problems:
        raise SeedIndexError(f"{where}: " + "; ".join(problems))
    results = tuple(r["result"]) if isinstance(r["result"], list) else (r["result"],) if r["result"] else ()
    texts = [r[k] for k in REQUIRED if k != "result"] + list(results)
    if not all(isinstance(t, str) for t in texts):
        raise SeedIndexError(f"{where}: every field is text (result: text or a list of texts)")
    _check_fields(r, where)
    if r["command"]:
        _check_command(r["command"], where, root, commands)
    data = [_read_result(root, p, where) for p in results]
    our = _fill(r["our"], data, where)
    return Row(
        r["seed"], r["item"], r["claim"], r["command"], results, our, r["machine"], r["verdict"], r["why"]
    )


def _check_fields(r: dict[str, str], where: str) -> None:
    """The rules on values: known seed and verdict, what each verdict needs, fitted ≠ reproduced."""
    if r["seed"] not in SEEDS:
        raise SeedIndexError(f"{where}: unknown seed {r['seed']!r}; one of {', '.join(SEEDS)}")
    if r["verdict"] not in VERDICTS:
        raise SeedIndexError(f"{where}: unknown verdict {r['verdict']!r}; one of {', '.join(VERDICTS)}")
    empty = [k for k in ("item", "claim", "our", "machine") if not r[k].strip()]
    if empty:
        raise SeedIndexError(f"{where}: empty {', '.join(empty)}")
    if r["verdict"] != "reproduced" and not r["why"].strip():
        raise SeedIndexError(
            f"{where}: verdict {r['verdict']} needs a why (the deviation, reason or hardware)"
        )
    if r["verdict"] in ("reproduced", "deviation", "fitted") and not r["command"].strip():
        raise SeedIndexError(f"{where}: verdict {r['verdict']} needs the command that gives our figure")
    if r["verdict"] == "reproduced" and (FITTED.search(r["claim"]) or FITTED.search(r["why"])):
        raise SeedIndexError(f"{where}: fitted or back-solved, so it cannot be 'reproduced' (use 'fitted')")


def _check_command(
    command: str, where: str, root: Path, commands: Collection[tuple[str, ...]] | None
) -> None:
    """Each part of ``a && b`` is a command of offload, ``python <file>``, ``make <target>`` or a
    script of the repository."""
    for part in command.split("&&"):
        try:
            words = shlex.split(part)
        except ValueError as e:
            raise SeedIndexError(f"{where}: command {part.strip()!r} does not parse ({e})") from None
        if not words:
            raise SeedIndexError(f"{where}: an empty command in {command!r}")
        problem = _command_problem(words, root, commands)
        if problem:
            raise SeedIndexError(f"{where}: {problem}")


def _command_problem(
    words: list[str], root: Path, commands: Collection[tuple[str, ...]] | None
) -> str | None:
    """Why ``words`` is not a command we can point at, or None."""
    head = words[0]
    if head == "offload" or head.endswith("/offload"):
        if commands is None:
            return None
        path: tuple[str, ...] = ()
        for w in words[1:]:
            if w.startswith("-") or not any(c[: len(path) + 1] == (*path, w) for c in commands):
                break
            path = (*path, w)
        if path in commands:
            return None
        shown = " ".join(["offload", *path, *words[1 + len(path) : 2 + len(path)]])
        return f"no command `{shown}`"
    if head == "python" or head.endswith("/python"):
        script = next((w for w in words[1:] if not w.startswith("-")), None)
        if script is None or not (root / script).is_file():
            return f"no script {script!r} for `{' '.join(words[:2])}` (run from the repository root)"
        return None
    if head == "make":
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        makefile = root / "Makefile"
        text = makefile.read_text(encoding="utf-8") if makefile.is_file() else ""
        absent = [t for t in targets if not re.search(rf"^{re.escape(t)}\s*:", text, re.MULTILINE)]
        return f"no make target {', '.join(absent)} in {makefile}" if absent or not targets else None
    if "/" in head and (root / head).is_file():
        return None
    return f"command {head!r}: not offload, python <file>, make <target> or a script of the repository"


def _read_result(root: Path, rel: str, where: str) -> Any:
    """The JSON of one ``result`` file."""
    p = root / rel
    if not p.is_file():
        raise SeedIndexError(f"{where}: result {rel}: no such file (run from the repository root)")
    if p.suffix != ".json":
        return None  # a text record (a log beside the JSON): only its presence is checked
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SeedIndexError(f"{where}: result {rel}: not JSON ({e})") from None


def _fill(text: str, data: list[Any], where: str) -> str:
    """``text`` with every ``{expr:format}`` replaced by the figure it reads."""

    def one(m: re.Match[str]) -> str:
        expr, fmt = _split_format(m.group(1))
        value = _evaluate(expr.strip(), data, where)
        if isinstance(value, str):  # a label, read as it is
            return format(value, fmt)
        try:
            return format(value, fmt or (",d" if isinstance(value, int) else ".3g"))
        except (TypeError, ValueError) as e:
            raise SeedIndexError(f"{where}: format {fmt!r} for {expr.strip()!r} ({e})") from None

    out = PLACEHOLDER.sub(one, text)
    if "{" in out or "}" in out:
        raise SeedIndexError(f"{where}: an unpaired brace in our figure {text!r}")
    return out


def _split_format(field: str) -> tuple[str, str]:
    """``expr:format`` → (expr, format), at the first colon outside ``[...]`` (a selector's value
    may hold one)."""
    depth = 0
    for i, ch in enumerate(field):
        depth += (ch == "[") - (ch == "]")
        if ch == ":" and depth == 0:
            return field[:i], field[i + 1 :]
    return field, ""


def _evaluate(expr: str, data: list[Any], where: str) -> float | int | str:
    """A pointer, a number, or several joined by an operator, left to right; a lone pointer may
    name a text."""
    parts = OPERATOR.split(expr)
    if len(parts) == 1:
        return _operand(parts[0], data, where, text_ok=True)
    value = _operand(parts[0], data, where)
    for op, operand in zip(parts[1::2], parts[2::2], strict=True):
        x = _operand(operand, data, where)
        if op == "/" and x == 0:
            raise SeedIndexError(f"{where}: {expr!r} divides by zero")
        value = {"*": value * x, "/": value / x, "+": value + x, "-": value - x}[op]
    return value


def _operand(text: str, data: list[Any], where: str, text_ok: bool = False) -> Any:
    """A number, or the number (or, when ``text_ok``, the text) a pointer names."""
    text = text.strip()
    if NUMBER.fullmatch(text):
        return float(text)
    index = 0
    if text.startswith("@"):
        head, _, text = text.partition(".")
        index = int(head[1:]) if head[1:].isdigit() else -1
    if not 0 <= index < len(data) or data[index] is None:
        raise SeedIndexError(
            f"{where}: pointer {text!r} names result {index}, which is not a JSON file of the row"
        )
    value = resolve(data[index], text, where)
    if text_ok and isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SeedIndexError(f"{where}: pointer {text!r} is {value!r}, not a number")
    return value


def resolve(doc: Any, pointer: str, where: str = "pointer") -> Any:
    """The value at ``pointer`` (dots, list indices, ``[key=value]``) in ``doc``."""
    node = doc
    for m in SEGMENT.finditer(pointer):
        key, want, seg = m.group(1), m.group(2), m.group(0)
        if key is not None:
            elements = node if isinstance(node, list) else []
            found = [e for e in elements if isinstance(e, dict) and str(e.get(key)) == want]
            if len(found) != 1:
                raise SeedIndexError(f"{where}: pointer {pointer!r}: {len(found)} elements with {key}={want}")
            node = found[0]
        elif isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            raise SeedIndexError(f"{where}: pointer {pointer!r}: no {seg!r}")
    return node


def command_paths(group: Any) -> frozenset[tuple[str, ...]]:
    """The invocable command paths under a click group (``typer.main.get_command(app)``): every
    command, and every group that runs without a subcommand (``offload probe``). Groups are told
    by their ``list_commands``: typer ships its own copy of click, so no isinstance test holds."""
    out: set[tuple[str, ...]] = set()

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if hasattr(cmd, "list_commands"):
            if path and getattr(cmd, "invoke_without_command", False):
                out.add(path)
            ctx = cmd.context_class(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), (*path, name))
        else:
            out.add(path)

    walk(group, ())
    return frozenset(out)


def counts(rows: Iterable[Row]) -> dict[str, Counter[str]]:
    """Verdicts counted per seed."""
    out: dict[str, Counter[str]] = {s: Counter() for s in SEEDS}
    for r in rows:
        out[r.seed][r.verdict] += 1
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _result_links(r: Row, base: Path, root: Path) -> str:
    return ", ".join(
        f"[{Path(p).name}]({Path(os.path.relpath(root / p, base)).as_posix()})" for p in r.results
    )


def markdown(
    rows: list[Row], out: Path, root: Path = Path("."), seed_notes: Mapping[str, str] | None = None
) -> str:
    """The index as markdown for the file ``out`` (links to the JSON are relative to it), each
    seed's note (:func:`notes`) under its heading."""
    base = out.parent
    lines = [
        "# The seeds, reproduced or not",
        "",
        "<!-- generated: do not edit; change data/seeds/index.toml and regenerate -->",
        "Generated by `offload report --seeds docs/seeds.md` (from the repository root) from",
        "`data/seeds/index.toml` and the JSON in `benches/results/`; a test fails when this file differs.",
        "One row per table, figure or headline claim of each seed. Figures in *ours* come from the",
        "recorded JSON named in *result*; the machine is where that JSON was measured. Verdicts:",
        "",
        *(f"- **{v}**: {text}" for v, text in VERDICTS.items()),
        "",
        "Nothing fitted to a seed's own number is called reproduced.",
        "",
        "| seed | rows | " + " | ".join(VERDICTS) + " |",
        "|---|---|" + "---|" * len(VERDICTS),
    ]
    c = counts(rows)
    for s in SEEDS:
        lines.append(f"| {s} | {sum(c[s].values())} | " + " | ".join(str(c[s][v]) for v in VERDICTS) + " |")
    total = Counter(r.verdict for r in rows)
    lines.append(f"| all | {len(rows)} | " + " | ".join(str(total[v]) for v in VERDICTS) + " |")
    for s, title in SEEDS.items():
        note = (seed_notes or {}).get(s)
        lines += ["", f"## {s}: {title}", "", *([note, ""] if note else []),
                  "| item | the seed | command | ours | result | machine | verdict | why |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in (r for r in rows if r.seed == s):
            command = f"`{_cell(r.command)}`" if r.command else "—"
            cells = (r.item, r.claim, command, r.our, _result_links(r, base, root) or "—", r.machine,
                     f"**{r.verdict}**", r.why or "")  # fmt: skip
            lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def seeds_section(rows: list[Row]) -> Markup:
    """The index as a report section: the counts, then one table per seed."""
    c = counts(rows)
    counted = ((s, sum(c[s].values()), *(c[s][v] for v in VERDICTS)) for s in SEEDS)
    out = meta("every table, figure and claim of the seeds (data/seeds/index.toml; docs/seeds.md)")
    out += table(("seed", "rows", *VERDICTS), counted)
    heads = ("item", "the seed", "command", "ours", "machine", "verdict", "why")
    for s, title in SEEDS.items():
        body = [
            (r.item, r.claim, r.command or "—", r.our, r.machine, r.verdict, r.why)
            for r in rows
            if r.seed == s
        ]
        out += html("<h3>{}</h3>", f"{s}: {title}") + table(heads, body, numeric_from=len(heads))
    return out
