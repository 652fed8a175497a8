"""The ERBIUM-format files: ``ruletype.xml`` and ``rules.csv`` of a rule set, ``queries.csv`` and
``requests.csv`` of a trace, each written whole or not at all (:mod:`offload.files`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from offload.files import write_bytes
from offload.rules.synth.criteria import CRITERIA, CRITERION_CODES
from offload.rules.synth.ruleset import SynthRules
from offload.rules.synth.trace import SynthTrace

_EQU_FILE = {
    2: "criterionType_alphastring2-2.xml",
    3: "criterionType_alphastring3-3.xml",
    4: "criterionType_alphastring1-4.xml",
}


def ruletype_xml(seed: int) -> str:
    """Return the ERBIUM rule-type definition of the synthetic MCT rule type.

    Equality criteria reference functor 273 and carry one ``<guiProperties>``; the date
    range (MCT_PRD, functor 212) and the integer ranges (IN/OUT_FLT_RG, functor 412) carry
    two, which is how ERBIUM recognises a pair criterion. ``seed`` only appears in the
    description, so files from different seeds say where they came from.
    """
    widths = {"CTN_TYPE": 2, "IN_CRR": 2, "OUT_CRR": 2, "NXT_CTRY": 2, "PRV_CTRY": 2}
    widths |= {"MCT_BRD": 3, "MCT_OFF": 3, "NXT_APT": 3, "PRV_APT": 3, "IN_EQP": 3}
    widths |= {"OUT_EQP": 3}
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<ruleTypeDefinition>",
        "<code>MCT</code>",
        "<subversion>1</subversion>",
        (
            "<description>Synthetic Minimum Connecting Time rules "
            f"(offload rules synth, seed {int(seed)})</description>"
        ),
    ]
    for seq, spec in enumerate(CRITERIA):
        if spec.kind == "date_range":
            ref, n_gui = (212, "criterionType_datepair.xml"), 2
        elif spec.kind == "int_range":
            ref, n_gui = (412, "criterionType_integerrange.xml"), 2
        else:
            ref, n_gui = (273, _EQU_FILE[widths.get(spec.code, 4)]), 1
        lines += [
            "<criterionDefinition>",
            f"<code>{spec.code}</code>",
            f"<sequenceNumber>{seq}</sequenceNumber>",
            (
                f"<criterionTypeReference><id>{ref[0]}</id><fileName>{ref[1]}</fileName>"
                "</criterionTypeReference>"
            ),
            f"<isMandatory>{'true' if spec.mandatory else 'false'}</isMandatory>",
            f"<weight>{spec.weight}</weight>",
        ]
        lines += ["<guiProperties></guiProperties>"] * n_gui
        lines.append("</criterionDefinition>")
    lines.append("</ruleTypeDefinition>")
    return "\n".join(lines) + "\n"


def _quoted(values: Sequence[str] | np.ndarray) -> list[str]:
    """Double-quote non-empty values; empty stays empty (= wildcard in ERBIUM's CSV)."""
    return [f'"{v}"' if v else "" for v in values]


def _write_lines(path: Path, header: Sequence[str], cols: Sequence[Sequence[str]]) -> None:
    # Values never contain quotes, commas or newlines (codes, dates, numbers, sanitised
    # state names), so joining is safe and ~5x faster than csv.writer at 100k+ rows.
    body = "\n".join(",".join(row) for row in zip(*cols, strict=True))
    text = ",".join(header) + "\n" + (body + "\n" if body else "")
    write_bytes(path, text.encode("utf-8"))  # whole or not at all (offload.files)


def write_ruleset(out_dir: Path, rules: SynthRules) -> tuple[Path, Path]:
    """Write ``ruletype.xml`` and ``rules.csv`` (ERBIUM format) into ``out_dir``.

    ``rules.csv`` columns: ``RULE_ID,WEIGHT,STATUS,VICEVERSA,TAGS,CRITERIA,<22 criteria>,
    CONTENT,Hour,INVALID,Minutes``. Non-empty values are double-quoted, wildcards are empty
    cells; STATUS/VICEVERSA/TAGS/CRITERIA/CONTENT are empty; INVALID rules have Hour and
    Minutes 0 (their ERBIUM content is 999). Returns the two paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    xml_path = out_dir / "ruletype.xml"
    csv_path = out_dir / "rules.csv"
    write_bytes(xml_path, ruletype_xml(rules.seed).encode("utf-8"))
    n = len(rules)
    empty = [""] * n
    header = ["RULE_ID", "WEIGHT", "STATUS", "VICEVERSA", "TAGS", "CRITERIA"]
    header += [*list(CRITERION_CODES), "CONTENT", "Hour", "INVALID", "Minutes"]
    cols: list[Sequence[str]] = [
        _quoted(rules.rule_id),
        _quoted(rules.score.astype(str)),
        empty,
        empty,
        empty,
        empty,
    ]
    cols += [_quoted(rules.columns[c]) for c in CRITERION_CODES]
    cols += [
        empty,
        _quoted((rules.minutes // 60).astype(str)),
        ['"TRUE"' if x else '"FALSE"' for x in rules.invalid.tolist()],
        _quoted((rules.minutes % 60).astype(str)),
    ]
    _write_lines(csv_path, header, cols)
    return xml_path, csv_path


def write_trace(out_dir: Path, trace: SynthTrace) -> tuple[Path, Path]:
    """Write ``queries.csv`` and ``requests.csv`` into ``out_dir``; return the two paths.

    ``queries.csv``: ``QUERY_ID,<22 criteria>``, every value double-quoted and non-empty.
    ``requests.csv``: ``REQUEST_ID,FIRST_QUERY,N_QUERIES,WANTED``; FIRST_QUERY is the
    0-based index of the request's first data row in ``queries.csv``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    q_path = out_dir / "queries.csv"
    r_path = out_dir / "requests.csv"
    q_cols = [_quoted(trace.query_id)] + [_quoted(trace.columns[c]) for c in CRITERION_CODES]
    _write_lines(q_path, ["QUERY_ID", *CRITERION_CODES], q_cols)
    r_cols = [
        _quoted(trace.request_id),
        trace.first_query.astype(str).tolist(),
        trace.n_queries.astype(str).tolist(),
        trace.wanted.astype(str).tolist(),
    ]
    _write_lines(r_path, ["REQUEST_ID", "FIRST_QUERY", "N_QUERIES", "WANTED"], r_cols)
    return q_path, r_path
