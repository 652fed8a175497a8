"""The recommendation-inference section: `offload recsys bench` (every strategy of RM-SSD side
by side, the seed's Table IV, and the figures written beside the result)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.report.markup import Markup, html, img, meta, missing, table


def recsys_section(b: dict[str, Any] | None, path: Path | None) -> Markup:
    """RM-SSD: every strategy side by side (offload recsys bench), with its figures beside it."""
    if b is None:
        return missing("recsys benchmark", "offload recsys bench -m MODEL_DIR --out recsys.json --plots DIR")
    out = meta(
        f"{b['model']}, {b['table_bytes'] / 2**30:.2f} GiB of tables, {b['mode']} mode, "
        f"{b['trace']['batches']} batches × {b['trace']['batch_size']}, {b['date']}; "
        f"{b['machine'].get('cpu', '')}"
    )
    vs = b.get("vs_ssd_s", {})
    rows = []
    for name, r in b["strategies"].items():
        x = vs.get(name, {})
        rows.append(
            (
                name,
                f"{r['throughput_per_s']:,.0f}" if r["throughput_per_s"] else "-",
                f"{r['latency_s']['p50'] * 1e3:.3f}",
                f"{r['read_amplification']:.1f}×",
                f"{r['traffic_bytes_per_sample']:,.0f}",
                f"{x['throughput_x']:.1f}×" if x.get("throughput_x") else "-",
                f"{x['traffic_reduction_x']:,.0f}×" if x.get("traffic_reduction_x") else "-",
                f"{r['max_abs_diff_vs_first']:.1e}",
            )
        )
    heads = ("strategy", "inferences/s", "p50 ms", "read ampl.", "bytes/inference", "× ssd-s", "traffic ÷",
             "Δ answers")  # fmt: skip
    out += table(heads, rows)
    paper = (b.get("paper") or {}).get("table_iv")
    if paper:
        seed = ", ".join(f"{k} {v:,}×" for k, v in paper.items())
        out += html("<p>The seed's Table IV (traffic reduction vs SSD-S): {}</p>", seed)
    stem = f"{b['model']}-{b['mode']}"
    for fig in ("breakdown", "io", "sls"):
        png = path.parent / f"{stem}-{fig}.png" if path else None
        if png is not None and png.exists():
            out += img(png, alt=f"recsys {fig}")
    return out
