"""The probe's section: `offload probe` (each channel's latency, bandwidth and n½ fit, the
ordering checks, and the plots written beside the profile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.clitools import seconds
from offload.report.markup import Markup, html, img, items, meta, missing, si, table


def probe_section(profile: dict[str, Any] | None, path: Path | None) -> Markup:
    if profile is None:
        return missing("probe profile", "offload probe --out probe.json")
    env = profile.get("environment", {})
    out = meta(
        f"{profile.get('mode', '')} run, {profile.get('date', '')}; {env.get('cpu', '')}, "
        f"CPUs {env.get('cpus_allowed', '')}, kernel {env.get('kernel', '')}"
    )
    rows = []
    for name, ch in profile["channels"].items():
        fit = ch.get("fit") or {}
        frac = ch.get("fraction_of_limit")
        rows.append(
            (
                name,
                seconds(fit.get("latency_s")),
                si(fit.get("bandwidth_bps"), "B/s"),
                si(fit.get("n_half_bytes"), "B") if fit.get("n_half_bytes") is not None else "-",
                "-" if frac is None else f"{frac:.1%}",
            )
        )
    out += table(("channel", "L", "B", "n½", "B / limit"), rows)
    checks = profile.get("checks", [])
    if checks:
        marks = [
            ("ok" if c["ok"] else "bad", f"{'✓' if c['ok'] else '✗'} {c['check']}: {c['detail']}")
            for c in checks
        ]
        out += html("<p>Ordering checks:</p>") + items(marks)
    if profile.get("gpu", {}).get("note"):
        out += meta(f"GPU: {profile['gpu']['note']}")
    if path is not None:
        for png in sorted(path.parent.glob(f"{path.stem}-*.png")):
            out += img(png, alt=png.stem)
    return out
