"""Fig. 14 of RM-SSD (seed 002) with both sets of trace constants, side by side: RecSSD's and
RM-SSD's throughput against RecSSD's locality knob K = 0, 0.3, 1, 2, on traces made with

  fitted  b = 0.2, c = 5/6: chosen so the trace's LRU hit rates land on the seed's
          80 / 65 / 45 / 30% (they agree by construction: a fitted figure, not a reproduction);
  recssd  RecSSD's own generator's constants (its gen_dist.py: a 50-bin histogram over 1,000
          Exp(1) draws, bin 0 = a new id, K adding K times the mass to bin 0): b = 0.139, c = 1,
          lambda = 0.1497, D = 49, nothing taken from RM-SSD's figure.

Each K is one trace (`offload.recsys.traces`, kind "recssd"), run by recssd and rm-ssd in `flash`
mode (`bench.locality_sweep`, 2 warm-up batches); each point records the trace's own LRU hit rate
(an exact LRU of the host cache's size per table), the host cache's hit rate and both
throughputs. The seed's claim: RecSSD degrades as locality falls, RM-SSD keeps its throughput.

    python benches/recsys_locality.py                  # RMC1, 512M of tables, 12 x 16
    python benches/recsys_locality.py --batches 6 --size 64M

Writes OUT/locality-constants.json (both sets: `variants.fitted`, `variants.recssd`) and
OUT/fig14-locality-constants.png. About a minute for the defaults.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from offload.files import write_text
from offload.recsys import bench as B
from offload.recsys import plots as P
from offload.recsys import sweeps as S
from offload.recsys import traces as T
from offload.recsys.cli import _size

console = Console(stderr=True)
KS = (0.0, 0.3, 1.0, 2.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="rmc1", help="model (default rmc1, as the seed's Fig. 14)")
    ap.add_argument("--size", default="512M", help="tables (default 512M)")
    ap.add_argument("--dir", type=Path, default=Path("build/recsys-small"), help="model directories")
    ap.add_argument("--out", type=Path, default=Path("benches/results/recsys"), help="JSON and PNG here")
    ap.add_argument(
        "--batches", type=int, default=12, help="batches per K and strategy (default 12, 2 warm-up)"
    )
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--constants", default=",".join(T.LOCALITY_CONSTANTS), help="which sets (default both)")
    a = ap.parse_args()
    labels = a.constants.split(",")
    unknown = set(labels) - set(T.LOCALITY_CONSTANTS)
    if unknown or a.batches < 3:
        ap.error(f"--constants from {', '.join(T.LOCALITY_CONSTANTS)}; --batches >= 3")
    d = S.model_dir(a.dir, a.model, _size(a.size))
    variants = {}
    for label in labels:
        console.print(f"{a.model} locality sweep, {label} constants: {T.LOCALITY_CONSTANTS[label]}")
        opts = B.RunOptions(warmup=2)
        sw = B.locality_sweep(
            d, KS, "flash", opts, batches=a.batches, batch_size=a.batch_size, constants=label
        )
        variants[label] = sw
        for p in sw["points"]:
            lru, seed = 100 * p["trace_lru_hit_rate"], 100 * p["paper_hit_rate"]
            rec, rm = p["recssd"]["throughput_per_s"], p["rm-ssd"]["throughput_per_s"]
            console.print(
                f"  K={p['k']}: trace LRU {lru:.1f}% (seed {seed:.0f}%), "
                f"recssd {rec:,.0f}/s, rm-ssd {rm:,.0f}/s",
                highlight=False,
            )
    res = {
        "kind": "offload.recsys.locality_constants",
        "model": a.model,
        "table_bytes": d.table_bytes,
        "paper_hit_rates": {str(k): v for k, v in B.PAPER_LOCALITY_HIT_RATES.items()},
        "variants": variants,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    write_text(a.out / "locality-constants.json", json.dumps(res, indent=2))
    P.locality_constants(variants, a.out / "fig14-locality-constants.png")
    console.print(f"wrote {a.out / 'locality-constants.json'} and {a.out / 'fig14-locality-constants.png'}")


if __name__ == "__main__":
    main()
