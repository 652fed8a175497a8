"""What each `offload plan` command prints when it is not asked for JSON: tables and summary
lines built from the results the commands compute (and that ``--json`` prints)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from offload.plan import cost as c
from offload.plan import simulate as sim
from offload.plan.fleet import Fleet
from offload.plan.inputs import StageCosts


def cost(
    scenario: Path, results: list[tuple[c.Scenario, list[c.Line]]], explain: bool
) -> list[RenderableType]:
    """Each variant's deployments side by side (the scenario as written first), the published
    figures beside every variant's with the differences, the prices' dates and, with ``explain``,
    each deployment's steps."""
    shown: list[RenderableType] = []
    for s, lines in results:
        shown += _cost_table(scenario, s, lines, titled=len(results) > 1)
    lines = results[0][1]
    prices = sorted({f"{ln.item.name}: {ln.item.region}, {ln.item.plan}, {ln.item.date}" for ln in lines})
    shown.append(f"[dim]prices: {escape('; '.join(prices))}[/]")
    if any(ln.published for ln in lines):
        shown += against_published(results, results[0][0].published_source)
    if explain:
        for s, lines in results:
            if len(results) > 1:
                shown.append(f"[bold underline]arithmetic, {escape(variant_label(s))}[/]")
            for ln in lines:
                shown.append(f"[bold]{escape(ln.group + ': ' if ln.group else '')}{escape(ln.name)}[/]")
                shown += [Text(f"  {step}") for step in ln.steps]
    return shown


def variant_label(s: c.Scenario) -> str:
    """A variant's name, and "fitted" beside it when its figures were back-solved."""
    return s.name if not s.fitted or "fitted" in s.name else f"{s.name} (fitted)"


def _cost_table(scenario: Path, s: c.Scenario, lines: list[c.Line], titled: bool) -> list[RenderableType]:
    """One variant's table, what it is, and where its accelerator rate comes from."""
    title = f"Deployment cost: {scenario}" + (f" — {variant_label(s)}" if titled else "")
    t = Table(title=escape(title), title_justify="left")
    qps = "" if s.accelerator_qps is None else f" at {float(s.accelerator_qps) / 1e6:,.4g} M q/s"
    for col, just in (("deployment", "left"), ("element", "left"), ("units", "right"), ("unit cost", "right"),
                      ("total (USD)", "right"), ("million USD", "right"), ("× original", "right"),
                      (f"queries/USD{qps}", "right")):  # fmt: skip
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    group = None
    for ln in lines:
        if ln.group != group and group is not None:
            t.add_section()
        group = ln.group
        units = f"{ln.units:,}" + (f" (+{ln.pool_units:,} pool)" if ln.pool_units else "")
        if ln.units != ln.units_exact:
            units += f"  [dim]({c.fmt(ln.units_exact, 2)})[/]"
        per = "/year" if ln.per_year else ""
        t.add_row(
            f"{ln.group}: {ln.name}" if ln.group else ln.name,
            ln.item.name,
            units,
            ln.item.price_text(),
            f"{float(ln.total_usd):,.0f}{per}",
            f"{float(ln.total_usd / Fraction(1_000_000)):.2f}{per}",
            "-" if ln.relative is None else f"{float(ln.relative):.2f}×",
            "-" if ln.queries_per_usd is None else f"{ln.queries_per_usd / 1e9:,.1f} billion",
        )
    shown: list[RenderableType] = []
    if titled:
        kind = "[yellow]back-solved: agrees by construction[/]" if s.fitted else "[green]nothing fitted[/]"
        shown.append(f"[bold]{escape(variant_label(s))}[/] ({kind}): {escape(s.about)}")
    shown.append(t)
    if s.accelerator_qps is not None and any(ln.queries_per_usd is not None for ln in lines):
        basis = escape(f": {s.accelerator_basis}" if s.accelerator_basis else "")
        shown.append(
            f"queries/USD: one accelerator at full load at {c.fmt(s.accelerator_qps)} queries/s{basis}"
        )
    return shown


def _diff(x: float, percent: bool = True) -> str:
    """A difference in parentheses, nothing when there is none."""
    if (abs(x) < 5e-5) if percent else x == 0:
        return ""
    return (f" ({x:+.1%})" if percent else f" ({x:+,})").replace("-", "−")


