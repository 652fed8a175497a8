"""CPU against the accelerator per user request, with early stop (seed 000/001, Fig. 10 and §4.2).

A user request holds n candidate connections (queries) and wants W valid answers (a rule matched);
the Domain Explorer stops once it has them. The CPU checks queries one by one and stops exactly
at the W-th valid answer; the accelerator is called in batches (invocations of 64, 128, 256, ...
queries, --first-chunk and --growth) until enough valid answers came back, so it checks more
queries (the seed: 23% more) but each costs it less. The crossover is the number of checked
queries from which the accelerator's median time per request is below the CPU's (the seed: ~400).

  CPU          our encoder + matcher over exactly the queries a sequential loop checks, timed in Rust
               (no Python in the timed region), median of --repeats: fast, nfa (ERBIUM's design on a
               CPU) and nfa:given (the same with the criteria in the rule type's order, ~4 µs a query)
  accelerator  the invocations as requests to offload serve (raw text; 1 worker, 1 executor, 1 engine
               thread), the sum of their round trips; and one request with stop_after = W (the service's own
               early stop), unless --no-one-request

Backends (--backends): erbium (the emulated device with the seed's published ERBIUM costs,
data/plans/whatif/erbium-fpga.toml), h200 (the emulated device with our measured H200 profile),
fast (the service with the CPU matcher behind it), gpu (a CUDA device). On the emulated device the
copies and kernel are that profile's formula held in real time; everything else is measured.

Requests: the trace's (requests.csv, its own W of 50-200: the extra queries and the scatter), and a
sweep of W (16 ... 4,096) over --windows windows of --window queries (the checked counts the trace
never reaches: the crossover).

Writes JSON (every user request's record, the extra queries, the crossover of every accelerator
against every CPU matcher, binned medians) and a PNG beside it.

Example (the recorded run, ~10 minutes on 2 vCPUs):
  python benches/serve_earlystop.py --ruletype build/s100k/ruletype.xml --rules build/s100k/rules.csv \\
      --trace build/s100k --out benches/results/serve-earlystop-100k.json
A quick look: --limit 100 --windows 2 --backends erbium
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from offload.clitools import counts_arg, names_arg
from offload.files import write_text
from offload.serve import breakdown, earlystop


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--ruletype", required=True, help="rule type of the served set")
    ap.add_argument("--rules", required=True, help="rules CSV of the served set")
    ap.add_argument("--trace", required=True, type=Path, help="directory with queries.csv and requests.csv")
    ap.add_argument("--out", required=True, type=Path, help="JSON to write (the PNG goes beside it)")
    ap.add_argument(
        "--backends", type=names_arg(list(breakdown.BACKENDS), "backend"), default=["erbium", "h200"],
        help="accelerators behind the service, comma-separated (default: erbium,h200)",
    )  # fmt: skip
    ap.add_argument(
        "--cpu", type=names_arg(earlystop.CPU_MATCHERS, "CPU matcher"), default=list(earlystop.CPU_MATCHERS),
        help="CPU matchers of the Domain Explorer's own loop (default: fast,nfa,nfa:given)",
    )  # fmt: skip
    ap.add_argument(
        "--first-chunk", type=int, default=64, help="queries of the first invocation (default 64)"
    )
    ap.add_argument(
        "--growth", type=float, default=2.0, help="each invocation this many times the last (default 2)"
    )
    ap.add_argument(
        "--window", type=int, default=6000, help="queries per user request of the sweep (default 6000)"
    )
    ap.add_argument("--windows", type=int, default=16, help="user requests per W of the sweep (default 16)")
    ap.add_argument(
        "--wanted", type=counts_arg, default=list(earlystop.SWEEP_WANTED),
        help="W of the sweep, comma-separated (default 16,...,4096)",
    )  # fmt: skip
    ap.add_argument("--limit", type=int, default=None, help="the trace's first N requests only")
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed passes of each user request, CPU and service (median)"
    )
    ap.add_argument(
        "--no-one-request", dest="one_request", action="store_false",
        help="skip the one-request flow (stop_after: the daemon encodes the whole request)",
    )  # fmt: skip
    a = ap.parse_args(argv)
    if a.first_chunk < 1 or a.growth < 1:
        ap.error("--first-chunk is at least 1 and --growth at least 1")
    try:
        result = earlystop.run(
            a.ruletype, a.rules, a.trace / "queries.csv", a.trace / "requests.csv",
            [breakdown.BACKENDS[b] for b in a.backends], a.cpu, earlystop.Policy(a.first_chunk, a.growth),
            a.window, a.windows, a.wanted, a.limit, a.repeats, a.one_request, lambda m: print(m, flush=True),
        )  # fmt: skip
    except (OSError, ValueError) as e:  # a rule, query or request file that cannot be read: one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(a.out, earlystop.dumps(result))
    png = earlystop.plot(result, a.out.with_suffix(".png"))
    s = result["summary"]
    if "trace" in s:
        t = s["trace"]
        print(
            f"trace: {t['requests']:,} requests; the accelerator checks {t['extra_queries']:.0%} more "
            f"queries (per request {t['extra_queries_mean_per_request']:.0%}; seed 23%), "
            f"{t['invocations_mean']:.2f} invocations per request"
        )
    for c in s["crossover"]:
        where = (
            f"{c['checked']:,.0f} checked queries" if c["checked"] else "none (the CPU is faster throughout)"
        )
        print(f"crossover {c['flow']} vs CPU {c['cpu']} ({c['source']}): {where} (seed ~400)")
    print(f"wrote {a.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
