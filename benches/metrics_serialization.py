"""(De)serialization against memcpy by object size, seed 003's slide 39, on this host.

The seed measured on a BlueField-2 that deserializing and serializing an Apache Arrow object costs
about as much as copying its bytes, even for objects under 10 MiB (131,072 rows, 9 MiB). This
measures the same comparison on this machine's CPU, for particle tables of 1,024 to 2 M rows
(64 KiB to 128 MiB of Arrow IPC), with pickle beside Arrow:

* memcpy: the IPC bytes copied into a buffer allocated once;
* arrow: the IPC stream read back into a table (zero-copy) and the table written to a new stream
  (which grows as it is written); arrow_sized: written into a buffer of its size, allocated once;
* pickle: pickle.loads and pickle.dumps of the same table.

Each figure is a median over repeats lasting --min-seconds (at least 3). Beside it, arithmetic
for slide 66 (the transfer is 81% of a producer's injection): the share a transfer over 10 or
100 Gbit/s would take of packing and sending each object, with the packing measured here. Writes
benches/results/metrics/serialization.{json,png}. The seed's own figure needs a BlueField-2 (its
A72 cores and memory system); this shows the shape on this host.

    python benches/metrics_serialization.py                      # about a minute
    python benches/metrics_serialization.py --rows 1024,131072 --min-seconds 0.05 --out /tmp/s
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from offload.files import atomic_write
from offload.host.machine import machine
from offload.metrics import serialization as S

OUT = Path(__file__).resolve().parent / "results" / "metrics"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument(
        "--rows",
        default=",".join(str(n) for n in S.DEFAULT_ROWS),
        help="particle rows per object, comma-separated (64 B a row)",
    )
    ap.add_argument("--min-seconds", type=float, default=0.2, help="repeat each operation at least this long")
    ap.add_argument("--out", type=Path, default=OUT, help="directory for serialization.json and .png")
    a = ap.parse_args(argv)
    try:
        rows = [int(x) for x in a.rows.split(",")]
        t0 = time.time()
        r = S.sweep(rows, a.min_seconds, lambda s: print(f"serialization: {s}", file=sys.stderr))
    except ValueError as e:
        print(f"metrics_serialization: {e}", file=sys.stderr)
        return 2
    r = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "machine": machine(a.out.parent)} | r
    a.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(a.out / "serialization.json") as f:
        f.write(json.dumps(r, indent=2) + "\n")
    S.plot(r, a.out / "serialization.png")
    for x in r["sizes"]:
        ratios = "  ".join(f"{f} {x[f'{f}_over_memcpy']:6.2f}x" for f in S.FORMATS)
        print(f"{x['bytes'] / 2**20:9.3f} MiB  memcpy {x['memcpy_s'] * 1e3:8.3f} ms  {ratios}")
    for x in r["injection"]:
        if x["rows"] == S.SEED_ROWS:
            shares = ", ".join(f"{f} {v:.0%}" for f, v in x["transfer_share"].items())
            print(f"injection at {S.SEED_ROWS:,} rows over {x['link_gbit']:g} Gbit/s: transfer {shares} "
                  f"(arithmetic; the seed measured {S.SEED_INJECTION_SHARE:.0%})")  # fmt: skip
    print(f"wrote {a.out / 'serialization.json'} and {a.out / 'serialization.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
