"""`offload report`: one static HTML page that gathers what the other commands wrote — the rule
engine benchmark, the probe profile, the service sweep, the simulator's calibration, the
recommendation, the deployment cost and the RM-SSD benchmark — with their plots. Images are
embedded (data URIs), so the single file opens from disk anywhere and can be mailed around.

Every section is optional: what was not given says so instead of disappearing.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import __version__
from offload.clitools import seconds
from offload.files import write_text

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; } th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.missing { color: #999; font-style: italic; } .ok { color: #1a7f37; } .bad { color: #c62828; }
.meta { color: #666; font-size: 12px; } pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; }
"""

# After load: how many images decoded, for the headless-browser test (and a broken page shows).
SCRIPT = """
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.dataset.images = imgs.length;
  document.body.dataset.imagesLoaded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.tables = document.querySelectorAll('table').length;
});
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric_from: int = 1) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{_e(c)}</td>' if i >= numeric_from else f"<td>{_e(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img(path: Path | None = None, png: bytes | None = None, alt: str = "") -> str:
    data = png if png is not None else (path.read_bytes() if path is not None and path.exists() else None)
    if data is None:
        return f'<p class="missing">plot not found: {_e(path)}</p>'
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _missing(what: str, how: str) -> str:
    return f'<p class="missing">No {_e(what)} given. Produce one with <code>{_e(how)}</code>.</p>'


class ReportInputError(ValueError):
    """An input that is not what its option expects; the message names the option and the file."""


# What each option takes: (what it is, keys it must have, where they are: None = at the top, else
# in every entry of the list (or of the top-level list under that name)).
KINDS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "bench": ("an `offload rules bench` result", ("matchers",), None),
    "probe": ("an `offload probe` profile", ("channels",), None),
    "sweep": ("an `offload serve sweep` result", ("rows",), None),
    "calibration": ("an `offload plan calibrate` result", ("median_abs_error", "base_config"), None),
    "recommend": ("an `offload plan recommend` result", ("best_under_p99", "plot"), None),
    "cost": ("an `offload plan cost` result", ("deployments",), None),
    "recsys": ("an `offload recsys bench` result", ("strategies",), None),
    "dataservices": ("an `offload node case-study` result", ("measured_s",), "cases"),
    "flows": ("an `offload flows partition` result", ("s_per_gb",), "runs"),
    "rpwu": ("an `offload metrics rpwu` result", ("summary", "classes"), None),
    "nodes": ("an `offload flows run` result", ("per_node",), "runs"),
    "mbwu": ("an `offload metrics mbwu` result", ("mbwu",), None),
    "headroom": ("an `offload metrics headroom` result", ("profiles",), None),
    "availability": ("an `offload metrics availability` result", ("cases",), None),
    "gpu": ("an `offload rules bench --matcher gpu` result", ("matchers",), None),
    "gpu_check": ("an `offload plan check` result", ("median_abs_error", "table"), None),
}


def _flag(option: str, path: Path) -> str:
    return f"--{option.replace('_', '-')} {path}"


def _load(path: Path | None, option: str) -> Any:
    """The input given to `--option`, checked for its kind: a ReportInputError naming the option
    and the file when it is not JSON or not what that option expects."""
    if path is None:
        return None
    what, keys, within = KINDS[option]
    flag = _flag(option, path)
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{flag}: not JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportInputError(f"{flag}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if within is None:
        missing = next((k for k in keys if not isinstance(d, dict) or k not in d), None)
        if missing is not None:
            raise ReportInputError(f"{flag}: not {what} (no {missing!r})")
        return d
    entries = d.get(within) if isinstance(d, dict) else d
    if not isinstance(entries, list) or not entries:
        raise ReportInputError(f"{flag}: not {what} (no {within})")
    for entry in entries:
        missing = next((k for k in keys if not isinstance(entry, dict) or k not in entry), None)
        if missing is not None:
            raise ReportInputError(f"{flag}: not {what} (no {missing!r} in its {within})")
    return d


def _si(x: float | None, unit: str = "") -> str:
    if x is None:
        return "unbounded"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.3g} {unit}"


# ---- sections --------------------------------------------------------------------------------


def rules_section(bench: dict[str, Any] | None, path: Path | None) -> str:
    if bench is None:
        return _missing("rule-engine benchmark", "offload rules bench ... --out bench.json")
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
    out = f"<p class=meta>{bench['rules']:,} rules, {bench['queries']:,} queries, {_e(bench['date'])}</p>"
    out += _table(("matcher", "best queries/s", "threads", "batch", "compile", "memory"), rows)
    png = path.with_suffix(".png") if path else None
    if png is not None and png.exists():
        out += _img(png, alt="rule engine throughput")
    return out


def probe_section(profile: dict[str, Any] | None, path: Path | None) -> str:
    if profile is None:
        return _missing("probe profile", "offload probe --out probe.json")
    env = profile.get("environment", {})
    mode, date = profile.get("mode", ""), profile.get("date", "")
    out = f"<p class=meta>{_e(mode)} run, {_e(date)}; {_e(env.get('cpu', ''))}, "
    out += f"CPUs {_e(env.get('cpus_allowed', ''))}, kernel {_e(env.get('kernel', ''))}</p>"
    rows = []
    for name, ch in profile["channels"].items():
        fit = ch.get("fit") or {}
        frac = ch.get("fraction_of_limit")
        rows.append(
            (
                name,
                seconds(fit.get("latency_s")),
                _si(fit.get("bandwidth_bps"), "B/s"),
                _si(fit.get("n_half_bytes"), "B") if fit.get("n_half_bytes") is not None else "-",
                "-" if frac is None else f"{frac:.1%}",
            )
        )
    out += _table(("channel", "L", "B", "n½", "B / limit"), rows)
    checks = profile.get("checks", [])
    if checks:
        items = "".join(
            f'<li class="{"ok" if c["ok"] else "bad"}">{"✓" if c["ok"] else "✗"} '
            f"{_e(c['check'])}: {_e(c['detail'])}</li>"
            for c in checks
        )
        out += f"<p>Ordering checks:</p><ul>{items}</ul>"
    if profile.get("gpu", {}).get("note"):
        out += f"<p class=meta>GPU: {_e(profile['gpu']['note'])}</p>"
    if path is not None:
        for png in sorted(path.parent.glob(f"{path.stem}-*.png")):
            out += _img(png, alt=png.stem)
    return out


def sweep_section(sweep: dict[str, Any] | None, path: Path | None) -> str:
    if sweep is None:
        return _missing("service sweep", "offload serve sweep ... --out sweep.json")
    front = set(sweep.get("pareto", []))
    rows = [
        (
            r["label"],
            f"{r['queries_per_s']:,.0f}",
            f"{r['p50_us']:,.0f}",
            f"{r['p99_us']:,.0f}",
            "yes" if r["label"] in front else "",
        )
        for r in sorted(sweep["rows"], key=lambda r: -r["queries_per_s"])
    ]
    out = _table(("configuration", "queries/s", "p50 µs", "p99 µs", "Pareto"), rows)
    if path is not None and path.with_suffix(".png").exists():
        out += _img(path.with_suffix(".png"), alt="sweep Pareto")
    return out


def calibration_section(cal: dict[str, Any] | None) -> str:
    if cal is None:
        return _missing("calibration", "offload plan calibrate --sweep sweep.json --trace DIR")
    mae = cal["median_abs_error"]
    out = (
        f"<p>Stage costs from {_e(cal['base_config'])}; φ = {cal['cpu_share_outside']:.1f} "
        f"(share of client/ZeroMQ/broker time on a core), {cal['cpus']} cores. Median absolute error over "
        f"{len(cal['validation_configs'])} configurations, each predicted by a model fitted without it: "
        f"<b>throughput {mae['queries_per_s']:.1%}, "
        f"p50 {mae['p50']:.1%}</b>, p99 {mae['p99']:.1%}.</p>"
    )
    rows = []
    for t in cal["table"]:
        m, p, e = t["measured"], t["predicted"], t["error"]
        rows.append(
            (
                t["config"],
                t["role"],
                f"{m['queries_per_s']:,.0f}",
                f"{p['queries_per_s']:,.0f}",
                f"{e['queries_per_s']:+.0%}",
                f"{m['p50_us']:,.0f}",
                f"{p['p50_us']:,.0f}",
                f"{e['p50_us']:+.0%}",
                f"{m['p99_us']:,.0f}",
                f"{p['p99_us']:,.0f}",
                f"{e['p99_us']:+.0%}",
            )
        )
    out += _table(
        (
            "configuration",
            "role",
            "q/s measured",
            "predicted",
            "error",
            "p50 µs measured",
            "predicted",
            "error",
            "p99 µs measured",
            "predicted",
            "error",
        ),
        rows,
        numeric_from=2,
    )
    out += _img(png=_predicted_vs_measured(cal["table"]), alt="predicted vs measured")
    return out


def _predicted_vs_measured(table: Sequence[dict[str, Any]]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def recommend_section(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return _missing("recommendation", "offload plan recommend --sweep sweep.json --p99-us 5000")
    out = "<ul>"
    for key, question in (
        ("best_under_p99", "most throughput with p99 ≤ {p99_us:,.0f} µs"),
        ("lowest_latency_for", "lowest p99 with ≥ {queries_per_s:,.0f} queries/s"),
    ):
        a = rec.get(key)
        if not a:
            continue
        c = a["config"]
        q = question.format(**a)
        if c is None:
            out += f"<li>{_e(q)}: <span class=bad>none qualifies</span></li>"
        else:
            err = c.get("validation_error")
            note = f" (simulated; validation error ±{err['queries_per_s']:.0%} throughput)" if err else ""
            out += (
                f"<li>{_e(q)}: <b>{_e(c['label'])}</b> ({_e(c.get('source', 'measured'))}) — "
                f"{c['queries_per_s']:,.0f} queries/s, p99 {c['p99_us']:,.0f} µs{_e(note)}</li>"
            )
    out += "</ul>"
    from offload.plan.recommend import on_front

    rows = on_front(rec.get("rows", []), rec.get("pareto", []))
    out += "<p>Pareto front (no configuration beats these on both throughput and p99):</p>"
    out += _table(
        ("configuration", "source", "queries/s", "p50 µs", "p99 µs"),
        ((r["label"], r.get("source", "measured"), f"{r['queries_per_s']:,.0f}", f"{r['p50_us']:,.0f}",
          f"{r['p99_us']:,.0f}") for r in rows),
        numeric_from=2,
    )  # fmt: skip
    if rec.get("preset"):
        out += (
            f"<p class=meta>kernel: {_e(rec['preset'].get('name'))} ({_e(rec['preset'].get('status'))})</p>"
        )
    if rec.get("plot"):
        out += _img(Path(rec["plot"]), alt="recommendation Pareto")
    return out


def cost_section(cost: dict[str, Any] | None) -> str:
    if cost is None:
        return _missing("deployment cost", "offload plan cost data/plans/seed-table1.toml --out cost.json")
    rows = []
    for d in cost["deployments"]:
        per = "/year" if d["per_year"] else ""
        rel = d.get("relative_to_original")
        qpu = d.get("queries_per_usd")
        rows.append(
            (
                f"{d['group']}: {d['deployment']}" if d["group"] else d["deployment"],
                d["element"],
                f"{d['units']:,}",
                f"{d['price_usd']:,} USD/{d['price_unit']}",
                f"{d['total_usd']:,.0f}{per}",
                "-" if rel is None else f"{rel:.2f}×",
                "-" if qpu is None else f"{qpu / 1e9:,.1f} billion",
            )
        )
    out = _table(
        ("deployment", "element", "units", "unit price", "total USD", "× original", "queries/USD"),
        rows,
        numeric_from=2,
    )
    steps = "\n\n".join(
        f"{d['group']}: {d['deployment']}\n  " + "\n  ".join(d["arithmetic"]) for d in cost["deployments"]
    )
    out += f"<details><summary>arithmetic</summary><pre>{_e(steps)}</pre></details>"
    return out


def recsys_section(b: dict[str, Any] | None, path: Path | None) -> str:
    """RM-SSD: every strategy side by side (offload recsys bench), with its figures beside it."""
    if b is None:
        return _missing("recsys benchmark", "offload recsys bench -m MODEL_DIR --out recsys.json --plots DIR")
    out = (
        f"<p class=meta>{_e(b['model'])}, {b['table_bytes'] / 2**30:.2f} GiB of tables, "
        f"{_e(b['mode'])} mode, "
        f"{b['trace']['batches']} batches × {b['trace']['batch_size']}, {_e(b['date'])}; "
        f"{_e(b['machine'].get('cpu', ''))}</p>"
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
    heads = (
        "strategy",
        "inferences/s",
        "p50 ms",
        "read ampl.",
        "bytes/inference",
        "× ssd-s",
        "traffic ÷",
        "Δ answers",
    )
    out += _table(heads, rows)
    paper = (b.get("paper") or {}).get("table_iv")
    if paper:
        out += (
            "<p>The seed's Table IV (traffic reduction vs SSD-S): "
            + ", ".join(f"{_e(k)} {v:,}×" for k, v in paper.items())
            + "</p>"
        )
    stem = f"{b['model']}-{b['mode']}"
    for fig in ("breakdown", "io", "sls"):
        png = path.parent / f"{stem}-{fig}.png" if path else None
        if png is not None and png.exists():
            out += _img(png, alt=f"recsys {fig}")
    return out


def dataservices_section(d: Any) -> str:
    """Near-data queries: the seed's case studies on a node (offload node case-study), ours beside
    the seed's figures."""
    if d is None:
        return _missing("case studies", "offload node case-study --out cases.json (docs/dataservices.md)")
    cases = d["cases"] if isinstance(d, dict) else d
    rows = []
    for r in cases:
        seed = r.get("seed", {})
        ms = r["measured_s"]
        rows.append(
            (
                f"Case {r['case']}",
                f"{r['estimated_rows']:,.1f}"
                + (f" [{seed['estimated_rows']:,.1f}]" if "estimated_rows" in seed else ""),
                f"{r['actual_rows']:,}" + (f" [{seed['actual_rows']:,}]" if "actual_rows" in seed else ""),
                f"{100 * r['estimate_error']:.2f}%",
                r["decision"] + (f" [{seed['decision']}]" if "decision" in seed else ""),
                f"{1e3 * ms['offload']:.1f}",
                f"{1e3 * ms['pushback']:.1f}",
                f"{100 * r['offload_faster_by']:.1f}%"
                + (f" [{100 * seed['offload_faster_by']:.1f}%]" if "offload_faster_by" in seed else ""),
                f"{r['transfer_mib']['offload']:.2f} / {r['transfer_mib']['pushback']:.1f}",
            )
        )
    heads = ("case", "estimated rows", "actual rows", "off by", "decision", "offload ms", "pushback ms",
             "offload faster by", "MiB offload / pushback")  # fmt: skip
    out = "<p class=meta>the seed's figures in brackets</p>" + _table(heads, rows, numeric_from=1)
    why = "".join(f"<li>Case {_e(r['case'])}: {_e(r['why'])}</li>" for r in cases)
    return out + f"<ul>{why}</ul>"


