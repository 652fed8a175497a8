"""Where a request's time goes, by request size, through the real service (seed 000/001, Fig. 2).

One client sends requests of 1, 2, 4, ... 65,536 queries, one at a time, to a daemon with one
worker, one kernel executor and one engine thread (the seed's 1 Domain Explorer, 1 Worker,
1 ERBIUM kernel). Each request is split into: client (building the frame, decoding the reply),
zeromq (the round trip less the server's stages: ZeroMQ both ways and the broker), queues,
encode (the worker's), invocation (a device call less its copies and kernel), h2d and d2h (a
device's copies), compute (the kernel, or a CPU matcher's match) and reply. "Movement" is
zeromq + invocation + h2d + d2h, "work" encode + compute; the result names the size from which
work stays at or above movement (the seed: data movement dominates up to 4,096 queries) and the
ZeroMQ share by size (the seed: 60% to 30%).

Backends (--backends, comma-separated):
  fast    the CPU matcher: every stage measured
  erbium  the emulated device with the seed's published ERBIUM costs (data/plans/whatif/erbium-fpga.toml):
          its h2d/kernel/d2h are that profile's formula, held in real time; the rest is measured
  h200    the emulated device with our measured H200 profile (data/plans/whatif/gpu-h200.toml)
  gpu     the CUDA matcher (needs a GPU): every stage measured

Writes JSON (per backend and size: the median and 90th percentile of every stage and category)
and a PNG beside it (the shares by size, stacked; the round trip by size).

Example (the recorded run, ~4 minutes on 2 vCPUs):
  python benches/serve_breakdown.py --ruletype build/s100k/ruletype.xml --rules build/s100k/rules.csv \\
      --queries build/s100k/queries.csv --out benches/results/serve-breakdown-100k.json
A quick look: --sizes 1,64,4096 --seconds 0.5 --backends fast
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from offload.clitools import counts_arg, names_arg
from offload.files import write_text
from offload.serve import breakdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--ruletype", required=True, help="rule type of the served set (XML or TOML)")
    ap.add_argument("--rules", required=True, help="rules CSV of the served set")
    ap.add_argument(
        "--queries", required=True, type=Path,
        help="queries CSV (offload rules synth's queries.csv): requests are windows of it; the emulated "
        "device precomputes its answers from it",
    )  # fmt: skip
    ap.add_argument("--out", required=True, type=Path, help="JSON to write (the PNG goes beside it)")
    ap.add_argument(
        "--backends", type=names_arg(list(breakdown.BACKENDS), "backend"), default=["fast", "erbium", "h200"],
        help="what sits behind the executor, comma-separated: fast, erbium, h200, gpu "
        "(default: fast,erbium,h200)",
    )  # fmt: skip
    ap.add_argument(
        "--sizes", type=counts_arg, default=list(breakdown.SIZES),
        help="queries per request, comma-separated (default: 1,2,4,...,65536)",
    )  # fmt: skip
    ap.add_argument(
        "--iterations", type=int, default=1000, help="requests per size at most (the seed: 1,000)"
    )
    ap.add_argument(
        "--seconds", type=float, default=2.0,
        help="stop a size after this many seconds (large requests then get fewer iterations)",
    )  # fmt: skip
    ap.add_argument("--min-iterations", type=int, default=10, help="requests per size at least")
    ap.add_argument(
        "--encoded", action="store_true",
        help="send 16-bit codes encoded by the client with the daemon's dictionary (default: raw text, "
        "encoded by the worker, as the seed's Domain Explorer sends)",
    )  # fmt: skip
    a = ap.parse_args(argv)
    budget = breakdown.Budget(a.iterations, a.seconds, a.min_iterations)
    try:
        result = breakdown.run(
            a.ruletype,
            a.rules,
            a.queries,
            [breakdown.BACKENDS[n] for n in a.backends],
            a.sizes,
            budget,
            a.encoded,
            lambda m: print(m, flush=True),
        )
    except (OSError, ValueError) as e:  # a rule or query file that cannot be read: one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(a.out, json.dumps(result, indent=1) + "\n")
    png = breakdown.plot(result, a.out.with_suffix(".png"))
    for b in result["backends"]:
        cross = b["work_dominates_from"]
        print(
            f"{b['label']}: work >= movement from {cross:,} queries"
            if cross
            else f"{b['label']}: movement dominates at every size",
            f"(seed: movement dominates up to {breakdown.SEED['movement_dominates_up_to']:,}); ZeroMQ share "
            f"{b['zeromq_share_first']:.0%} at {b['rows'][0]['size']:,} to {b['zeromq_share_last']:.0%} at "
            f"{b['rows'][-1]['size']:,} (seed: 60% to 30%)",
        )
    print(f"wrote {a.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
