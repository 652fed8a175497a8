"""What each `offload metrics` command prints when it is not asked for JSON: rich tables (and
their notes) built from the same result dictionaries that ``--json`` prints."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table

from offload.clitools import compact_table as _table


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def rpwu(r: dict[str, Any]) -> list[RenderableType]:
    """Each stressor's ratio per budget, then the geometric means per class and overall."""
    t = _table(f"relative performance (bogo-ops/s over {r['reference']}'s)")
    t.add_column("stressor")
    t.add_column("class")
    for p in r["relative"]:
        t.add_column(p, justify="right")
    for s, c in r["classes"].items():
        t.add_row(s, c, *(f"{r['relative'][p][s]:.2f}" for p in r["relative"]))
    for c in ["overall", *sorted(set(r["classes"].values()))]:
        t.add_row(f"[bold]{c}[/]", "geomean", *(f"{r['summary'][p][c]:.2f}" for p in r["relative"]))
    return [t]


def headroom(r: dict[str, Any]) -> list[RenderableType]:
    """Per budget: the threads that saturate the link, the delay kept, the headroom; the seed's
    figures below."""
    c = r["config"]
    link = f"{c['rate_mbit']:g} Mbit/s link, {c['packet_bytes']} B x {c['burst']}"
    t = _table(f"network processing headroom: {link} ({r['machine']})")
    cols = ("budget", "threads", "Mbit/s", "link used", "burst period", "max delay (CPU)", "headroom")
    for col in (*cols, "from CPU"):
        t.add_column(col, justify="left" if col == "budget" else "right")
    for name, p in r["profiles"].items():
        check = "-" if p["headroom_from_cpu"] is None else f"{p['headroom_from_cpu']:.1%}"
        t.add_row(name, str(p["min_threads"]), f"{p['saturated_mbit_s']:.1f}", f"{p['link_utilisation']:.0%}",
                  f"{p['burst_period_s'] * 1e3:.2f} ms", f"{p['max_delay_s'] * 1e3:.3f} ms",
                  f"{p['headroom']:.1%}" + (" (≥, capped)" if p["capped"] else ""), check)  # fmt: skip
    for name, v in r["seed"].items():
        t.add_row(f"[dim]seed: {name}[/]", "", "", "", "", "", f"[dim]{v:.1%}[/]", "")
    return [t, "[dim]from CPU, a cross-check: 1 - a sender's CPU at saturation (no delay) / its share[/]"]


def availability(r: dict[str, Any], servers: int, window: float | None) -> list[RenderableType]:
    """The benefit per case, in the rare-failure limit (and in the window, when one is given),
    beside the seed's published figure."""
    when = "rare-failure limit" if window is None else f"window λT = {window:g}"
    t = _table(f"relative benefit: P(loss, {servers} servers) ÷ P(loss, embedded) ({when})")
    for col in ("case", "n", "c", "f", "server devices", "embedded nodes", "model, limit"):
        t.add_column(col, justify="left" if col == "case" else "right")
    if window is not None:
        t.add_column("model, window", justify="right")
    t.add_column("seed", justify="right")
    for row in r["cases"]:
        cells = [row["case"], str(row["n"]), str(row["c"]), f"{row['f']:g}", str(row["server_devices"])]
        cells += [str(row["embedded_nodes"]), f"{row['benefit_rare_limit']:.1f}"]
        if window is not None:
            cells.append(f"{row['benefit_window']:.1f}")
        cells.append("-" if row["published"] is None else f"{row['published']:g}")
        t.add_row(*cells)
    return [t]


def availability_models(r: dict[str, Any]) -> list[RenderableType]:
    """Each candidate model's three figures, in its limit and at its closest setting, beside the
    seed's; the worst factor off is over the three."""
    names = " · ".join(f"{k['n']}/{k['c']}/{k['f']:g}" for k in r["cases"])
    t = _table(f"candidate models, P(loss, {r['servers']} servers) ÷ P(loss, embedded): n/c/f = {names}")
    for col in ("model", "f per", "repair", "limit", "×off", "free", "closest at", "closest", "×off "):
        t.add_column(col, justify="left" if col in ("model", "f per", "repair") else "right")

    def three(xs: list[float]) -> str:
        return " · ".join(f"{x:.3g}" for x in xs)

    for m in r["models"]:
        near = ["-", "-", "-"]
        if m["free"]:
            near = [f"{m['closest_param']:.3g}", three(m["closest"]), f"{m['closest_worst_factor']:.2f}"]
        limit = [three(m["limit"]), f"{m['limit_worst_factor']:.2f}"]
        t.add_row(m["model"], m["f_per"], m["repair"] or "-", *limit, m["free"] or "-", *near)
    seed = three([k["published"] for k in r["cases"]])
    t.add_row("[bold]seed[/]", "", "", f"[bold]{seed}[/]", "", "", "", "", "")
    verdict = "one of them gives" if r["any_matches"] else "none gives"
    return [t, f"[dim]×off: the worst factor between model and seed over the three; {verdict} all three "
               f"within {r['tolerance']:.0%}[/]"]  # fmt: skip