def against_published(results: list[tuple[c.Scenario, list[c.Line]]], source: str) -> list[RenderableType]:
    """Every published figure beside each variant's, with the difference; ✓ where ours prints as
    the published figure does (totals truncated to its decimals, ratios rounded)."""
    title = f"Against the published figures ({source or 'as given in the scenario'})"
    t = Table(title=escape(title), title_justify="left")
    t.add_column("element", no_wrap=True)
    for what in ("units", "M USD", "× original"):
        t.add_column(f"{what} pub.", justify="right")
        for s, _ in results:
            t.add_column(escape(variant_label(s)), justify="right", no_wrap=True)
    for i, ln in enumerate(results[0][1]):
        if ln.published is None:
            continue
        p, ours = ln.published, [lines[i] for _, lines in results]
        both = [(o, c.against_published(o)) for o in ours]
        row = [ln.item.name, "-" if p.units is None else f"{p.units:,}"]
        row += [f"{o.units:,}{_diff(x['units_diff'], False)}" if "units" in x else "-" for o, x in both]
        row.append("-" if p.total_musd is None else str(p.total_musd))
        row += [
            f"{float(o.total_usd) / 1e6:,.2f}{_diff(x['total_rel_diff'])}"
            + (" ✓" if x["printed_matches"] else "")
            if "total_musd" in x else "-"
            for o, x in both
        ]  # fmt: skip
        row.append("-" if p.relative is None else f"{p.relative}×")
        row += [
            f"{float(o.relative or 0):.2f}×{_diff(x['relative_rel_diff'])}"
            + (" ✓" if x["relative_printed_matches"] else "")
            if "relative" in x else "-"
            for o, x in both
        ]  # fmt: skip
        t.add_row(*row)
    legend = (
        "pub.: the published figure; ✓: ours prints as it (totals truncated to its decimals, ratios rounded)"
    )
    shown: list[RenderableType] = [t, f"[dim]{legend}; differences in parentheses: ours against it[/]"]
    return shown + _queries_per_usd(results)


def _queries_per_usd(results: list[tuple[c.Scenario, list[c.Line]]]) -> list[RenderableType]:
    """The published queries per USD beside each variant's, and the rate each one assumes."""
    shown: list[RenderableType] = []
    for i, ln in enumerate(results[0][1]):
        if ln.published is None or ln.published.queries_per_usd is None:
            continue
        parts = []
        for s, lines in results:
            x, qpu = c.against_published(lines[i]), lines[i].queries_per_usd
            if "queries_per_usd" in x and qpu is not None:
                rate = f"{float(s.accelerator_qps or 0) / 1e6:,.4g} M q/s"
                basis = f"{rate} ({s.accelerator_basis})" if s.accelerator_basis else rate
                diff = _diff(x["queries_per_usd_rel_diff"])
                parts.append(f"{variant_label(s)}: {qpu / 1e9:,.1f} billion{diff} at {basis}")
        head = f"queries per USD, {ln.item.name}: published {ln.published.queries_per_usd / 1e9:,.0f} billion"
        shown.append(escape("; ".join([head, *parts])))
    return shown


def simulation(
    r: sim.Result, j: dict[str, Any], pipe: sim.Pipeline, mode: str, preset: str | None
) -> list[RenderableType]:
    """Throughput, latency and utilisation of one simulated configuration, the what-if kernel,
    and how far the calibration is known to be off (``j``: the result's JSON)."""
    lat, about, validation = j["latency_s"], j["preset"] or {}, j["validation_median_abs_error"]

    def us(q: str) -> str:
        x = lat[q]
        return f"{q} n/a" if x is None else f"{q} {x * 1e6:,.{0 if x >= 1e-4 else 2}f} µs"

    shown: list[RenderableType] = [
        f"[bold]{pipe.label()}[/] ({mode} loop): {r.throughput_qps:,.0f} queries/s, "
        f"{r.throughput_rps:,.0f} requests/s ({r.requests:,} answered); latency {us('p50')}, "
        f"{us('p99')}; busy {r.busy:,}"
    ]
    shown += [f"[yellow]warning:[/] {escape(warning)}" for warning in j["warnings"]]
    if r.utilisation:
        shown.append("utilisation: " + ", ".join(f"{s} {u:.0%}" for s, u in r.utilisation.items()))
    if about:
        name, status = about.get("name", preset or ""), about.get("status", "?")
        shown.append(f"kernel: {escape(name)} ({escape(status)})")
    if validation is None:
        shown.append("[dim]uncalibrated: an estimate from the given costs, with no measured error[/]")
    else:
        shown.append(
            f"validation error of this calibration (median over its validation runs): throughput "
            f"±{validation['queries_per_s']:.0%}, p50 ±{validation['p50']:.0%}, p99 ±{validation['p99']:.0%}"
            + (" (measured with this machine's kernel; the what-if kernel is not validated)" if about else "")
        )
    return shown


