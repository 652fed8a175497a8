"""A relative-performance profile of node budgets, stressor by stressor (seed 003, slide 13-14:
the Raspberry-Pi-based Work Unit, RPWU).

The seed runs stress-ng's stressors on a SmartNIC and on hosts and divides each stressor's
throughput by a Raspberry Pi 4B's. Latency figures of different operations do not compare, but
ratios of the same operation do. Here each stressor runs with one instance for a few seconds in a
child process held to a node budget (:mod:`offload.host.budgets`). Its bogo-ops per second
of wall time are divided by the reference budget's (``core``, one whole core of this machine,
stands in for the Pi: we have none). Per class and over all stressors the profile is the
geometric mean of the ratios.

A CPU quota slows what runs on the CPU. It does not emulate a device's own memory system or
accelerators, which is where the seed found a BlueField-2 ahead of hosts (memory contention,
crypto and compression engines, IPC, SIMD). The profile shows which stressors the quota reaches.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from offload.files import save_figure
from offload.host.plots import pyplot

STRESSORS: dict[str, str] = {
    "matrix": "cpu", "vecmath": "cpu", "hash": "cpu", "crypt": "cpu", "zlib": "cpu",
    "cache": "cpu-cache",
    "memcpy": "memory", "stream": "memory", "malloc": "memory",
    "switch": "scheduler", "futex": "scheduler",
    "pipe": "pipe", "udp": "network", "sock": "network",
    "timer": "interrupt",
}  # fmt: skip
"""The stressors run (stress-ng 0.15 names) and the class each stands for. The network ones run
over 127.0.0.1."""


def unavailable_reason() -> str | None:
    """Why stress-ng cannot run here, or None."""
    return None if shutil.which("stress-ng") else "stress-ng is not installed (apt-get install stress-ng)"


def run_under(profile: str, stressor: str, seconds: int, timeout_s: float = 120) -> dict[str, Any]:
    """One stressor, one instance, ``seconds`` long, in a child process held to ``profile``:
    its bogo-ops per second (wall time) and the budget as applied."""
    if stressor not in STRESSORS:
        raise ValueError(f"unknown stressor {stressor!r}; one of {', '.join(STRESSORS)}")
    if seconds < 1:
        raise ValueError(f"stress-ng runs whole seconds (>= 1), got {seconds}")
    why = unavailable_reason()
    if why:
        raise RuntimeError(why)
    args = json.dumps({"profile": profile, "stressor": stressor, "seconds": seconds})
    done = subprocess.run([sys.executable, "-m", "offload.metrics.rpwu", args],
                          capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"stress-ng {stressor} on {profile} failed: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def profile(
    profiles: list[str],
    stressors: list[str] | None = None,
    seconds: int = 2,
    reference: str = "core",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every stressor under every profile (and the reference): ops per second, the ratio to the
    reference, and per-class and overall geometric means."""
    names = stressors or list(STRESSORS)
    runs: dict[str, dict[str, float]] = {}
    budgets: dict[str, Any] = {}
    for prof in dict.fromkeys([reference, *profiles]):
        runs[prof] = {}
        for s in names:
            if progress:
                progress(f"{s} on {prof}")
            r = run_under(prof, s, seconds)
            runs[prof][s], budgets[prof] = r["ops_per_s"], r["budget"]
    rel = {
        p: {s: runs[p][s] / runs[reference][s] if runs[reference][s] > 0 else math.nan for s in names}
        for p in runs
    }
    classes = sorted({STRESSORS[s] for s in names})
    summary = {
        p: {"overall": _geomean(rel[p].values())}
        | {c: _geomean(v for s, v in rel[p].items() if STRESSORS[s] == c) for c in classes}
        for p in runs
    }
    return {"reference": reference, "seconds": seconds, "ops_per_s": runs, "relative": rel,
            "summary": summary, "classes": {s: STRESSORS[s] for s in names}, "budgets": budgets}  # fmt: skip


def _geomean(values: Any) -> float:
    vs = [v for v in values if v > 0 and not math.isnan(v)]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else math.nan


def parse_ops(yaml_text: str, stressor: str, source: str = "stress-ng's output") -> float:
    """bogo-ops per second of wall time for ``stressor`` from stress-ng's --yaml output."""
    return parse_metric(yaml_text, stressor, "bogo-ops-per-second-real-time", source)


def parse_metric(yaml_text: str, stressor: str, key: str, source: str = "stress-ng's output") -> float:
    """One number of ``stressor``'s block in stress-ng's --yaml output; ``source`` (the file)
    names where the text came from in the one-line error."""
    block = stressor_metrics(yaml_text, source).get(stressor, {})
    try:
        return float(block[key])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"no {key} for {stressor!r} in {source}") from None


def stressor_metrics(yaml_text: str, source: str = "stress-ng's output") -> dict[str, dict[str, Any]]:
    """The ``metrics:`` list of stress-ng's --yaml output, by stressor name."""
    try:
        doc = yaml.safe_load(yaml_text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f":{where.line + 1}:{where.column + 1}" if where else ""
        raise ValueError(f"{source}{at}: not YAML ({getattr(e, 'problem', None) or 'unreadable'})") from None
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(metrics, list):
        raise ValueError(f"{source}: no metrics list (is it stress-ng's --yaml output?)")
    return {m["stressor"]: m for m in metrics if isinstance(m, dict) and "stressor" in m}


def plot(r: dict[str, Any], path: Path) -> None:
    """The ratios as bars per stressor, one bar per budget, on a log scale (1 = the reference)."""
    plt = pyplot()

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
    save_figure(fig, path)


def _child(args: dict[str, Any]) -> dict[str, Any]:
    """The child of :func:`run_under`: holds itself to the budget, then runs stress-ng (which
    inherits the cgroups and the pinning)."""
    from offload.host import budgets as B

    applied = B.apply(B.profile(args["profile"]), "rpwu")
    try:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "out.yaml"
            cmd = ["stress-ng", f"--{args['stressor']}", "1", "--timeout", f"{args['seconds']}s",
                   "--metrics-brief", "--yaml", str(out), "--temp-path", d]  # fmt: skip
            subprocess.run(cmd, capture_output=True, check=True, timeout=args["seconds"] + 60, cwd=d)
            text, name = out.read_text(), f"stress-ng's --yaml output {out.name}"
            cpu = parse_metric(text, args["stressor"], "cpu-usage-per-instance", name)
            ops = parse_ops(text, args["stressor"], name)
            return {"ops_per_s": ops, "cpu_percent": cpu, "budget": applied}
    finally:
        B.release(applied)


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