def flows_section(d: Any, path: Path | None = None) -> str:
    """Particle data flows: the partition service per data set, node budget and codec (`offload
    flows partition --json` or the flows benchmark), seconds per GB and bytes out over in."""
    if d is None:
        return _missing("partition runs", "offload flows partition --json > partition.json (docs/flows.md)")
    runs = d["runs"] if isinstance(d, dict) else d
    rows = []
    for r in runs:
        gb = r["bytes_in"] / 1e9 or 1.0
        steps = [f"{r[k] / gb:.2f}" for k in ("unpack_s", "split_s", "repack_s", "compress_s")]
        rows.append((r["dataset"], r["profile"], r["codec"], *steps, f"{r['s_per_gb']:.2f}",
                     f"{r['bytes_out'] / r['bytes_in']:.2f}"))  # fmt: skip
    heads = ("data set", "budget", "codec", "unpack s/GB", "split", "repack", "compress", "total s/GB")
    heads += ("out / in",)
    out = "<p class=meta>the seed: the host ≈ 4× faster than a BlueField-2</p>" + _table(heads, rows, 3)
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="partition breakdown") if png is not None and png.exists() else "")


def nodes_section(d: Any, path: Path | None = None) -> str:
    """The particle pipeline over several nodes (`offload flows run --json`, or the flows
    benchmark's nodes part with its model): input rate and each node's mean seconds by step, and
    the pipeline model's error and its prediction for 100 nodes where the benchmark made them."""
    if d is None:
        how = "python benches/flows_bench.py --parts nodes (docs/flows.md)"
        return _missing("runs over several nodes", how)
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
    out = f"<p class=meta>{_e(first.get('profile', ''))} nodes, {first['rows']:,} {_e(first['dataset'])}</p>"
    out += _table(heads, rows, numeric_from=1)
    for k, p in (d.get("predict_100", {}) if isinstance(d, dict) else {}).items():
        out += (f"<p>100 such nodes, the seed's 64M particles, {_e(k)}: <b>{p['gb_per_s']:.2f} GB/s</b> "
                f"({_e(p['bound'])}-bound); the seed: 1.32 GB/s</p>")  # fmt: skip
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="nodes breakdown") if png is not None and png.exists() else "")


