"""The emulated H200 against the fast matcher, old device against new, side by side (issue 40,
item 4: an emulated device that takes no host core).

Each configuration is a daemon (`offload-serve`, the daemon without Python) on the same rule set,
driven by the open-loop generator (`offload serve bench --mode knee`, client-encoded 16-bit
requests) to its knee: the most requests/s whose p99 from due time stays within the SLA
(offload.serve.hostpath.measure_config). The emulated device runs from two builds: --old-bin
(the device thread that sleeps to each due instant less a margin and spins the rest) and
--new-bin (the executor holds on a timerfd, the device thread only looks up); the fast matcher
from --new-bin. Runs are interleaved (every configuration once, then again), and the summary
gives medians over --runs: knee, p99 at the knee, the device thread's CPU per batch, the
timing error (how late each batch came back against its due instant; new build only) and the
spin per batch, and the emulated knee over the fast one per build and request size.

Usage: python benches/serve_emulated.py --ruletype R --rules R --queries Q --old-bin OLD --new-bin NEW
       --out benches/results/serve-emulated/run.json [--runs 3] [--sizes 256,4096]
       [--old-commit C --new-commit C]
Build the two daemons from worktrees: git worktree add --detach /tmp/old COMMIT; cd /tmp/old;
cargo build --release -p offload-serve --bin offload-serve (target/release/offload-serve).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from offload import rules as rules_api
from offload.files import write_text
from offload.host.machine import machine
from offload.rules.bench import load_query_columns
from offload.serve import bench, daemon, hostpath
from offload.serve.control import control_request

ROOT = Path(__file__).resolve().parents[1]


def configs() -> list[tuple[str, hostpath.Config]]:
    """(build, configuration): the emulated H200 from both builds, fast from the new one;
    inline and one executor each."""
    out = []
    for build in ("old", "new"):
        for kernels, mode in ((0, "inline"), (1, "1 executor")):
            label = f"{build}: emulated H200, {mode}"
            out.append((build, hostpath.Config(label, build, "emulated", kernels, 65536, 0, "encoded16")))
    out += [
        ("new", hostpath.Config("fast, inline", "new", "fast", 0, 4096, 0, "encoded16")),
        ("new", hostpath.Config("fast, 1 executor", "new", "fast", 1, 4096, 0, "encoded16")),
    ]
    return out


def device_figures(emulated: dict[str, Any] | None) -> dict[str, Any]:
    """The device's own figures from `stats` → `emulated` (either build): CPU and spin per batch,
    the timing error where the build reports it."""
    if not emulated:
        return {}
    batches = max(int(emulated.get("batches") or 0), 1)
    cpu = emulated.get("device_thread_cpu_ns")
    return {
        "batches": emulated.get("batches"),
        "queries_per_batch": (emulated.get("queries") or 0) / batches,
        "device_thread_cpu_us_per_batch": cpu / 1e3 / batches if cpu is not None else None,
        "spin_us_per_batch": (emulated.get("spin_ns") or 0) / 1e3 / batches,
        "lookup_ns_per_query": (emulated.get("lookup_ns") or 0) / max(int(emulated.get("queries") or 0), 1),
        "late_batches": emulated.get("late_batches"),
        "misses": emulated.get("misses"),
        "timing_error_us": emulated.get("timing_error_us"),
    }


def measure_at_rate(
    c: hostpath.Config,
    s: hostpath.Setup,
    rs: Any,
    cols: list[list[str]],
    tmp: str,
    program: list[str],
    rate: float,
) -> dict[str, Any]:
    """One configuration at a fixed open-loop rate (requests/s) for `s.duration_s` × 2: latency,
    the daemon's CPU by role, and the device's figures at that load (every wait bounded)."""
    ep, ctl = f"ipc://{tmp}/d.sock", f"ipc://{tmp}/c.sock"
    flags = [*daemon.rule_flags(s.ruletype, s.rules), "-e", ep, "-c", ctl, *c.flags(s.profile, s.queries)]
    proc = daemon.start(*flags, timeout_s=180, program=program)
    try:
        frames = hostpath.frames_for(c, ep, rs, cols, s.request_size)
        load = bench.Load("open", rate, s.connections, 1, 1, 1024, 2 * s.duration_s, 1.0, 5.0)
        result = bench.measure(ep, frames, load, control=ctl)
        stats = control_request(ctl, "stats", 10)
    finally:
        daemon.stop(proc)
    keep = ("requests_per_s", "queries_per_s", "latency_us", "generator", "daemon_cpu")
    return {k: result.get(k) for k in keep} | {
        "rate_rps": rate,
        "device": device_figures(stats.get("emulated")),
    }


def median_of(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per (size, configuration), and the emulated knee over fast's per build."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["request_size"], r["label"]), []).append(r)
    rows = {}
    for (size, label), rs in sorted(groups.items()):
        dev = [r["device"] for r in rs]
        err = [d.get("timing_error_us") or {} for d in dev]
        # A knee of 0 is a search in which no rate met the SLA (a busy machine): left out of the
        # median and counted.
        knees = [(r["knee"] or {}).get("queries_per_s") for r in rs]
        rows[f"{size}: {label}"] = {
            "runs": len(rs),
            "knee_qps": median_of([k or None for k in knees]),
            "knee_qps_all": knees,
            "knees_failed": sum(1 for k in knees if not k),
            "p99_us": median_of([(r["knee"] or {}).get("p99_us") or None for r in rs]),
            "device_thread_cpu_us_per_batch": median_of(
                [d.get("device_thread_cpu_us_per_batch") for d in dev]
            ),
            "spin_us_per_batch": median_of([d.get("spin_us_per_batch") for d in dev]),
            "lookup_ns_per_query": median_of([d.get("lookup_ns_per_query") for d in dev]),
            "queries_per_batch": median_of([d.get("queries_per_batch") for d in dev]),
            "timing_error_us": {q: median_of([e.get(q) for e in err]) for q in ("p50", "p99", "max")},
        }
    ratios = {}
    for size in sorted({r["request_size"] for r in runs}):
        for mode in ("inline", "1 executor"):
            fast = (rows.get(f"{size}: fast, {mode}") or {}).get("knee_qps")
            for build in ("old", "new"):
                emu = (rows.get(f"{size}: {build}: emulated H200, {mode}") or {}).get("knee_qps")
                if fast and emu:
                    ratios[f"{size}: {build} emulated / fast, {mode}"] = emu / fast
    at_rate: dict[str, Any] = {}
    for r in runs:
        if r.get("at_rate"):
            at_rate.setdefault(f"{r['request_size']}: {r['label']}", []).append(r["at_rate"])
    fixed = {}
    for key, rs in sorted(at_rate.items()):
        dev = [x["device"] for x in rs]
        err = [d.get("timing_error_us") or {} for d in dev]
        lat = [x.get("latency_us") or {} for x in rs]
        fixed[key] = {
            "rate_rps": median_of([x["rate_rps"] for x in rs]),
            "p50_us": median_of([x.get("p50") for x in lat]),
            "p99_us": median_of([x.get("p99") for x in lat]),
            "device_thread_cpu_us_per_batch": median_of(
                [d.get("device_thread_cpu_us_per_batch") for d in dev]
            ),
            "queries_per_batch": median_of([d.get("queries_per_batch") for d in dev]),
            "spin_us_per_batch": median_of([d.get("spin_us_per_batch") for d in dev]),
            "timing_error_us": {q: median_of([e.get(q) for e in err]) for q in ("p50", "p99", "max")},
        }
    return {"medians": rows, "emulated_over_fast": ratios, "at_a_fixed_rate": fixed}


def at_rate_pass(
    a: argparse.Namespace,
    rs: Any,
    cols: list[list[str]],
    sizes: list[int],
    chosen: list[tuple[str, hostpath.Config]],
    bins: dict[str, Path],
    runs: list[dict[str, Any]],
) -> None:
    """Each emulated configuration once more per run at `a.rate_fraction` of fast's median knee
    (same size and mode): `at_rate` in the knee run of the same index."""
    for size in sizes:
        setup = hostpath.Setup(a.ruletype, a.rules, a.queries, a.profile, size, a.connections,
                               a.duration, a.steps, a.sla_p99_us)  # fmt: skip
        for build, c in chosen:
            if c.matcher != "emulated":
                continue
            mode = "inline" if c.kernels == 0 else "1 executor"
            fast = [(r["knee"] or {}).get("queries_per_s") or None for r in runs
                    if r["request_size"] == size and r["label"] == f"fast, {mode}"]  # fmt: skip
            knee = median_of(fast)
            if not knee:
                continue
            rate = a.rate_fraction * knee / size
            for r in [r for r in runs if r["request_size"] == size and r["label"] == c.label]:
                with tempfile.TemporaryDirectory(prefix="serve-emulated-") as tmp:
                    r["at_rate"] = measure_at_rate(c, setup, rs, cols, tmp, [str(bins[build])], rate)
                d, lat = r["at_rate"]["device"], r["at_rate"].get("latency_us") or {}
                err = d.get("timing_error_us") or {}
                print(
                    f"at {rate:,.0f} req/s, size {size} {c.label}: "
                    f"p50/p99 {lat.get('p50')}/{lat.get('p99')} µs; "
                    f"device CPU/batch {d.get('device_thread_cpu_us_per_batch')} µs; "
                    f"timing error p50/p99/max {err.get('p50')}/{err.get('p99')}/{err.get('max')} µs",
                    flush=True,
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--queries", required=True, type=Path)
    ap.add_argument("--old-bin", required=True, type=Path, help="offload-serve built from the commit before")
    ap.add_argument("--new-bin", type=Path, default=ROOT / "target/release/offload-serve")
    ap.add_argument("--old-commit", default=None, help="the commit --old-bin was built from (recorded)")
    ap.add_argument("--new-commit", default=None, help="the commit --new-bin was built from (recorded)")
    ap.add_argument("--profile", type=Path, default=ROOT / "data/plans/whatif/gpu-h200.toml")
    ap.add_argument("--sizes", default="256,4096", help="queries per request, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--duration", type=float, default=1.5, help="seconds per knee step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sla-p99-us", type=float, default=5000.0)
    ap.add_argument("--only", default="", help="run the configurations whose label holds this text")
    ap.add_argument(
        "--rate-fraction",
        type=float,
        default=0.5,
        help="then each emulated configuration at this fraction of fast's median knee (same mode and size), "
        "the same rate for both builds: the device's figures at one load (0: skip)",
    )
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    bins = {"old": a.old_bin, "new": a.new_bin}
    for build, path in bins.items():
        if not path.is_file():
            sys.exit(f"error: --{build}-bin {path}: no such file")
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        sys.exit(f"error: --sizes {a.sizes!r}: expected numbers separated by commas")
    rs = rules_api.load(a.ruletype, a.rules)
    _, cols = load_query_columns(rs, a.queries)
    chosen = [(b, c) for b, c in configs() if a.only in c.label]
    runs = []
    for run in range(a.runs):
        for size in sizes:
            setup = hostpath.Setup(a.ruletype, a.rules, a.queries, a.profile, size, a.connections,
                                   a.duration, a.steps, a.sla_p99_us)  # fmt: skip
            for build, c in chosen:
                t = time.monotonic()
                with tempfile.TemporaryDirectory(prefix="serve-emulated-") as tmp:
                    r = hostpath.measure_config(c, setup, rs, cols, tmp, [str(bins[build])])
                r |= {"run": run, "request_size": size, "device": device_figures(r.get("emulated"))}
                runs.append(r)
                k, d = r["knee"] or {}, r["device"]
                err = d.get("timing_error_us") or {}
                print(
                    f"run {run} size {size} {c.label}: knee {k.get('queries_per_s', 0) / 1e6:.2f} M q/s, "
                    f"p99 {k.get('p99_us', 0):,.0f} µs; device CPU/batch "
                    f"{d.get('device_thread_cpu_us_per_batch')} µs, "
                    f"timing error p50/p99 {err.get('p50')}/{err.get('p99')} µs "
                    f"({time.monotonic() - t:.0f} s)",
                    flush=True,
                )
    if a.rate_fraction > 0:
        at_rate_pass(a, rs, cols, sizes, chosen, bins, runs)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    result = {
        "command": " ".join(["python", *sys.argv]),
        "commit": commit or None,
        "binaries": {b: str(p) for b, p in bins.items()},
        "binaries_commit": {"old": a.old_commit, "new": a.new_commit},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "rules": a.rules,
        "device_profile": str(a.profile),
        "sla_p99_us": a.sla_p99_us,
        "summary": summarise(runs),
        "runs": runs,
    }
    write_text(a.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