def calibration(result: dict[str, Any], out: Path) -> list[RenderableType]:
    """Each configuration measured and predicted (held out), and the median error."""
    t = Table(title=f"Predicted vs measured ({result['cpus']} cores; φ = {result['cpu_share_outside']:.1f})")
    cols = ["configuration", "role", "queries/s meas.", "held-out pred.", "err"]
    for col in [*cols, "p50 µs meas.", "pred.", "err", "p99 µs meas.", "pred.", "err"]:
        t.add_column(col, justify="left" if col in ("configuration", "role") else "right")
    for row in result["table"]:
        m, pr, e = row["measured"], row["predicted"], row["error"]
        t.add_row(
            row["config"], row["role"],
            f"{m['queries_per_s']:,.0f}", f"{pr['queries_per_s']:,.0f}", f"{e['queries_per_s']:+.0%}",
            f"{m['p50_us']:,.0f}", f"{pr['p50_us']:,.0f}", f"{e['p50_us']:+.0%}",
            f"{m['p99_us']:,.0f}", f"{pr['p99_us']:,.0f}", f"{e['p99_us']:+.0%}",
        )  # fmt: skip
    mae = result["median_abs_error"]
    return [t, (
        f"median absolute error, leave-one-out over {len(result['validation_configs'])} configurations: "
        f"throughput {mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}"
    ), f"wrote {out}"]  # fmt: skip


def knee_calibration(result: dict[str, Any], out: Path) -> list[RenderableType]:
    """Each measured knee and its held-out prediction, the fitted parameters and the errors."""
    u, stall = result["knee_utilisation"], result["stall_s"]
    t = Table(title=f"Knees predicted vs measured ({result['cpus']} cores)")
    for col in ["configuration", "knee q/s meas.", "held-out pred.", "err", "p99 µs meas.", "pred.", "err"]:
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for row in result["table"]:
        m, pr, e = row["measured"], row["predicted"], row["error"]
        t.add_row(row["config"], f"{m['queries_per_s']:,.0f}", f"{pr['queries_per_s']:,.0f}",
                  f"{e['queries_per_s']:+.0%}", f"{m['p99_us']:,.0f}", f"{pr['p99_us']:,.0f}",
                  f"{e['p99_us']:+.0%}")  # fmt: skip
    mae = result["median_abs_error"]
    fitted = (f"fitted: the knee at {u:.2f} of the model's capacity, a stall of {stall * 1e6:,.0f} µs"
              if u is not None else "too few knees to fit")  # fmt: skip
    said = [t, fitted]
    if mae["queries_per_s"] is not None:
        said.append(f"median absolute error, leave-one-out over {len(result['table'])} knees: "
                    f"throughput {mae['queries_per_s']:.1%}, p99 {mae['p99']:.1%}")  # fmt: skip
    unchecked = [k for k, n in result["knees"].items() if n < 2]
    if unchecked:
        said.append(f"not checked (one knee each): {', '.join(unchecked)}")
    return [*said, f"wrote {out}"]


def preset(about: dict[str, Any], costs: dict[str, Any], out: Path) -> list[RenderableType]:
    """The kernel costs of a preset made from measurements."""
    t = Table(title=escape(about["name"]))
    t.add_column("cost")
    t.add_column("value", justify="right")
    for key, v in costs.items():
        t.add_row(key, f"{v:.4g}" if isinstance(v, float) else str(v))
    return [t, f"wrote {out}"]