def rpwu_section(d: dict[str, Any] | None, path: Path | None) -> str:
    """Node budgets' relative performance by stress-ng stressor class (`offload metrics rpwu`)."""
    if d is None:
        how = "offload metrics rpwu --plot rpwu.png --json > rpwu.json (docs/metrics.md)"
        return _missing("stress-ng profile", how)
    classes = ["overall", *sorted(set(d["classes"].values()))]
    rows = [(p, *(f"{d['summary'][p][c]:.2f}" for c in classes)) for p in d["summary"]]
    out = f"<p class=meta>bogo-ops/s over {_e(d['reference'])}'s, geometric means</p>"
    out += _table(("budget", *classes), rows)
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="rpwu") if png is not None and png.exists() else "")


def mbwu_section(d: dict[str, Any] | None, path: Path | None) -> str:
    """This disk's MBWU per workload and the seed's $/kWh/m³ case study (`offload metrics mbwu`)."""
    if d is None:
        return _missing("MBWU runs", "python benches/mbwu_bench.py (docs/metrics.md)")
    rows = []
    for w, m in d.get("mbwu", {}).items():
        unit = m["unit"]
        lo, hi = min(m["runs"]), max(m["runs"])
        plateau = f"{sum(m['plateau_reached'])} of {len(m['plateau_reached'])}"
        emb = f"{m['embedded_mbwus']:.2f}" if m.get("embedded_mbwus") is not None else "—"
        rows.append((w, f"{m['median']:,.0f} {unit}", f"{lo:,.0f}-{hi:,.0f}", plateau, emb))
    out = _table(("workload", "MBWU (median)", "runs", "plateau reached", "a quarter core, MBWUs"), rows, 1)
    tests = (d.get("seed_case_study") or {}).get("tests", [])
    if tests:
        cells = []
        for t in tests:
            red, rep = t["reduction"], t["reported"]
            pair = [f"{100 * red[k]:.1f}%" + (f" [{100 * rep[k]:.1f}%]" if rep.get(k) is not None else "")
                    for k in ("usd_per_mbwu", "kwh_per_mbwu", "m3_per_mbwu")]  # fmt: skip
            cells.append((t["test"], f"{t['host']['mbwus']:g} / {t['embedded']['mbwus']:g}", *pair))
        out += "<p class=meta>the seed's case study, host to embedded; the seed's figures in brackets</p>"
        out += _table(("test", "MBWUs host / emb.", "$/MBWU cut", "kWh/MBWU cut", "m³/MBWU cut"), cells, 1)
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="mbwu sweep") if png is not None and png.exists() else "")


