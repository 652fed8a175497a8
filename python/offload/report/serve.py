"""The service's section: `offload serve sweep` (each configuration's throughput and latency,
the Pareto front, and the plot written beside the sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.report.markup import Markup, img_beside, missing, table


def sweep_section(sweep: dict[str, Any] | None, path: Path | None) -> Markup:
    if sweep is None:
        return missing("service sweep", "offload serve sweep ... --out sweep.json")
    front = set(sweep.get("pareto", []))
    rows = [
        (
            r["label"],
            f"{r['queries_per_s']:,.0f}",
            f"{r['p50_us']:,.0f}",
            f"{r['p99_us']:,.0f}",
            "yes" if r["label"] in front else "",
        )
        for r in sorted(sweep["rows"], key=lambda r: -r["queries_per_s"])
    ]
    out = table(("configuration", "queries/s", "p50 µs", "p99 µs", "Pareto"), rows)
    return out + img_beside(path, ".png", "sweep Pareto")
