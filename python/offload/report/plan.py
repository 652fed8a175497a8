"""The planner's sections: `offload plan calibrate` (the simulator against measured runs, with
a predicted-vs-measured plot), `offload plan recommend` (the answer and the Pareto front),
`offload plan cost` (each deployment's arithmetic) and `offload plan check` (the planner's
what-if against a measured run, shown under the GPU section)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from offload.report.markup import Markup, details, html, img, meta, missing, table


def calibration_section(cal: dict[str, Any] | None) -> Markup:
    if cal is None:
        return missing("calibration", "offload plan calibrate --sweep sweep.json --trace DIR")
    if "kinds" in cal:
        return _knee_calibration(cal)
    mae = cal["median_abs_error"]
    out = html(
        "<p>Stage costs from {}; φ = {:.1f} (share of client/ZeroMQ/broker time on a core), {} cores. "
        "Median absolute error over {} configurations, each predicted by a model fitted without it: "
        "<b>throughput {:.1%}, p50 {:.1%}</b>, p99 {:.1%}.</p>",
        cal["base_config"],
        cal["cpu_share_outside"],
        cal["cpus"],
        len(cal["validation_configs"]),
        mae["queries_per_s"],
        mae["p50"],
        mae["p99"],
    )
    rows = []
    for t in cal["table"]:
        m, p, e = t["measured"], t["predicted"], t["error"]
        rows.append(
            (t["config"], t["role"], *_measured_predicted(m, p, e, ("queries_per_s", "p50_us", "p99_us")))
        )
    heads = ("configuration", "role", "q/s measured", "predicted", "error", "p50 µs measured", "predicted",
             "error", "p99 µs measured", "predicted", "error")  # fmt: skip
    out += table(heads, rows, numeric_from=2)
    return out + img(png=_predicted_vs_measured(cal["table"]), alt="predicted vs measured")


def _knee_calibration(cal: dict[str, Any]) -> Markup:
    """A calibration on knees: the fitted share and stall, each knee against its held-out
    prediction, the errors."""
    mae, u = cal["median_abs_error"], cal["knee_utilisation"]
    out = html(
        "<p>Stage costs per kind from the knees' host path by thread role (offload.plan.knees), {} "
        "knees of {} kinds, {} cores. Fitted: the knee at {} of the model's capacity, a stall of {} µs. "
        "Median absolute error over {} knees, each predicted without it: <b>throughput {}</b>, p99 {}.</p>",
        sum(cal["knees"].values()), len(cal["knees"]), cal["cpus"],
        "n/a" if u is None else f"{u:.2f}",
        "n/a" if cal["stall_s"] is None else f"{cal['stall_s'] * 1e6:,.0f}",
        len(cal["table"]), _share(mae["queries_per_s"]), _share(mae["p99"]),
    )  # fmt: skip
    keys = ("queries_per_s", "p99_us")
    rows = [(t["config"], *_measured_predicted(t["measured"], t["predicted"], t["error"], keys))
            for t in cal["table"]]  # fmt: skip
    heads = ("knee", "q/s measured", "predicted", "error", "p99 µs measured", "predicted", "error")
    return out + table(heads, rows, numeric_from=1)


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _measured_predicted(
    m: dict[str, float], p: dict[str, float], e: dict[str, float], keys: Sequence[str]
) -> list[str]:
    """Per key: measured, predicted, relative error."""
    return [x for k in keys for x in (f"{m[k]:,.0f}", f"{p[k]:,.0f}", f"{e[k]:+.0%}")]


def _predicted_vs_measured(table: Sequence[dict[str, Any]]) -> bytes:
    from offload.host.plots import pyplot

    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, key, label, scale in (
        (axes[0], "queries_per_s", "throughput (M queries/s)", 1e-6),
        (axes[1], "p50_us", "p50 latency (µs)", 1.0),
    ):
        for role, marker in (("stage costs", "s"), ("held out", "o")):
            pts = [t for t in table if t["role"] == role]
            ax.scatter(
                [t["measured"][key] * scale for t in pts],
                [t["predicted"][key] * scale for t in pts],
                marker=marker,
                label=role,
            )
        lo = min(min(t["measured"][key], t["predicted"][key]) for t in table) * scale * 0.9
        hi = max(max(t["measured"][key], t["predicted"][key]) for t in table) * scale * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.fill_between(
            [lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="±10%"
        )
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("simulator: predicted vs measured")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def recommend_section(rec: dict[str, Any] | None) -> Markup:
    if rec is None:
        return missing("recommendation", "offload plan recommend --sweep sweep.json --p99-us 5000")
    answers = []
    for key, question in (
        ("best_under_p99", "most throughput with p99 ≤ {p99_us:,.0f} µs"),
        ("lowest_latency_for", "lowest p99 with ≥ {queries_per_s:,.0f} queries/s"),
        ("what_if", "a what-if device, not on this machine: most throughput with p99 ≤ {p99_us:,.0f} µs"),
    ):
        a = rec.get(key)
        if not a:
            continue
        c = a["config"]
        q = question.format(**a)
        if c is None:
            answers.append(html("<li>{}: <span class=bad>none qualifies</span></li>", q))
            continue
        err = c.get("validation_error")
        note = f" (simulated; validation error ±{err['queries_per_s']:.0%} throughput)" if err else ""
        answers.append(
            html(
                "<li>{}: <b>{}</b> ({}) — {:,.0f} queries/s, p99 {:,.0f} µs{}</li>",
                q,
                c["label"],
                c.get("source", "measured"),
                c["queries_per_s"],
                c["p99_us"],
                note,
            )
        )
    out = html("<ul>{}</ul>", Markup("").join(answers))
    from offload.plan.recommend import on_front

    rows = on_front(rec.get("rows", []), rec.get("pareto", []))
    out += html("<p>Pareto front (no configuration beats these on both throughput and p99):</p>")
    out += table(
        ("configuration", "source", "queries/s", "p50 µs", "p99 µs"),
        ((r["label"], r.get("source", "measured"), f"{r['queries_per_s']:,.0f}", f"{r['p50_us']:,.0f}",
          f"{r['p99_us']:,.0f}") for r in rows),
        numeric_from=2,
    )  # fmt: skip
    if rec.get("preset"):
        out += meta(f"kernel: {rec['preset'].get('name')} ({rec['preset'].get('status')})")
    if rec.get("plot"):
        out += img(Path(rec["plot"]), alt="recommendation Pareto")
    return out


def cost_section(cost: dict[str, Any] | None) -> Markup:
    """`offload plan cost`: each variant's table (the scenario as written first, then its
    variants, each labelled, a fitted one as fitted), the published figure beside each total."""
    if cost is None:
        return missing("deployment cost", "offload plan cost data/plans/seed-table1.toml --out cost.json")
    results = [cost, *cost.get("variants", [])]
    out = Markup("")
    for r in results:
        v = r.get("variant") or {}
        if len(results) > 1:
            kind = "fitted: back-solved, agrees by construction" if v.get("fitted") else "nothing fitted"
            out += html("<h4>{} ({})</h4>", v.get("name", "as given"), kind) + meta(v.get("about", ""))
        out += _cost_table(r)
        if r.get("accelerator_basis"):
            rate = r.get("accelerator_queries_per_s") or 0
            out += meta(
                f"queries/USD at {rate / 1e6:,.4g} M queries/s per accelerator: {r['accelerator_basis']}"
            )
    if cost.get("published_source"):
        out += meta(f"published: {cost['published_source']}; differences are ours against it")
    steps = "\n\n".join(
        f"{r.get('variant', {}).get('name', '')}, {d['group']}: {d['deployment']}\n  "
        + "\n  ".join(d["arithmetic"])
        for r in results
        for d in r["deployments"]
    )
    return out + details("arithmetic", steps)


def _cost_table(r: dict[str, Any]) -> Markup:
    """One variant's deployments, with the published total and the difference where there is one."""
    rows = []
    for d in r["deployments"]:
        per = "/year" if d["per_year"] else ""
        rel, qpu, pub = d.get("relative_to_original"), d.get("queries_per_usd"), d.get("published") or {}
        published = "-"
        if "total_musd" in pub:
            published = f"{pub['total_musd']} M ({pub['total_rel_diff']:+.1%})"
        rows.append(
            (
                f"{d['group']}: {d['deployment']}" if d["group"] else d["deployment"],
                d["element"],
                f"{d['units']:,}" + (f" ({pub['units']:,})" if "units" in pub else ""),
                f"{d['price_usd']:,} USD/{d['price_unit']}",
                f"{d['total_usd']:,.0f}{per}",
                published,
                "-"
                if rel is None
                else f"{rel:.2f}×" + (f" ({pub['relative']}×)" if "relative" in pub else ""),
                "-" if qpu is None else f"{qpu / 1e9:,.1f} billion",
            )
        )
    heads = ("deployment", "element", "units (published)", "unit price", "total USD",
             "published total (ours vs it)", "× original (published)", "queries/USD")  # fmt: skip
    return table(heads, rows, numeric_from=2)


def check_section(d: dict[str, Any] | None) -> Markup:
    """`offload plan check`: the planner's what-if against measured runs, row by row."""
    if d is None:
        return Markup("")
    about = d.get("preset") or {}
    mae = d["median_abs_error"]
    out = html("<h3>The planner's prediction of it{}</h3>", f": {about['name']}" if about else "")
    out += meta(
        f"median absolute error over {len(d['table'])} configurations: throughput "
        f"{mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}"
    )
    rows = []
    for t in d["table"]:
        m, p, e = t["measured"], t["predicted"], t["error"]
        rows.append((t["config"], *_measured_predicted(m, p, e, ("queries_per_s", "p50_us"))))
    heads = (
        "configuration",
        "queries/s measured",
        "predicted",
        "error",
        "p50 µs measured",
        "predicted",
        "error",
    )
    return out + table(heads, rows, 1)