def headroom_section(d: dict[str, Any] | None, path: Path | None) -> str:
    """CPU left at line rate per budget (`offload metrics headroom`), beside the seed's."""
    if d is None:
        return _missing(
            "headroom results", "offload metrics headroom --plot headroom.png --json > headroom.json"
        )
    rows = [(p, str(r["min_threads"]), f"{r['saturated_mbit_s']:.0f}", f"{100 * r['headroom']:.1f}%",
             f"{100 * r['headroom_from_cpu']:.1f}%") for p, r in d["profiles"].items()]  # fmt: skip
    seed = d.get("seed", {})
    kernel, dpdk = (100 * seed.get(k, 0) for k in ("bluefield2-kernel", "bluefield2-dpdk"))
    out = f"<p class=meta>the seed's BlueField-2: {kernel:.1f}% (kernel stack), {dpdk:.1f}% (DPDK)</p>"
    out += _table(("budget", "senders", "Mbit/s", "headroom", "CPU cross-check"), rows, 1)
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="headroom") if png is not None and png.exists() else "")


def availability_section(d: dict[str, Any] | None, path: Path | None) -> str:
    """Relative data availability of embedded storage vs servers (`offload metrics availability`)."""
    if d is None:
        how = "offload metrics availability --plot availability.png --json > availability.json"
        return _missing("availability results", how)
    key = next((k for k in ("benefit_rare_limit", "benefit") if k in d["cases"][0]), None)
    limit = d.get("window") is None
    rows = [(c["case"], str(c["n"]), str(c["c"]), f"{c['f']:g}", f"{c[key]:.2f}" if key else "—",
             f"{c['published']:g}", _against_seed(c, key, limit)) for c in d["cases"]]  # fmt: skip
    out = _table(("case", "n", "c", "f", "model", "the seed", "why they differ"), rows, 1)
    where = (
        "the rare-failure limit (no window λT: no source gives one)"
        if limit
        else f"window λT = {d['window']}"
    )
    out += (
        f"<p class=meta>The model is {_e(where)}. Where it does not reproduce the seed's figure, the "
        "seed's own equations are not published; no single window matches all three of its figures "
        "(docs/metrics.md, “It does not reproduce 7.1 or 114.3”).</p>"
    )
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="availability") if png is not None and png.exists() else "")


