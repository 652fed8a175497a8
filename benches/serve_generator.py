"""What the load generator costs beside the daemon it measures (issue 40, item 1).

Per configuration, a fresh inline daemon (`--kernels 0`, `offload-serve`) on the rule set, driven
by `offload serve bench`'s generator over ipc with 256-query requests encoded by the client
(16-bit codes) to its knee (p99 from due time <= 5 ms), then one run at the knee's rate between
two `stats`: the generator's CPU per query sent beside the daemon's host path per query answered
(`generator_to_host_path`). Configurations: the null and fast matchers x the generator before
issue 40 (`--pacing per-request --client-socket libzmq`: a wake-up per request and per reply,
libzmq's DEALER, the loop as it was), in between (`ticks+libzmq`: the ticks alone) and after
(`--pacing ticks --client-socket zmtp`) x unpinned and pinned (the daemon on CPU 0, the generator
on CPU 1), each --runs times, alternated so that drift and other load fall on all alike. The
medians are printed and written with every run.

Usage: python benches/serve_generator.py --ruletype R --rules R --queries Q --out build/bench/generator.json
       [--runs 3] [--only null] [--daemon-bin target/release/offload-serve]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import rules as rules_api
from offload.files import write_text
from offload.host.machine import machine
from offload.rules.bench import load_query_columns
from offload.serve import bench, daemon
from offload.serve.control import control_request

ROOT = Path(__file__).resolve().parents[1]


# The generators compared: (pacing, client socket).
GENERATORS = {
    "before": ("per-request", "libzmq"),
    "ticks+libzmq": ("ticks", "libzmq"),
    "after": ("ticks", "zmtp"),
}


def one(
    a: argparse.Namespace, rs: Any, cols: list[list[str]], matcher: str, generator: str, pin: bool
) -> dict[str, Any]:
    """One configuration: its daemon started, the knee found, measured at the knee, stopped."""
    with tempfile.TemporaryDirectory(prefix="gen-") as tmp:
        ep, ctl = f"ipc://{tmp}/d.sock", f"ipc://{tmp}/c.sock"
        flags = [*daemon.rule_flags(a.ruletype, a.rules), "-e", ep, "-c", ctl, "--matcher", matcher,
                 "--workers", "1", "--kernels", "0", "--queue", "1024", "--batch-max-queries", "4096",
                 "--batch-timeout-us", "0"]  # fmt: skip
        program = [str(a.daemon_bin)] if a.daemon_bin.exists() else None
        proc = daemon.start(*flags, timeout_s=180, cpus={0} if pin else None, program=program)
        try:
            frames, _ = bench.encoded_frames(ep, cols, list(rs.criterion_codes), a.request_size, 16)
            pacing, socket = GENERATORS[generator]
            load = bench.Load("knee", 0.0, a.connections, 1, 1, 1024, a.duration, 1.0, 5.0, a.sla_p99_us,
                              a.steps, pacing=pacing, client_socket=socket)  # fmt: skip
            with bench.pinned({1} if pin else None):
                r = bench.measure(ep, frames, load, control=ctl)
            control_request(ctl, "stats", 10)
        finally:
            daemon.stop(proc)
    knee, ratio = r.get("knee") or {}, r.get("generator_to_host_path") or {}
    gen = (r.get("at_knee") or {}).get("generator", {})
    return {
        "matcher": matcher, "generator": generator, "pinned": pin, "knee_qps": knee.get("queries_per_s"),
        "knee_rate_rps": knee.get("rate_rps"), "p99_us": knee.get("p99_us"), "stopped": r.get("stopped"),
        "generator_ns_per_query": ratio.get("generator_ns_per_query"),
        "host_path_ns_per_query": ratio.get("host_path_ns_per_query"), "ratio": ratio.get("ratio"),
        "generator_us_per_request": gen.get("cpu_us_per_request"), "generator_bound": gen.get("bound"),
        "tick_us": (r.get("at_knee") or {}).get("pacing", {}).get("tick_us"), "result": r,
    }  # fmt: skip


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    xs = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--queries", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--daemon-bin", type=Path, default=ROOT / "target/release/offload-serve")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--request-size", type=int, default=256)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--duration", type=float, default=1.5, help="seconds per knee step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sla-p99-us", type=float, default=5000.0)
    ap.add_argument("--only", default="", help="matchers, generators or pinnings to run: e.g. null,after")
    a = ap.parse_args()
    rs = rules_api.load(a.ruletype, a.rules)
    _, cols = load_query_columns(rs, a.queries)
    only = [w for w in a.only.split(",") if w]
    grid = [
        (m, p, pin)
        for pin in (False, True)
        for m in ("null", "fast")
        for p in GENERATORS
        if all(w in (m, p, "pinned" if pin else "unpinned") for w in only) or not only
    ]
    rows: list[dict[str, Any]] = []
    for run in range(a.runs):
        for m, p, pin in grid:
            t = time.monotonic()
            r = one(a, rs, cols, m, p, pin)
            rows.append({"run": run, **r})
            where = "pinned 0/1" if pin else "unpinned"
            knee, gen, host = (
                (r["knee_qps"] or 0) / 1e6,
                r["generator_ns_per_query"] or 0,
                r["host_path_ns_per_query"] or 0,
            )
            print(
                f"run {run} {m} {p} {where}: knee {knee:.2f} M q/s, generator {gen:.1f} ns/q, host path "
                f"{host:.1f} ns/q, ratio {r['ratio'] or 0:.2f}, tick {r['tick_us']} µs "
                f"({time.monotonic() - t:.0f} s)",
                flush=True,
            )
    medians = []
    for m, p, pin in grid:
        sel = [r for r in rows if (r["matcher"], r["generator"], r["pinned"]) == (m, p, pin)]
        keys = ("knee_qps", "p99_us", "generator_ns_per_query", "host_path_ns_per_query", "ratio",
                "generator_us_per_request")  # fmt: skip
        bound = sum(1 for r in sel if r["generator_bound"] or r["stopped"])
        medians.append({"matcher": m, "generator": p, "pinned": pin, "runs": len(sel),
                        **{k: median(sel, k) for k in keys}, "generator_bound_runs": bound})  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    result = {
        "benchmark": "serve-generator", "command": " ".join([sys.executable, *sys.argv]),
        "commit": commit.stdout.strip(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(), "medians": medians, "runs": rows,
    }  # fmt: skip
    write_text(a.out, json.dumps(result, indent=1) + "\n")
    for md in medians:
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in md.items()}))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
