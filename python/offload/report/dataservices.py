"""The near-data section: `offload node case-study` (the seed's case studies on a node: the
estimate, the decision to offload or push back and why, ours beside the seed's figures)."""

from __future__ import annotations

from typing import Any

from offload.report.markup import Markup, html, items, meta, missing, table


def dataservices_section(d: Any) -> Markup:
    """Near-data queries: the seed's case studies on a node (offload node case-study), ours beside
    the seed's figures."""
    if d is None:
        return missing("case studies", "offload node case-study --out cases.json (docs/dataservices.md)")
    cases = d["cases"] if isinstance(d, dict) else d
    rows = []
    for r in cases:
        seed = r.get("seed", {})
        ms = r["measured_s"]
        rows.append(
            (
                f"Case {r['case']}",
                f"{r['estimated_rows']:,.1f}"
                + (f" [{seed['estimated_rows']:,.1f}]" if "estimated_rows" in seed else ""),
                f"{r['actual_rows']:,}" + (f" [{seed['actual_rows']:,}]" if "actual_rows" in seed else ""),
                f"{100 * r['estimate_error']:.2f}%",
                r["decision"] + (f" [{seed['decision']}]" if "decision" in seed else ""),
                f"{1e3 * ms['offload']:.1f}",
                f"{1e3 * ms['pushback']:.1f}",
                f"{100 * r['offload_faster_by']:.1f}%"
                + (f" [{100 * seed['offload_faster_by']:.1f}%]" if "offload_faster_by" in seed else ""),
                f"{r['transfer_mib']['offload']:.2f} / {r['transfer_mib']['pushback']:.1f}",
            )
        )
    heads = ("case", "estimated rows", "actual rows", "off by", "decision", "offload ms", "pushback ms",
             "offload faster by", "MiB offload / pushback")  # fmt: skip
    out = meta("the seed's figures in brackets") + table(heads, rows, numeric_from=1)
    return out + items(("", html("Case {}: {}", r["case"], r["why"])) for r in cases)
