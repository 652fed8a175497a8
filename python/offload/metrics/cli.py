"""`offload metrics`: metrics that compare offloaded and not-offloaded systems (seed 003)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from offload.clitools import choices, fail

app = typer.Typer(help="Offload metrics (seed 003): rpwu.", no_args_is_help=True)
console = Console()


@app.command()
def rpwu(
    profiles: Annotated[str, typer.Option(help="Node budgets to profile, comma-separated.")] = (
        "bluefield2,host"
    ),
    reference: Annotated[
        str, typer.Option(help="The budget every ratio is to (the seed: a Raspberry Pi 4B).")
    ] = "core",
    stressors: Annotated[
        str | None, typer.Option(help="stress-ng stressors, comma-separated. \\[default: all 15]")
    ] = None,
    seconds: Annotated[int, typer.Option(help="Whole seconds each stressor runs.")] = 2,
    plot: Annotated[
        Path | None, typer.Option(help="Write a bar chart of the ratios here (.png, .svg). \\[default: none]")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Relative performance of node budgets, stressor by stressor: each stress-ng stressor runs
    with one instance in a process held to each budget, and its bogo-ops per second are divided
    by the reference's. Classes and the whole are geometric means (the seed's RPWU)."""
    from offload.dataservices import budget as B
    from offload.metrics import rpwu as R

    profs = choices(profiles, tuple(B.PROFILES), "profile")
    choices(reference, tuple(B.PROFILES), "reference profile")
    names = choices(stressors, tuple(R.STRESSORS), "stressor") if stressors else None
    if seconds < 1:
        raise fail(f"stress-ng runs whole seconds (>= 1), got {seconds}")
    why = R.unavailable_reason()
    if why:
        raise fail(why)
    with console.status("stress-ng") as status:
        try:
            r = R.profile(profs, names, seconds, reference, lambda what: status.update(f"stress-ng: {what}"))
        except (RuntimeError, ValueError) as e:
            raise fail(str(e)) from None
    if plot is not None:
        _plot(r, plot)
    if json_out:
        print(json.dumps(r, indent=2))
        return
    t = Table(title=f"relative performance (bogo-ops/s over {reference}'s)")
    t.add_column("stressor")
    t.add_column("class")
    for p in r["relative"]:
        t.add_column(p, justify="right")
    for s, c in r["classes"].items():
        t.add_row(s, c, *(f"{r['relative'][p][s]:.2f}" for p in r["relative"]))
    for c in ["overall", *sorted(set(r["classes"].values()))]:
        t.add_row(f"[bold]{c}[/]", "geomean", *(f"{r['summary'][p][c]:.2f}" for p in r["relative"]))
    console.print(t)


def _plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(r["classes"])
    profs = [p for p in r["relative"] if p != r["reference"]]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(1, len(profs))
    for i, p in enumerate(profs):
        xs = [k + i * width for k in range(len(names))]
        ax.bar(xs, [r["relative"][p][s] for s in names], width, label=p)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([k + width * (len(profs) - 1) / 2 for k in range(len(names))])
    ax.set_xticklabels([f"{s}\n({r['classes'][s]})" for s in names], rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"bogo-ops/s ÷ {r['reference']}'s")
    ax.set_title("stress-ng relative performance per budget (seed 003's RPWU)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
