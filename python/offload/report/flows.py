"""The particle data-flow sections: `offload flows partition` (seconds per GB by step, per data
set, node budget and codec) and `offload flows run` over several nodes (each node's steps, the
pipeline model's error and its prediction for 100 nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.report.markup import Markup, html, img_beside, meta, missing, table


def flows_section(d: Any, path: Path | None = None) -> Markup:
    """Particle data flows: the partition service per data set, node budget and codec (`offload
    flows partition --json` or the flows benchmark), seconds per GB and bytes out over in."""
    if d is None:
        return missing("partition runs", "offload flows partition --json > partition.json (docs/flows.md)")
    runs = d["runs"] if isinstance(d, dict) else d
    rows = []
    for r in runs:
        gb = r["bytes_in"] / 1e9 or 1.0
        steps = [f"{r[k] / gb:.2f}" for k in ("unpack_s", "split_s", "repack_s", "compress_s")]
        rows.append((r["dataset"], r["profile"], r["codec"], *steps, f"{r['s_per_gb']:.2f}",
                     f"{r['bytes_out'] / r['bytes_in']:.2f}"))  # fmt: skip
    heads = ("data set", "budget", "codec", "unpack s/GB", "split", "repack", "compress", "total s/GB")
    heads += ("out / in",)
    out = meta("the seed: the host ≈ 4× faster than a BlueField-2") + table(heads, rows, 3)
    return out + img_beside(path, ".png", "partition breakdown")


def nodes_section(d: Any, path: Path | None = None) -> Markup:
    """The particle pipeline over several nodes (`offload flows run --json`, or the flows
    benchmark's nodes part with its model): input rate and each node's mean seconds by step, and
    the pipeline model's error and its prediction for 100 nodes where the benchmark made them."""
    if d is None:
        return missing(
            "runs over several nodes", "python benches/flows_bench.py --parts nodes (docs/flows.md)"
        )
    runs = d["runs"] if isinstance(d, dict) else d
    by_count: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        by_count.setdefault(r["nodes"], []).append(r)
    # of repeated runs, the one with the median rate stands for its node count
    runs = [sorted(rs, key=lambda r: r["gb_per_s"])[len(rs) // 2] for _, rs in sorted(by_count.items())]
    checks = {c["nodes"]: c for c in d.get("validation", [])} if isinstance(d, dict) else {}
    steps = ("unpack_s", "split_s", "repack_s", "compress_s", "transfer_s", "merge_s")
    rows = []
    for r in runs:
        per = [n["breakdown"] for n in r["per_node"].values()]
        means = [f"{sum(b[k] for b in per) / max(1, len(per)):.2f}" for k in steps]
        c = checks.get(r["nodes"])
        model = "—"
        if c:
            role = "fit" if c["fitted_on"] else "held out"
            model = f"{1e3 * c['predicted_gb_per_s']:.1f} ({c['error']:+.1%}, {role})"
        rows.append((str(r["nodes"]), f"{1e3 * r['gb_per_s']:.1f}", model, *means))
    heads = ("nodes", "MB/s", "model MB/s", *(k.removesuffix("_s") + " s" for k in steps))
    first = runs[0]
    out = meta(f"{first.get('profile', '')} nodes, {first['rows']:,} {first['dataset']}")
    out += table(heads, rows, numeric_from=1)
    for k, p in (d.get("predict_100", {}) if isinstance(d, dict) else {}).items():
        out += html("<p>100 such nodes, the seed's 64M particles, {}: <b>{:.2f} GB/s</b> ({}-bound); "
                    "the seed: 1.32 GB/s</p>", k, p["gb_per_s"], p["bound"])  # fmt: skip
    return out + img_beside(path, ".png", "nodes breakdown")
