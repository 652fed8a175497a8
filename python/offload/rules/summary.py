"""What `offload rules check` and `offload rules compile` report about a rule set: its
per-criterion statistics, and each matcher's compile time, memory and structure."""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from typing import Any

from offload.rules import CompiledRules, RuleSet


def check_summary(rs: RuleSet, load_s: float) -> dict[str, Any]:
    """The rule set's type, size, distinct contents and, per criterion, its kind, weight and
    how many rules name a specific value (count, share) and how many distinct values."""
    stats = rs.criterion_stats()
    return {
        "rule_type": rs.code,
        "rules": len(rs),
        "criteria": len(stats),
        "load_s": load_s,
        "distinct_contents": len(set(rs.contents.tolist())),
        "criterion_stats": [
            {
                "code": code,
                "kind": kind,
                "mandatory": mand,
                "weight": w,
                "specific": spec,
                "specific_share": spec / len(rs) if len(rs) else 0.0,
                "distinct": distinct,
            }
            for (code, spec, distinct), (_, kind, mand, w) in zip(stats, rs.criteria, strict=True)
        ],
    }


def compile_summary(
    rs: RuleSet, matchers: Sequence[str], load_s: float, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Compiles ``rs`` with each matcher: compile time, memory and structure per matcher, and
    the process's peak memory; ``progress(name)`` is called before each compile. A device
    matcher without its device raises RuntimeError with the reason."""
    say = progress or (lambda _name: None)
    report: dict[str, Any] = {"rules": len(rs), "load_s": load_s, "matchers": {}}
    for name in matchers:
        say(name)
        eng = CompiledRules(rs, name)
        report["matchers"][name] = {
            "compile_s": eng.compile_seconds,
            "memory_bytes": eng.memory_bytes(),
            "structure": eng.stats(),
        }
    report["peak_rss_mb"] = peak_rss_mb()
    return report


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
