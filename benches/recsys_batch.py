"""Figs. 12/13 of RM-SSD (seed 002) by batch size: throughput and latency of dram, ssd-s,
emb-vectorsum, recssd and rm-ssd on RMC1, RMC2 and RMC3 at batch sizes 1, 2, 4, ... 64, in
`flash` mode (the seed's Table II media, the host's work measured), beside the seed's shape:

  RMC1 and RMC2 flat (embedding-bound); RMC3 rising linearly from batch 1 to 4 (MLP-bound), then
  flat once the embedding lookups take longer than the MLP.

What runs: for each model a directory of --size tables under --dir (made once, kept), and at
each batch size one hotset trace of at least --samples recorded samples (and 3 recorded batches)
after 2 warm-up batches, every strategy over it one after the other (`offload recsys bench`'s
code; the answers are checked against dram's). rm-ssd's device MLP is one fixed design, the
kernel search's (Table V), timed at each batch as eq. 1 charges it: each MLP stage once per batch,
the flash reads per sample; the JSON has eq. 1's samples/s beside the run's.

Small tables keep a run short (RMC1-3 at 512M: about a minute each on a 2-vCPU VM). ssd-s's page
cache then holds fewer of the hot rows than at 8 GiB (its hit rate is in the JSON): compare its
shape, not its level, with the 8 GiB runs of recsys_bench.py.

    python benches/recsys_batch.py                          # RMC1-3, 512M, into benches/results/recsys
    python benches/recsys_batch.py --models rmc3 --batch-sizes 1,2,4,8 --samples 32

Writes OUT/batch-sweep.json (after each model: a stopped run keeps what it measured) and
OUT/fig12-13-batch.png; prints each model's shape.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from offload.files import write_text
from offload.recsys import plots as P
from offload.recsys import sweeps as S
from offload.recsys.cli import _size

console = Console(stderr=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="rmc1,rmc2,rmc3", help="comma list (default rmc1,rmc2,rmc3)")
    ap.add_argument("--size", default="512M", help="tables per model (default 512M)")
    ap.add_argument("--dir", type=Path, default=Path("build/recsys-small"), help="model directories")
    ap.add_argument("--out", type=Path, default=Path("benches/results/recsys"), help="JSON and PNG here")
    ap.add_argument(
        "--batch-sizes", default=",".join(map(str, S.BATCH_SIZES)), help="comma list (default 1..64)"
    )
    ap.add_argument(
        "--strategies", default=",".join(S.BATCH_STRATEGIES), help="comma list, first = reference"
    )
    ap.add_argument("--samples", type=int, default=128, help="recorded samples per batch size (default 128)")
    ap.add_argument(
        "--composition", choices=("sum", "pipelined"), default="sum", help="eq. 1b/1c (default sum)"
    )
    a = ap.parse_args()
    sizes = [int(x) for x in a.batch_sizes.split(",")]
    if min(sizes) < 1 or a.samples < 1:
        ap.error("batch sizes and --samples must be positive")
    size = _size(a.size)
    out_json = a.out / "batch-sweep.json"
    result: dict[str, Any] = {"kind": "offload.recsys.batch_sweeps", "models": {}}
    first = a.strategies.split(",")[0]
    for name in a.models.split(","):
        d = S.model_dir(a.dir, name, size)
        console.print(
            f"{name}: batch sizes {sizes}, {a.samples} samples each, {d.table_bytes / 2**20:.0f} MiB"
        )
        r = S.batch_sweep(
            d,
            sizes,
            a.strategies.split(","),
            samples=a.samples,
            composition=a.composition,
            progress=lambda s, name=name: (
                s.endswith(f" {first}") and console.print(f"  {name} {s.rsplit(' ', 1)[0]}", highlight=False)
            ),
        )
        result["models"][name] = r
        a.out.mkdir(parents=True, exist_ok=True)
        write_text(out_json, json.dumps(result, indent=2))
        for s, sh in r["shape"].items():
            tp = ", ".join(f"{t:,.0f}" for t in sh["throughput_per_s"])
            console.print(f"  {s:14} {tp} /s; best ÷ batch 1 = {sh['best_over_first']:.2f}, "
                          f"saturates at {sh['saturates_at']}", highlight=False)  # fmt: skip
        console.print(f"  seed: {r['paper_shape']}")
    P.batch_sweep(list(result["models"].values()), a.out / "fig12-13-batch.png")
    console.print(f"wrote {out_json} and {a.out / 'fig12-13-batch.png'}")


if __name__ == "__main__":
    main()
