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


def cost(scenario: Path, lines: list[c.Line], explain: bool) -> list[RenderableType]:
    """The deployments side by side, the prices' dates and, with ``explain``, each one's steps."""
    t = Table(title=f"Deployment cost: {scenario}", title_justify="left")
    for col, just in (("deployment", "left"), ("element", "left"), ("units", "right"), ("unit cost", "right"),
                      ("total (USD)", "right"), ("million USD", "right"), ("× original", "right"),
                      ("queries/USD", "right")):  # fmt: skip
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
    prices = sorted({f"{ln.item.name}: {ln.item.region}, {ln.item.plan}, {ln.item.date}" for ln in lines})
    shown: list[RenderableType] = [t, f"[dim]prices: {escape('; '.join(prices))}[/]"]
    if explain:
        for ln in lines:
            shown.append(f"[bold]{escape(ln.group + ': ' if ln.group else '')}{escape(ln.name)}[/]")
            shown += [Text(f"  {step}") for step in ln.steps]
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
    return [*shown, f"wrote {out} and {result['plot']}"]


def _answer(question: str, c: dict[str, Any] | None) -> str:
    if c is None:
        return f"{question}: [bold red]none qualifies[/]"
    note = ""
    if c["source"] == "simulated" and c.get("validation_error"):
        v = c["validation_error"]
        note = f" (simulated; validation error ±{v['queries_per_s']:.0%} throughput, ±{v['p50']:.0%} p50)"
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
