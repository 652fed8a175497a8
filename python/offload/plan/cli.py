"""`offload plan ...`: the planner's commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    help="Plan a deployment: what it needs and what it costs (cost), with the arithmetic shown.",
    no_args_is_help=True,
)
console = Console()
if not console.is_terminal:  # a pipe or a log: wide enough for the tables, not 80 columns
    console = Console(width=150)
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def cost(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario TOML: workload, accelerator, deployments (see docs/plan.md).")
    ],
    catalog: Annotated[
        Path | None, typer.Option(help="Price catalog TOML (default: the scenario's, else the bundled one).")
    ] = None,
    offload_share: Annotated[
        float | None, typer.Option(help="Override the share of CPU time the accelerator takes over (0-1).")
    ] = None,
    cpu_servers: Annotated[
        float | None, typer.Option(help="Override the CPU-only servers that carry the load.")
    ] = None,
    rounding: Annotated[str | None, typer.Option(help="Override unit rounding: up or nearest.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON here (for `offload report`).")] = None,
    explain: Annotated[bool, typer.Option(help="Show each deployment's arithmetic under the table.")] = True,
) -> None:
    """Servers or instances each deployment needs and their cost, side by side.

    Example (the seed's Table 1, reproduced exactly):

        offload plan cost data/plans/seed-table1.toml
    """
    import dataclasses
    from fractions import Fraction

    from offload.plan import cost as c

    try:
        s = c.load_scenario(scenario, catalog)
    except c.InputError as e:
        raise _fail(str(e)) from None
    w = s.workload
    if offload_share is not None:
        if not 0 <= offload_share < 1:
            raise _fail(f"--offload-share must be in [0, 1), not {offload_share}")
        w = dataclasses.replace(w, offload_share=c.exact(offload_share))
    if cpu_servers is not None:
        if cpu_servers <= 0:
            raise _fail(f"--cpu-servers must be positive, not {cpu_servers}")
        cs = c.exact(cpu_servers)
        w = dataclasses.replace(w, cpu_servers=cs, cpu_servers_text=f"{c.fmt(cs)} (--cpu-servers)")
    if rounding is not None:
        if rounding not in ("up", "nearest"):
            raise _fail(f"--rounding must be up or nearest, not {rounding!r}")
        w = dataclasses.replace(w, rounding=rounding)
    s = dataclasses.replace(s, workload=w)
    lines = c.cost(s)
    result = c.report(s, lines)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
    if as_json:
        print(json.dumps(result, indent=2))
        return

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
    console.print(t)
    prices = sorted({f"{ln.item.name}: {ln.item.region}, {ln.item.plan}, {ln.item.date}" for ln in lines})
    console.print(f"[dim]prices: {escape('; '.join(prices))}[/]")
    if explain:
        for ln in lines:
            console.print(f"[bold]{escape(ln.group + ': ' if ln.group else '')}{escape(ln.name)}[/]")
            for step in ln.steps:
                console.print(f"  {escape(step)}", highlight=False)
