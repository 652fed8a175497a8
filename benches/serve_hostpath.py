"""The service's host path, before and after issue 25, side by side in one run (BENCHMARKS.md,
"The service's host path"; `offload report --host-path`).

Each configuration is a daemon (`offload-serve`, the daemon without Python) on the same rule set,
driven by the open-loop generator (`offload serve bench`'s engine) to its knee: the most
requests/s whose p99 from due time stays within the SLA. At the knee's rate one more run
measures the daemon's CPU per query by thread role (`stats` → `cpu`): the host path
(offload.serve.hostpath). "before" is the daemon built from the commit given by --before-bin
(the pipeline as it was: every request through a worker, crossbeam queues, one request per
matcher call); "after" is this checkout's. The null matcher measures the host path alone; the
emulated device (a measured H200 profile, no matching on the host) shows what the host path lets
a device deliver here.

Usage: python benches/serve_hostpath.py --ruletype R --rules R --queries Q --out build/bench/hostpath.json
       [--before-bin /path/to/old/offload-serve] [--profile data/plans/whatif/gpu-h200.toml]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from offload.files import write_text
from offload.serve import hostpath

ROOT = Path(__file__).resolve().parents[1]


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
    setup = hostpath.Setup(a.ruletype, a.rules, a.queries, a.profile, a.request_size, a.connections,
                           a.duration, a.steps, a.sla_p99_us)  # fmt: skip
    binaries = {"before": a.before_bin, "after": a.after_bin}
    configs = [
        c for c in hostpath.CONFIGS if binaries[c.build] and binaries[c.build].exists() and a.only in c.label
    ]
    result = hostpath.run(
        setup, configs, lambda c: [str(binaries[c.build])], lambda line: print(line, flush=True)
    )
    write_text(a.out, json.dumps(result, indent=1) + "\n")
    hostpath.plot(result, a.out.with_suffix(".png"))
    print(f"wrote {a.out} and {a.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
