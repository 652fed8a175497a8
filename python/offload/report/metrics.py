"""The metrics sections: `offload metrics rpwu` (node budgets by stress-ng class), `mbwu` (this
disk's media-based work units and the seed's case study), `headroom` (CPU left at line rate)
and `availability` (embedded storage against servers, and why it differs from the seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.report.markup import Markup, img_beside, meta, missing, table


def rpwu_section(d: dict[str, Any] | None, path: Path | None) -> Markup:
    """Node budgets' relative performance by stress-ng stressor class (`offload metrics rpwu`)."""
    if d is None:
        return missing(
            "stress-ng profile", "offload metrics rpwu --plot rpwu.png --json > rpwu.json (docs/metrics.md)"
        )
    classes = ["overall", *sorted(set(d["classes"].values()))]
    rows = [(p, *(f"{d['summary'][p][c]:.2f}" for c in classes)) for p in d["summary"]]
    out = meta(f"bogo-ops/s over {d['reference']}'s, geometric means")
    out += table(("budget", *classes), rows)
    return out + img_beside(path, ".png", "rpwu")


def mbwu_section(d: dict[str, Any] | None, path: Path | None) -> Markup:
    """This disk's MBWU per workload and the seed's $/kWh/m³ case study (`offload metrics mbwu`)."""
    if d is None:
        return missing("MBWU runs", "python benches/mbwu_bench.py (docs/metrics.md)")
    rows = []
    for w, m in d.get("mbwu", {}).items():
        unit = m["unit"]
        lo, hi = min(m["runs"]), max(m["runs"])
        plateau = f"{sum(m['plateau_reached'])} of {len(m['plateau_reached'])}"
        emb = f"{m['embedded_mbwus']:.2f}" if m.get("embedded_mbwus") is not None else "—"
        rows.append((w, f"{m['median']:,.0f} {unit}", f"{lo:,.0f}-{hi:,.0f}", plateau, emb))
    out = table(("workload", "MBWU (median)", "runs", "plateau reached", "a quarter core, MBWUs"), rows, 1)
    tests = (d.get("seed_case_study") or {}).get("tests", [])
    if tests:
        cells = []
        for t in tests:
            red, rep = t["reduction"], t["reported"]
            pair = [f"{100 * red[k]:.1f}%" + (f" [{100 * rep[k]:.1f}%]" if rep.get(k) is not None else "")
                    for k in ("usd_per_mbwu", "kwh_per_mbwu", "m3_per_mbwu")]  # fmt: skip
            cells.append((t["test"], f"{t['host']['mbwus']:g} / {t['embedded']['mbwus']:g}", *pair))
        out += meta("the seed's case study, host to embedded; the seed's figures in brackets")
        out += table(("test", "MBWUs host / emb.", "$/MBWU cut", "kWh/MBWU cut", "m³/MBWU cut"), cells, 1)
    return out + img_beside(path, ".png", "mbwu sweep")


def headroom_section(d: dict[str, Any] | None, path: Path | None) -> Markup:
    """CPU left at line rate per budget (`offload metrics headroom`), beside the seed's."""
    if d is None:
        return missing(
            "headroom results", "offload metrics headroom --plot headroom.png --json > headroom.json"
        )
    rows = [(p, str(r["min_threads"]), f"{r['saturated_mbit_s']:.0f}", f"{100 * r['headroom']:.1f}%",
             f"{100 * r['headroom_from_cpu']:.1f}%") for p, r in d["profiles"].items()]  # fmt: skip
    seed = d.get("seed", {})
    kernel, dpdk = (100 * seed.get(k, 0) for k in ("bluefield2-kernel", "bluefield2-dpdk"))
    out = meta(f"the seed's BlueField-2: {kernel:.1f}% (kernel stack), {dpdk:.1f}% (DPDK)")
    out += table(("budget", "senders", "Mbit/s", "headroom", "CPU cross-check"), rows, 1)
    return out + img_beside(path, ".png", "headroom")


def availability_section(d: dict[str, Any] | None, path: Path | None) -> Markup:
    """Relative data availability of embedded storage vs servers (`offload metrics availability`)."""
    if d is None:
        how = "offload metrics availability --plot availability.png --json > availability.json"
        return missing("availability results", how)
    key = next((k for k in ("benefit_rare_limit", "benefit") if k in d["cases"][0]), None)
    limit = d.get("window") is None
    rows = [(c["case"], str(c["n"]), str(c["c"]), f"{c['f']:g}", f"{c[key]:.2f}" if key else "—",
             f"{c['published']:g}", _against_seed(c, key, limit)) for c in d["cases"]]  # fmt: skip
    out = table(("case", "n", "c", "f", "model", "the seed", "why they differ"), rows, 1)
    where = (
        "the rare-failure limit (no window λT: no source gives one)"
        if limit
        else f"window λT = {d['window']}"
    )
    out += meta(
        f"The model is {where}. Where it does not reproduce the seed's figure, the "
        "seed's own equations are not published; no single window matches all three of its figures, and "
        "none of the standard candidate models does at any one setting (`offload metrics availability "
        "--models`; docs/metrics.md, “Which model could give all three”)."
    )
    return out + img_beside(path, ".png", "availability")


def _against_seed(c: dict[str, Any], key: str | None, limit: bool) -> str:
    """One case of the availability model against the seed's figure, and why they differ."""
    if key is None or not c.get("published"):
        return "—"
    off = c[key] / c["published"] - 1
    if abs(off) < 0.01:
        return f"reproduced ({off:+.1%}) with failures counted as Poisson (exactly: lower, docs/metrics.md)"
    why = "no window fits all three"
    if limit and c["n"] == c["c"]:
        why = "at c = n, f cancels in the rare-failure limit (HDD and SSD give the same figure)"
    return f"not reproduced (×{c[key] / c['published']:.2g}): {why}"