def check(result: dict[str, Any], out: Path) -> list[RenderableType]:
    """Each measured configuration beside its prediction, and the median error."""
    about = result["preset"] or {}
    t = Table(title=f"Predicted vs measured ({result['cpus']} cores{'; ' + about['name'] if about else ''})")
    for col in ["configuration", "queries/s meas.", "pred.", "err", "p50 µs meas.", "pred.", "err"]:
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for row in result["table"]:
        m, pr, e = row["measured"], row["predicted"], row["error"]
        t.add_row(
            row["config"],
            f"{m['queries_per_s']:,.0f}", f"{pr['queries_per_s']:,.0f}", f"{e['queries_per_s']:+.0%}",
            f"{m['p50_us']:,.0f}", f"{pr['p50_us']:,.0f}", f"{e['p50_us']:+.0%}",
        )  # fmt: skip
    mae = result["median_abs_error"]
    return [t, (
        f"median absolute error over {len(result['table'])} configurations: throughput "
        f"{mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}"
    ), f"wrote {out}"]  # fmt: skip


def recommendation(result: dict[str, Any], front: list[dict[str, Any]], out: Path) -> list[RenderableType]:
    """The Pareto front and the answer to each question asked (``front``: its rows)."""
    t = Table(title="Pareto front (throughput vs p99)")
    for col in ("configuration", "source", "queries/s", "p50 µs", "p99 µs"):
        t.add_column(col, justify="left" if col in ("configuration", "source") else "right")
    for r in front:
        qps, p50, p99 = f"{r['queries_per_s']:,.0f}", f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}"
        t.add_row(r["label"], r["source"], qps, p50, p99)
    shown: list[RenderableType] = [t]
    q1, q2 = result["best_under_p99"], result["lowest_latency_for"]
    if q1 is not None:
        shown.append(_answer(f"most throughput with p99 <= {q1['p99_us']:,.0f} µs", q1["config"]))
    if q2 is not None:
        shown.append(_answer(f"lowest p99 with >= {q2['queries_per_s']:,.0f} queries/s", q2["config"]))
    if result.get("what_if"):
        w = result["what_if"]
        question = f"a what-if device, not on this machine: most throughput with p99 <= {w['p99_us']:,.0f} µs"
        shown.append(_answer(question, w["config"]))
    return [*shown, f"wrote {out} and {result['plot']}"]


def _answer(question: str, c: dict[str, Any] | None) -> str:
    if c is None:
        return f"{question}: [bold red]none qualifies[/]"
    note = ""
    if c["source"] == "simulated" and c.get("validation_error"):
        v = c["validation_error"]
        latency = next((f", ±{v[k]:.0%} {k}" for k in ("p99", "p50") if v.get(k) is not None), "")
        note = f" (simulated; validation error ±{v['queries_per_s']:.0%} throughput{latency})"
    figures = f"{c['queries_per_s']:,.0f} queries/s, p99 {c['p99_us']:,.0f} µs"
    return f"{question}: [bold]{c['label']}[/] — {figures}{note}"


def fleet(result: Fleet, pipe: sim.Pipeline, costs: StageCosts) -> list[RenderableType]:
    """One node's figures, the fleet that carries the workload with its arithmetic, and how far
    the node's model is known to be off."""
    n, ln, about = result.node, result.line, costs.kernel
    per = "/year" if ln.per_year else ""
    v = costs.validation or {}
    return [
        f"one node ({pipe.label()} on {pipe.cpus} cores{', kernel: ' + about['name'] if about else ''}): "
        f"{n.throughput_rps:,.0f} requests/s, {n.throughput_qps:,.0f} queries/s, "
        f"p99 {n.percentile(99) * 1e6:,.0f} µs",
        f"fleet for {result.requests_per_s:,.0f} requests/s: [bold]{ln.units:,} × {ln.item.name}[/], "
        f"{float(ln.total_usd):,.0f} USD{per}",
        *(Text(f"  {step}") for step in ln.steps),
        f"[dim]node capacity from the calibrated model (validation error ±{v['queries_per_s']:.0%} "
        f"throughput on {costs.cpus} measured cores; extrapolated to {pipe.cpus} cores)[/]",
    ]
