"""What `offload rules explain` shows for one query: its values (a row of a queries CSV, or
CODE=VALUE pairs), the winning rule, its score, the criteria it matched, the runner-up, and a
matcher's own answer beside for comparison."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from offload.rules import CompiledRules, RuleSet
from offload.rules.bench import load_query_columns


def values_from_file(rs: RuleSet, queries: Path, query_id: str) -> list[str]:
    """The values of query ``query_id`` of a queries CSV, in the rule type's criterion order.
    ValueError when the file has no such query; RuleError for a bad file."""
    ids, cols = load_query_columns(rs, queries)
    if query_id not in ids:
        raise ValueError(f"no query {query_id!r} in {queries}")
    i = ids.index(query_id)
    return [c[i] for c in cols]


def values_from_pairs(rs: RuleSet, pairs: Sequence[str]) -> list[str]:
    """The values given as CODE=VALUE pairs, in the rule type's criterion order. ValueError
    naming unknown criteria or the ones without a value (every criterion needs one)."""
    codes = rs.criterion_codes
    given: dict[str, str] = {}
    for pair in pairs:
        code, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"-v {pair!r}: expected CODE=VALUE, e.g. -v {codes[0]}=...")
        if code in given:
            raise ValueError(
                f"-v {code} given twice ({given[code]!r}, then {value!r}); give each criterion once"
            )
        given[code] = value
    unknown = set(given) - set(codes)
    if unknown:
        raise ValueError(f"unknown criteria {', '.join(sorted(unknown))}; expected {', '.join(codes)}")
    missing = [c for c in codes if c not in given]
    if missing:
        raise ValueError(f"give a value for every criterion: missing {', '.join(missing)} (-v CODE=VALUE)")
    return [given[c] for c in codes]


def explain_query(rs: RuleSet, values: Sequence[str], matcher: str) -> dict[str, Any]:
    """The engine's explanation of one query (winner, runner-up, matching rules) with
    ``matcher``'s answer under "matcher": {"name", "rule"} (rule index, -1 for none)."""
    eng = CompiledRules(rs, matcher)
    ex = eng.explain(list(values))
    res = eng.match([[v] for v in values])
    ex["matcher"] = {"name": matcher, "rule": int(res.rule[0])}
    return ex


def agrees(ex: dict[str, Any]) -> bool:
    """Whether the matcher's answer is the explanation's winner."""
    return bool((ex["winner"] or {}).get("index", -1) == ex["matcher"]["rule"])
