"""The service's host path, before and after issue 25, side by side in one run (BENCHMARKS.md,
"The service's host path"; `offload report --host-path`).

Each configuration is a daemon (`offload-serve`, the daemon without Python) on the same rule set,
driven by the open-loop generator (`offload serve bench`'s engine, `offload.serve.bench`) to its
knee: the most requests/s whose p99 from due time stays within the SLA. At the knee's rate one
more run measures the daemon's CPU per query by thread role (`stats` → `cpu`): the host path.
"before" is the daemon built from the commit given by --before-bin (the pipeline as it was:
every request through a worker, crossbeam queues, one request per matcher call); "after" is this
checkout's. The null matcher measures the host path alone; the emulated device (a measured H200
profile, no matching on the host) shows what the host path lets a device deliver here.

Usage: python benches/serve_hostpath.py --ruletype R --rules R --queries Q --out build/bench/hostpath.json
       [--before-bin /path/to/old/offload-serve] [--profile data/plans/whatif/gpu-h200.toml]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload import rules as rules_api
from offload.files import write_text
from offload.host.machine import machine
from offload.rules.bench import load_query_columns
from offload.serve import bench, daemon
from offload.serve.control import control_request

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Config:
    label: str
    build: str  # "before" or "after"
    matcher: str  # fast, null, emulated
    kernels: int
    batch_max_queries: int
    batch_timeout_us: int
    layout: str  # raw, encoded32 (the old client's local encoding, version 1), encoded16

    def flags(self, profile: Path, queries: Path) -> list[str]:
        f = ["--matcher", self.matcher, "--workers", "1", "--kernels", str(self.kernels), "--queue", "1024"]
        f += [
            "--batch-max-queries",
            str(self.batch_max_queries),
            "--batch-timeout-us",
            str(self.batch_timeout_us),
        ]
        if self.matcher == "emulated":
            f += ["--emulate-profile", str(profile), "--emulate-queries", str(queries)]
        return f


CONFIGS = [
    Config("before: fast, 1 executor, per request", "before", "fast", 1, 0, 200, "encoded32"),
    Config("before: null, 1 executor, per request", "before", "null", 1, 0, 200, "encoded32"),
    Config("after: fast, 1 executor, self-filling", "after", "fast", 1, 4096, 0, "encoded16"),
    Config("after: null, 1 executor, self-filling", "after", "null", 1, 4096, 0, "encoded16"),
    Config("after: fast, inline", "after", "fast", 0, 4096, 0, "encoded16"),
    Config("after: null, inline", "after", "null", 0, 4096, 0, "encoded16"),
    Config("after: emulated H200, inline", "after", "emulated", 0, 65536, 0, "encoded16"),
    Config("after: emulated H200, 1 executor", "after", "emulated", 1, 65536, 0, "encoded16"),
    Config("after: fast, raw, inline", "after", "fast", 0, 4096, 0, "raw"),
]


def frames_for(c: Config, endpoint: str, rs: Any, cols: list[list[str]], size: int) -> list[bytes]:
    criteria = list(rs.criterion_codes)
    if c.layout == "raw":
        return bench.frames(cols, criteria, size)[0]
    if c.layout == "encoded32":  # as the clients did before: encoded here against version 1
        return bench.frames(cols, criteria, size, rules_api.compile(rs, "fast").encode(cols))[0]
    return bench.encoded_frames(endpoint, cols, criteria, size, 16)[0]


def one(
    c: Config, binary: Path, a: argparse.Namespace, rs: Any, cols: list[list[str]], tmp: str
) -> dict[str, Any]:
    ep, ctl = f"ipc://{tmp}/d.sock", f"ipc://{tmp}/c.sock"
    flags = [*daemon.rule_flags(a.ruletype, a.rules), "-e", ep, "-c", ctl, *c.flags(a.profile, a.queries)]
    proc = daemon.start(*flags, timeout_s=180, program=[str(binary)])
    try:
        frames = frames_for(c, ep, rs, cols, a.request_size)
        load = bench.Load("knee", 0.0, a.connections, 1, 1, 1024, a.duration, 1.0, 5.0, a.sla_p99_us, a.steps)
        result = bench.measure(ep, frames, load, control=ctl)
        stats = control_request(ctl, "stats", 10)
    finally:
        daemon.stop(proc)
    knee = result.get("knee") or {}
    return {
        "label": c.label, "config": c.__dict__, "knee": knee, "at_knee": result.get("at_knee"),
        "daemon_cpu": result.get("daemon_cpu"), "stopped": result.get("stopped"),
        "matcher": stats.get("matcher"), "emulated": stats.get("emulated"),
    }  # fmt: skip


def device_rate(profile: Path, batch: int) -> dict[str, float]:
    """What the profiled device delivers alone at `batch` queries per call: n ÷ its time (the
    planner's formula, as the emulated device holds it)."""
    from offload.plan.simulate import load_costs

    c = load_costs(str(profile))
    t = c.invoke_s + c.transfer_latency_s + batch * c.transfer_bytes_per_query / c.transfer_bps
    t += batch * c.kernel_query_s + c.kernel_fixed_s
    return {
        "batch": batch,
        "queries_per_s": batch / t,
        "pcie_queries_per_s": c.transfer_bps / c.transfer_bytes_per_query,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--queries", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--before-bin", type=Path, help="offload-serve built from the commit before (skipped if absent)"
    )
    ap.add_argument("--after-bin", type=Path, default=ROOT / "target/release/offload-serve")
    ap.add_argument("--profile", type=Path, default=ROOT / "data/plans/whatif/gpu-h200.toml")
    ap.add_argument("--request-size", type=int, default=256)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--duration", type=float, default=1.5, help="seconds per knee step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sla-p99-us", type=float, default=5000.0)
    ap.add_argument("--only", default="", help="run the configurations whose label holds this text")
    a = ap.parse_args()
    rs = rules_api.load(a.ruletype, a.rules)
    _, cols = load_query_columns(rs, a.queries)
    runs = []
    for c in CONFIGS:
        binary = a.before_bin if c.build == "before" else a.after_bin
        if binary is None or not binary.exists() or a.only not in c.label:
            continue
        t = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="hostpath-") as tmp:
            r = one(c, binary, a, rs, cols, tmp)
        runs.append(r)
        k, cpu = r["knee"], r["daemon_cpu"] or {}
        host = cpu.get("ns_per_query", {}).get("host_path")
        knee = f"{k.get('queries_per_s', 0) / 1e6:.2f} M q/s at {k.get('rate_rps', 0):,.0f} req/s"
        took = time.monotonic() - t
        p99 = k.get("p99_us", 0)
        print(
            f"{c.label}: knee {knee}, p99 {p99:,.0f} µs; host path {host or 0:,.0f} ns/query ({took:.0f} s)"
        )
    out = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "cpus": os.cpu_count(),
        "request_size": a.request_size, "sla_p99_us": a.sla_p99_us, "rules": a.rules,
        "device": device_rate(a.profile, 65536) | {"profile": str(a.profile)}, "runs": runs,
    }  # fmt: skip
    write_text(a.out, json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