def mbwu(out: dict[str, Any], embedded: str | None) -> list[RenderableType]:
    """The measured MBWUs (when measured), the seed's case study, the catalog's ratios and, with
    an embedded budget, this machine's MBWUs at the catalog's prices."""
    shown = _mbwu_sweeps(out, embedded) if "workloads" in out else []
    case = out["seed_case_study"]
    ratio = case["catalog_host_over_embedded"]
    shown += [_case_study(case), (
        f"catalog host/embedded: price {ratio['price']:.1f}x, watts "
        f"{'-' if ratio['watts'] is None else format(ratio['watts'], '.1f')}x (estimates), volume "
        f"{'-' if ratio['volume'] is None else format(ratio['volume'], '.1f')}x"
    )]  # fmt: skip
    for w, c in out.get("this_machine_costs", {}).items():
        red = c["reduction"]
        shown.append(
            f"{w}, this machine's MBWUs (host 1, {embedded} {c['embedded']['mbwus']:.2f}) at the catalog's "
            f"prices: $/MBWU {_pct(red['usd_per_mbwu'])}, kWh/MBWU {_pct(red['kwh_per_mbwu'])}, "
            f"m³/MBWU {_pct(red['m3_per_mbwu'])}"
        )
    return shown


def _mbwu_sweeps(out: dict[str, Any], embedded: str | None) -> list[RenderableType]:
    m = out["machine"]
    t = _table(f"MBWU of the disk under {m['work_dir']} ({m['cpus']} CPUs, "
               f"{m['memory_bytes'] / 2**30:.0f} GiB memory)")  # fmt: skip
    left = ("workload", "unit", "sweep (median per step)")
    for col in ("workload", "MBWU", "unit", "at workers", "plateau", "sweep (median per step)"):
        t.add_column(col, justify="left" if col in left else "right")
    if embedded:
        t.add_column(f"{embedded}, MBWUs", justify="right")
    for w, x in out["workloads"].items():
        steps = ", ".join(
            f"{s['threads']}: {s['value']:,.0f}{'' if s['steady'] else '~'}" for s in x["host"]["steps"]
        )
        row = [w, f"{x['mbwu']:,.0f}", x["unit"], str(x["host"]["threads_at_mbwu"])]
        row += ["yes" if x["host"]["plateau_reached"] else "not reached", steps]
        if embedded:
            row.append("-" if x.get("embedded_mbwus") is None else f"{x['embedded_mbwus']:.2f}")
        t.add_row(*row)
    return [t, "[dim]~: no steady window within the bound; the median of the step's second half[/]"]


def _case_study(case: dict[str, Any]) -> Table:
    t = _table("seed 003's key-value case study: reductions host -> embedded, ours | seed's")
    for col in ("test", "MBWUs host, emb.", "$/MBWU", "kWh/MBWU", "m³/MBWU", "implied price, watts"):
        t.add_column(col, justify="left" if col == "test" else "right")
    for row in case["tests"]:
        red, rep, imp = row["reduction"], row["reported"], row["implied_host_over_embedded"]
        t.add_row(
            row["test"], f"{row['host']['mbwus']:g}, {row['embedded']['mbwus']:g}",
            f"{_pct(red['usd_per_mbwu'])}|{_pct(rep['usd_per_mbwu'])}",
            f"{_pct(red['kwh_per_mbwu'])}|{_pct(rep['kwh_per_mbwu'])}",
            f"{_pct(red['m3_per_mbwu'])}|-", f"{imp['price']:.1f}x, {imp['watts']:.1f}x",
        )  # fmt: skip
    return t
