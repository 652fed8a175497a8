"""The rule engine's sections: `offload rules bench` (throughput per matcher, compile, memory)
and the gpu matcher's run (`benches/gpu/run.sh`: rates with and without transfers, where the
device's time goes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.report.markup import Markup, html, img_beside, meta, missing, table


def rules_section(bench: dict[str, Any] | None, path: Path | None) -> Markup:
    if bench is None:
        return missing("rule-engine benchmark", "offload rules bench ... --out bench.json")
    rows = []
    for name, m in bench["matchers"].items():
        best = max(m["runs"], key=lambda r: r["queries_per_s"])
        rows.append(
            (
                name,
                f"{best['queries_per_s']:,.0f}",
                best["threads"],
                best["batch"],
                f"{m.get('compile_s', 0) * 1e3:,.1f} ms",
                f"{m.get('memory_bytes', 0) / 2**20:,.1f} MiB",
            )
        )
    out = meta(f"{bench['rules']:,} rules, {bench['queries']:,} queries, {bench['date']}")
    out += table(("matcher", "best queries/s", "threads", "batch", "compile", "memory"), rows)
    return out + img_beside(path, ".png", "rule engine throughput")


def gpu_section(d: dict[str, Any] | None, path: Path | None) -> Markup:
    """The gpu matcher (`benches/gpu/run.sh` on a GPU machine: `rules bench --matcher gpu,...`)."""
    if d is None:
        return missing("GPU results", "benches/gpu/run.sh on a GPU machine (its rules-gpu.json)")
    out = meta(f"{d['rules']:,} rules, {d['queries']:,} queries, {d['date']}")
    for name, why in d.get("skipped", {}).items():
        out += meta(f"{name}: skipped ({why})")
    rows = []
    for name, m in d["matchers"].items():
        stages = m.get("device_stages", {})
        split = (
            " / ".join(f"{1e3 * stages[k]:.2f}" for k in ("h2d_s", "kernel_s", "d2h_s")) if stages else "—"
        )
        kernel = f"{m['kernel_queries_per_s']:,.0f}" if "kernel_queries_per_s" in m else "—"
        for r in sorted(m["runs"], key=lambda r: (r["threads"], r["batch"])):
            rows.append((name, r["threads"], f"{r['batch']:,}", f"{r['queries_per_s']:,.0f}", kernel, split))
    heads = ("matcher", "threads", "batch", "queries/s with transfers", "kernel alone q/s",
             "H2D / kernel / D2H ms (reference batch)")  # fmt: skip
    out += table(heads, rows, 1)
    for name, m in d["matchers"].items():
        out += _device_profile(name, m.get("device_profile"))
    return out + img_beside(path, ".png", "gpu matcher")


def _device_profile(name: str, prof: dict[str, Any] | None) -> Markup:
    """Where a device matcher's time goes (`Matcher::device_profile`): copies, kernel, pipeline."""
    if not prof or "pipeline_queries_per_s" not in prof:
        return Markup("")
    n = prof["queries"]
    rows = [
        ("H2D + kernel + D2H, two streams, from pinned memory", f"{prof['pipeline_queries_per_s']:,.0f} q/s")
    ]
    for th, bps in prof["staging_bytes_per_s_by_threads"].items():
        rows.append((f"host copy into pinned memory, {th} thread(s)", f"{bps / 1e9:.1f} GB/s"))
    for block, qps in prof["kernel_queries_per_s_by_block"].items():
        rows.append((f"kernel alone, {n:,} queries, block {block}", f"{qps:,.0f} q/s"))
    sorted_qps = prof["kernel_queries_per_s_sorted_by_partition"]
    rows.append(("kernel alone, queries sorted by partition", f"{sorted_qps:,.0f} q/s"))
    for size, sec in sorted(prof.get("kernel_s_by_batch", {}).items(), key=lambda kv: int(kv[0])):
        rows.append((f"kernel alone, batch of {int(size):,}", f"{sec * 1e6:,.1f} µs"))
    title = html("<h3>{}: where the device's time goes</h3>", name)
    return title + table(("measured", "figure"), rows, 1)
