"""The service's knee on a GPU machine (benches/gpu/run.sh, step `service`), without `offload.cli`:
the GPU machines lack the data-service stack (pyarrow, datasketches) that the CLI imports.
Frames are 16-bit codes from the daemon's dictionary; the knee by the open-loop generator, the
host path at the knee's rate from the daemon's `stats` (offload.serve.bench.measure).

Usage: python3 benches/gpu/service.py ENDPOINT CONTROL RULETYPE RULES QUERIES REQUEST_SIZE OUT.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from offload import rules as rules_api
from offload.rules.bench import load_query_columns
from offload.serve import bench
from offload.serve.control import control_request


def main() -> None:
    endpoint, control, ruletype, rules, queries, size, out = sys.argv[1:8]
    rs = rules_api.load(ruletype, rules)
    _, cols = load_query_columns(rs, Path(queries))
    frames, encoding = bench.encoded_frames(endpoint, cols, list(rs.criterion_codes), int(size), 16)
    steps, duration = int(os.environ.get("SVC_STEPS", "5")), float(os.environ.get("SVC_DURATION", "2"))
    load = bench.Load("knee", 0.0, 16, 4, 1, 1024, duration, 1.0, 5.0, 5000.0, steps)
    result = bench.measure(endpoint, frames, load, control=control)
    result |= {"request_size": int(size), **encoding, "stats": control_request(control, "stats", 10)}
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    knee, cpu = result.get("knee") or {}, result.get("daemon_cpu")
    print(f"knee {knee.get('queries_per_s', 0) / 1e6:.2f} M q/s at {knee.get('rate_rps', 0):,.0f} req/s, "
          f"p99 {knee.get('p99_us', 0):,.0f} µs; stopped: {result.get('stopped')}")  # fmt: skip
    if cpu:
        print(bench.host_path_line(cpu))


if __name__ == "__main__":
    main()
