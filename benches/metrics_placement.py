"""RocksDB's data access amplification and throughput with the store on the host and on an
embedded node, seed 003's slides 45-46 and 50, on this machine's disk.

The seed ran YCSB A (50% reads, 50% updates) on RocksDB: one more thread raised the device's
throughput by 20% but not RocksDB's, a "6x data access amplification"; and it compared MBWUs with
the store placed on a host and on embedded boards (network, integrated and disaggregated tests).
This runs YCSB A (zipfian keys, 1 KiB values, direct I/O, no block cache, as `offload metrics
mbwu` does) at each worker count in two placements:

* host: the workers and their RocksDB shards on this machine, no quota;
* embedded: the same in a process held to a node budget (default bluefield2, a quarter of a
  core, cgroup quota), which the workers inherit.

Per step: the store's ops/s (steady window), the device's MB/s (bytes the worker processes read
and wrote at the storage layer, /proc/<pid>/io, flushes and compactions included), the data
access amplification (those bytes over the bytes of keys and values the operations moved) and
the CPU per operation. The LSM tree is scaled down (4 MiB memtables and SST files, 16 MiB level
1) so that a few seconds see its flushes and compactions. The host's best ops/s is this run's
MBWU; the node's steps are given in MBWUs. Writes benches/results/metrics/placement.{json,png}.

The seed's network, integrated and disaggregated configurations need a separate client machine
(YCSB over Java RMI), a 24-vCPU host and Arm boards with SATA SSDs: they are not built here.

    python benches/metrics_placement.py                          # about a minute
    python benches/metrics_placement.py --keys 20000 --workers 1,2 --seconds 1 --out /tmp/p
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from offload.files import atomic_write
from offload.host.machine import machine
from offload.metrics.mbwu import placement as PL

OUT = Path(__file__).resolve().parent / "results" / "metrics"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/offload-mbwu"), help="on the disk under test")
    ap.add_argument("--keys", type=int, default=200_000, help="records of 1 KiB; half are overwritten first")
    ap.add_argument("--workers", default="1,2,4", help="worker processes per step, rising")
    ap.add_argument("--seconds", type=float, default=4.0, help="counted seconds per step")
    ap.add_argument("--warmup", type=float, default=1.0, help="uncounted seconds before each step")
    ap.add_argument("--embedded", default="bluefield2", help="the node budget of the embedded placement")
    ap.add_argument("--memtable-mib", type=int, default=4, help="memtable and SST MiB (0: RocksDB's 64)")
    ap.add_argument("--out", type=Path, default=OUT, help="directory for placement.json and .png")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        workers = [int(x) for x in a.workers.split(",")]
        r = PL.compare(a.dir, a.keys, workers, a.seconds, a.warmup, a.embedded, a.memtable_mib << 20,
                       lambda s: print(f"placement: {s}", file=sys.stderr))  # fmt: skip
    except (ValueError, RuntimeError, OSError) as e:
        print(f"metrics_placement: {e}", file=sys.stderr)
        return 2
    r = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "wall_s": time.time() - t0,
         "machine": machine(a.dir)} | r  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(a.out / "placement.json") as f:
        f.write(json.dumps(r, indent=2) + "\n")
    PL.plot(r, a.out / "placement.png")
    for name, p in r["placements"].items():
        for s in p["steps"]:
            print(_line(name, s))
    print(f"wrote {a.out / 'placement.json'} and {a.out / 'placement.png'}", file=sys.stderr)
    return 0


def _line(name: str, s: dict) -> str:
    """One step, as the table prints it."""

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    mbwus = f"  {x(s['mbwus'])} MBWU" if "mbwus" in s else ""
    cpu = "-" if s["cpu_us_per_op"] is None else f"{s['cpu_us_per_op']:.0f}"
    return (
        f"{name:9} {s['threads']} workers  {s['value']:9,.0f} ops/s  device {s['device_mb_s']:6.1f} MB/s  "
        f"amplification {x(s['amplification'])} (reads {x(s['read_amplification'])}, writes "
        f"{x(s['write_amplification'])})  {cpu} CPU µs/op{mbwus}"
    )


if __name__ == "__main__":
    sys.exit(main())
