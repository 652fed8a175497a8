"""Multi-threaded services on a node against the host, by thread count: seed 003's slide 21.

The seed: Faodel's LocalKV test (put/get/delete on a 2D in-memory hash map) at 8 threads ran only
37.8% faster on a 32-core host than on the BlueField-2, while two Arrow queries (a filter on a 1/8
bounding box, min/max of the squared speed) ran about 4x faster on servers at the same thread
count. This runs the same three services at 1, 2, 4 and 8 threads:

* host: this machine, no quota;
* node: a child process held to the bluefield2 budget at k threads: a quarter of a core per
  thread, so k/4 cores (a cgroup quota), as a node with k slow cores.

localkv is k Python threads on a dict-of-dicts with a lock per row. They share one interpreter
lock, so it measures a locked map's bookkeeping under contention, not parallel work. The Arrow
queries run on k threads over the batches of a particle table (1 M rows); Arrow's kernels release
the interpreter lock. On a machine of few cores the host runs out of cores before 8 threads,
while the node's quota grows with k: read the ratios with the machine's core count in mind.
Writes benches/results/metrics/threads.{json,png}.

    python benches/metrics_threads.py                       # about a minute and a half
    python benches/metrics_threads.py --threads 1,2 --seconds 0.2 --rows 65536 --out /tmp/t
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from offload.files import atomic_write, save_figure
from offload.host.machine import machine
from offload.host.plots import pyplot
from offload.metrics import threads as T

OUT = Path(__file__).resolve().parent / "results" / "metrics"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--services", default=",".join(T.SERVICES), help="services, comma-separated")
    ap.add_argument("--threads", default="1,2,4,8", help="thread counts, comma-separated")
    ap.add_argument("--seconds", type=float, default=2.0, help="counted seconds per point")
    ap.add_argument("--rows", type=int, default=T.ROWS, help="particle rows the Arrow queries read")
    ap.add_argument("--profile", default="bluefield2", help="the node's budget, per thread")
    ap.add_argument("--out", type=Path, default=OUT, help="directory for threads.json and .png")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        services = a.services.split(",")
        threads = [int(x) for x in a.threads.split(",")]
        r = T.compare(services, threads, a.seconds, a.profile, a.rows,
                      lambda s: print(f"threads: {s}", file=sys.stderr))  # fmt: skip
    except (ValueError, RuntimeError) as e:
        print(f"metrics_threads: {e}", file=sys.stderr)
        return 2
    r = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "wall_s": time.time() - t0,
         "machine": machine()} | r  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(a.out / "threads.json") as f:
        f.write(json.dumps(r, indent=2) + "\n")
    _plot(r, a.out / "threads.png")
    for s in r["services"]:
        host, node = r["cores_used"]["host"][s], r["cores_used"]["node"][s]
        cells = "  ".join(
            f"{k}: {r['host_over_node'][s][k]:.2f}x (cores {host[k]:.2f}/{node[k]:.2f})" for k in r["threads"]
        )
        print(f"{s:16} host / node  {cells}")
    print(f"wrote {a.out / 'threads.json'} and {a.out / 'threads.png'}", file=sys.stderr)
    return 0


def _plot(r: dict[str, Any], path: Path) -> None:
    """Throughput by thread count per service, host and node; the host ÷ node ratio beside."""
    plt = pyplot()
    n = len(r["services"])
    fig, axes = plt.subplots(1, n + 1, figsize=(4.2 * (n + 1), 4))
    ks = r["threads"]
    for ax, s in zip(axes, r["services"], strict=False):
        ax.plot(ks, [r["host"][s][k] for k in ks], "C0-o", label="host")
        ax.plot(ks, [r["node"][s][k] for k in ks], "C3-o", label=f"{r['profile']} (k/4 cores)")
        ax.set_title(s)
        ax.set_ylabel("ops/s" if s == "localkv" else "rows/s")
    for s in r["services"]:
        axes[-1].plot(ks, [r["host_over_node"][s][k] for k in ks], "-o", label=s)
    axes[-1].axhline(r["seed"]["localkv_host_over_node_at_8"], color="grey", ls="--", lw=0.8,
                     label="seed: LocalKV at 8 threads, 1.378")  # fmt: skip
    axes[-1].axhline(
        r["seed"]["query_host_over_node"], color="grey", ls=":", lw=0.8, label="seed: queries, ~4"
    )
    axes[-1].set_title("host ÷ node")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("threads")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"services by thread count, host against a {r['profile']} node ({r['machine']['cores']} CPUs here)"
    )
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
