"""Host-to-device throughput by query batch, from a recorded GPU probe (seed 000/001, Fig. 9).

The seed plots XRT's host-to-device DMA rate against the queries in one batch (64 B a query) and
says 65,536 queries (4 MiB) barely reach half of the PCIe speed. This machine has no GPU, so the
curve is made from the pinned host-to-device copies `offload probe` measured on the GPU machine
(benches/results/gpu/probe-gpu.json, an H200 on PCIe Gen5 x16): each payload restated as a batch
of queries at the seed's 64 B and at the 48 B our gpu matcher copies per query (16-bit codes), as a
share of the link and of the fastest point. Nothing is measured here: the figures are the probe's;
it is the copy alone (cudaMemcpy from pinned memory), not the service's staging path.

To measure it anew on a GPU machine: offload probe --quick --out benches/results/gpu/probe-gpu.json,
then this script.

Example:
  python benches/serve_h2d_curve.py --probe benches/results/gpu/probe-gpu.json \\
      --out benches/results/serve-h2d-by-batch.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from offload.files import write_text
from offload.serve import h2d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--probe", required=True, type=Path, help="an offload probe result with a GPU's channels")
    ap.add_argument("--out", required=True, type=Path, help="JSON to write (the PNG goes beside it)")
    a = ap.parse_args(argv)
    try:
        result = h2d.curve(json.loads(a.probe.read_text()))
    except (OSError, ValueError) as e:
        print(f"error: {a.probe}: {e}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(a.out, json.dumps(result, indent=1) + "\n")
    png = h2d.plot(result, a.out.with_suffix(".png"))
    at = result["at_seed_batch"]
    if at:
        print(
            f"65,536 queries of 64 B (4 MiB): {at['bandwidth_bps'] / 1e9:.1f} GB/s, "
            f"{at.get('share_of_link', 0):.0%} of {result['link']}, {at['share_of_peak']:.0%} of the fastest "
            "point (seed: about half)"
        )
    print(f"wrote {a.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