def _against_seed(c: dict[str, Any], key: str | None, limit: bool) -> str:
    """One case of the availability model against the seed's figure, and why they differ."""
    if key is None or not c.get("published"):
        return "—"
    off = c[key] / c["published"] - 1
    if abs(off) < 0.01:
        return f"reproduced ({off:+.1%})"
    why = "no window fits all three"
    if limit and c["n"] == c["c"]:
        why = "at c = n, f cancels in the rare-failure limit (HDD and SSD give the same figure)"
    return f"not reproduced (×{c[key] / c['published']:.2g}): {why}"


def gpu_section(d: dict[str, Any] | None, path: Path | None) -> str:
    """The gpu matcher (`benches/gpu/run.sh` on a GPU machine: `rules bench --matcher gpu,...`)."""
    if d is None:
        how = "benches/gpu/run.sh on a GPU machine (its rules-gpu.json)"
        return _missing("GPU results", how)
    out = f"<p class=meta>{d['rules']:,} rules, {d['queries']:,} queries, {_e(d['date'])}</p>"
    for name, why in d.get("skipped", {}).items():
        out += f"<p class=meta>{_e(name)}: skipped ({_e(why)})</p>"
    rows = []
    for name, m in d["matchers"].items():
        for r in sorted(m["runs"], key=lambda r: (r["threads"], r["batch"])):
            stages = m.get("device_stages", {})
            rows.append((name, r["threads"], f"{r['batch']:,}", f"{r['queries_per_s']:,.0f}",
                         f"{m['kernel_queries_per_s']:,.0f}" if "kernel_queries_per_s" in m else "—",
                         " / ".join(f"{1e3 * stages[k]:.2f}" for k in ("h2d_s", "kernel_s", "d2h_s"))
                         if stages else "—"))  # fmt: skip
    out += _table(("matcher", "threads", "batch", "queries/s with transfers", "kernel alone q/s",
                   "H2D / kernel / D2H ms (reference batch)"), rows, 1)  # fmt: skip
    for name, m in d["matchers"].items():
        out += _device_profile(name, m.get("device_profile"))
    png = path.with_suffix(".png") if path else None
    return out + (_img(png, alt="gpu matcher") if png is not None and png.exists() else "")


def check_section(d: dict[str, Any] | None) -> str:
    """`offload plan check`: the planner's what-if against measured runs, row by row."""
    if d is None:
        return ""
    about = d.get("preset") or {}
    mae = d["median_abs_error"]
    out = (f"<h3>The planner's prediction of it{': ' + _e(about['name']) if about else ''}</h3>"
           f"<p class=meta>median absolute error over {len(d['table'])} configurations: throughput "
           f"{mae['queries_per_s']:.1%}, p50 {mae['p50']:.1%}, p99 {mae['p99']:.1%}</p>")  # fmt: skip
    rows = []
    for t in d["table"]:
        m, p, e = t["measured"], t["predicted"], t["error"]
        rows.append((t["config"], f"{m['queries_per_s']:,.0f}", f"{p['queries_per_s']:,.0f}",
                     f"{e['queries_per_s']:+.0%}", f"{m['p50_us']:,.0f}", f"{p['p50_us']:,.0f}",
                     f"{e['p50_us']:+.0%}"))  # fmt: skip
    return out + _table(("configuration", "queries/s measured", "predicted", "error", "p50 µs measured",
                         "predicted", "error"), rows, 1)  # fmt: skip


def _device_profile(name: str, prof: dict[str, Any] | None) -> str:
    """Where a device matcher's time goes (`Matcher::device_profile`): copies, kernel, pipeline."""
    if not prof or "pipeline_queries_per_s" not in prof:
        return ""
    n = prof["queries"]
    rows = [
        ("H2D + kernel + D2H, two streams, from pinned memory", f"{prof['pipeline_queries_per_s']:,.0f} q/s")
    ]
    for th, bps in prof["staging_bytes_per_s_by_threads"].items():
        rows.append((f"host copy into pinned memory, {th} thread(s)", f"{bps / 1e9:.1f} GB/s"))
    for block, qps in prof["kernel_queries_per_s_by_block"].items():
        rows.append((f"kernel alone, {n:,} queries, block {block}", f"{qps:,.0f} q/s"))
    rows.append(
        (
            "kernel alone, queries sorted by partition",
            f"{prof['kernel_queries_per_s_sorted_by_partition']:,.0f} q/s",
        )
    )
    for size, sec in sorted(prof.get("kernel_s_by_batch", {}).items(), key=lambda kv: int(kv[0])):
        rows.append((f"kernel alone, batch of {int(size):,}", f"{sec * 1e6:,.1f} µs"))
    return f"<h3>{_e(name)}: where the device's time goes</h3>" + _table(("measured", "figure"), rows, 1)


def build(
    out: Path,
    bench: Path | None = None,
    probe: Path | None = None,
    sweep: Path | None = None,
    calibration: Path | None = None,
    recommend: Path | None = None,
    cost: Path | None = None,
    recsys: Path | None = None,
    dataservices: Path | None = None,
    flows: Path | None = None,
    rpwu: Path | None = None,
    nodes: Path | None = None,
    mbwu: Path | None = None,
    headroom: Path | None = None,
    availability: Path | None = None,
    gpu: Path | None = None,
    gpu_check: Path | None = None,
) -> Path:
    given = {"bench": bench, "probe": probe, "sweep": sweep, "calibration": calibration,
             "recommend": recommend, "cost": cost, "recsys": recsys, "dataservices": dataservices,
             "flows": flows, "rpwu": rpwu, "nodes": nodes, "mbwu": mbwu, "headroom": headroom,
             "availability": availability, "gpu": gpu, "gpu_check": gpu_check}  # fmt: skip
    d = {option: _load(path, option) for option, path in given.items()}  # all checked first

    def part(options: tuple[str, ...], render: Any) -> str:
        """A section; an input that passed its kind check but lacks what the section reads is
        named by its option, not shown as a KeyError."""
        try:
            return str(render())
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
            shown = [o for o in options if given[o] is not None]
            flags = ", ".join(_flag(o, given[o]) for o in shown) or "an input"  # type: ignore[arg-type]
            what = " or ".join(KINDS[o][0] for o in shown) or "what it expects"
            raise ReportInputError(f"{flags}: not {what} as this version reads it ({e!r})") from None

    sections = [
        ("Rule engine", part(("bench",), lambda: rules_section(d["bench"], bench))),
        (
            "The rule engine on a GPU",
            part(("gpu", "gpu_check"), lambda: gpu_section(d["gpu"], gpu) + check_section(d["gpu_check"])),
        ),
        ("Channels (probe)", part(("probe",), lambda: probe_section(d["probe"], probe))),
        ("Service configurations (sweep)", part(("sweep",), lambda: sweep_section(d["sweep"], sweep))),
        ("Simulator calibration", part(("calibration",), lambda: calibration_section(d["calibration"]))),
        ("Recommendation", part(("recommend",), lambda: recommend_section(d["recommend"]))),
        ("Deployment cost", part(("cost",), lambda: cost_section(d["cost"]))),
        (
            "Recommendation inference on SSD (RM-SSD)",
            part(("recsys",), lambda: recsys_section(d["recsys"], recsys)),
        ),
        (
            "Near-data queries (offload or push back)",
            part(("dataservices",), lambda: dataservices_section(d["dataservices"])),
        ),
        ("Particle data flows (partition by id)", part(("flows",), lambda: flows_section(d["flows"], flows))),
        ("Particle pipeline over several nodes", part(("nodes",), lambda: nodes_section(d["nodes"], nodes))),
        ("Node budgets' relative performance (RPWU)", part(("rpwu",), lambda: rpwu_section(d["rpwu"], rpwu))),
        ("Media-based work units (MBWU)", part(("mbwu",), lambda: mbwu_section(d["mbwu"], mbwu))),
        (
            "Network processing headroom",
            part(("headroom",), lambda: headroom_section(d["headroom"], headroom)),
        ),
        (
            "Relative data availability",
            part(("availability",), lambda: availability_section(d["availability"], availability)),
        ),
    ]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    toc = "".join(f'<li><a href="#s{i}">{_e(t)}</a></li>' for i, (t, _) in enumerate(sections))
    body = "".join(f'<h2 id="s{i}">{_e(t)}</h2>{s}' for i, (t, s) in enumerate(sections))
    page = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>offload report</title>"
        f"<style>{CSS}</style><script>{SCRIPT}</script></head><body>"
        f"<h1>offload report</h1><p class=meta>offload {_e(__version__)}, written {_e(now)}</p>"
        f"<ul>{toc}</ul>{body}</body></html>"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page)
    return out
