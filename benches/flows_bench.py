"""The particle data flow benchmark behind BENCHMARKS.md (flows), part by part:

* ``partition`` (root for the cgroup quotas; pinned threads otherwise): the partition service
  (unpack, split by id into 8 partitions, repack, compress) over about ``--gb`` GB of each data
  set, in a process held to a node budget: ``core`` (one whole core: the host at one thread)
  and ``bluefield2`` (a quarter core), without a codec and with lz4 and zstd. The seed's figures:
  the host is ~4x faster than the BlueField-2; software compression dominates the NIC's time.

    python benches/flows_bench.py --parts partition --gb 1

* ``sift``: one node that partitions (no codec) and sifts every partition into its LSM tree
  (memtables of 16,384 rows, fanout 4), over ``--sift-gb`` GB of each data set, on ``core`` and
  ``bluefield2``: the input rate through both, the write amplification, and the consumers'
  sorted read. The seed: 64 M particles at 1.32 GB/s over 100 BlueField-2 (13.2 MB/s a node).

    python benches/flows_bench.py --parts sift --sift-gb 0.25

* ``nodes``: the whole pipeline over 1, 2, 4 and 8 quarter-core nodes (``offload flows run``:
  each node a process with its own budget; producers put to them, they forward partitions
  east-west and sift them), ``--nodes-rows`` particles, no midway queries; then the pipeline
  model (``offload flows model``) fitted on 1 and 4 nodes, its error on 2 and 8, and its
  prediction for 100 nodes against the seed's 1.32 GB/s. Each count runs three times, in turn.

    python benches/flows_bench.py --parts nodes --nodes-rows 4000000
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from offload.flows import datasets as D
from offload.flows import partition as F
from offload.host.machine import describe

console = Console(stderr=True)

PROFILES = ("core", "bluefield2")
CODECS = (None, "lz4", "zstd")


def partition(gb: float, parts: int, work: Path) -> dict[str, Any]:
    """Every data set x profile x codec; rows chosen so that each data set is ``gb`` GB."""
    runs = []
    total = len(D.DATASETS) * len(PROFILES) * len(CODECS)
    with Progress(console=console) as bar:
        task = bar.add_task("partition", total=total)
        for name in D.DATASETS:
            sample = D.dataset(name).generate(10_000, 0)
            rows = int(gb * 1e9 / (sample.nbytes / sample.num_rows))
            for prof in PROFILES:
                for codec in CODECS:
                    bar.update(task, description=f"{name} on {prof}, {codec or 'no codec'}")
                    runs.append(F.partition_under(prof, name, rows, parts, codec, work))
                    bar.advance(task)
            (work / f"{name}-{rows}-0-65536.arrow").unlink(missing_ok=True)  # 1 GB each: do not keep
    ratios = {}
    for r in runs:
        if r["profile"] == "bluefield2":
            host = next(h for h in runs if h["profile"] == "core" and (h["dataset"], h["codec"]) == (
                r["dataset"], r["codec"]))  # fmt: skip
            ratios[f"{r['dataset']}/{r['codec']}"] = r["total_s"] / host["total_s"]
    return {"gb": gb, "parts": parts, "runs": runs, "bluefield2_over_core": ratios}


def sift(gb: float, parts: int, work: Path) -> dict[str, Any]:
    """Partition and sift in one node process, per data set and profile."""
    runs = []
    for name in D.DATASETS:
        sample = D.dataset(name).generate(10_000, 0)
        rows = int(gb * 1e9 / (sample.nbytes / sample.num_rows))
        for prof in PROFILES:
            console.print(f"sift: {name} on {prof}, {rows:,} rows")
            runs.append(F.partition_under(prof, name, rows, parts, None, work, sift=(16_384, 4)))
        (work / f"{name}-{rows}-0-65536.arrow").unlink(missing_ok=True)
    return {"gb": gb, "parts": parts, "memtable_rows": 16_384, "fanout": 4, "runs": runs,
            "seed_mb_per_s_per_node": 1.32e3 / 100}  # fmt: skip


def nodes(rows: int, parts: int, work: Path, cpu: float | None = None, repeats: int = 3) -> dict[str, Any]:
    """The pipeline over 1, 2, 4 and 8 bluefield2 nodes (each ``cpu`` of a core if given), each
    count ``repeats`` times (in turn, so that drifts in the machine's load spread over all
    counts), and the model fitted on 1 and 2, its errors on the medians."""
    from offload.flows import run as R

    runs = []
    for n in [n for _ in range(repeats) for n in (1, 2, 4, 8)]:
        console.print(f"nodes: {n} x bluefield2 ({R.share('bluefield2', cpu)} core each), {rows:,} particles")
        with R.start_nodes(n, "bluefield2", work, cpu_per_thread=cpu) as procs:
            r = R.run(procs.specs, "particles", rows, work, parts, queries=False)
        r.pop("sorted")
        runs.append(
            r | {"profile": "bluefield2", "cores": os.cpu_count(), "share": R.share("bluefield2", cpu)}
        )
    return {"rows": rows, "parts": parts, "runs": runs} | nodes_model(runs)


def nodes_model(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pipeline model fitted on the runs' smallest and middle node counts, its errors on
    the medians, and its prediction for the seed's 100 nodes (messages as here, and one dump per
    rank as the seed's producers put them)."""
    from offload.flows import pipeline as fm
    from offload.host import budgets as B

    prof = B.profile(runs[0]["profile"])
    share, cores = runs[0]["share"], float(runs[0]["cores"])
    model = fm.fit(runs, share, cores)
    checks = fm.validate_by_count(model, runs, cores)
    link = (prof.link.rate_mbit or 0) / 1e3 or None
    seed_gb = 64e6 * runs[0]["bytes_in"] / runs[0]["rows"] / 1e9  # the seed's 64M particles
    per_msg = runs[0]["bytes_in"] / fm.messages(runs[0])
    predictions = {  # messages as here, and one dump per rank (100 ranks) as the seed's producers put them
        f"{per_msg / 1e6:.2g} MB messages": model.predict(
            100, seed_gb, round(seed_gb * 1e9 / per_msg), None, link
        ),
        "one 41 MB dump per rank": model.predict(100, seed_gb, 100, None, link),
    }
    return {"model": model.as_dict(), "validation": checks,
            "max_abs_error_held_out": max(abs(c["error"]) for c in checks if not c["fitted_on"]),
            "predict_100": predictions, "seed_gb_per_s_100": 1.32}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="partition", help="partition (default), sift, nodes")
    ap.add_argument("--gb", type=float, default=1.0, help="GB of each data set (default 1)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions by id (default 8)")
    ap.add_argument("--sift-gb", type=float, default=0.25, help="GB of each data set to sift (default 0.25)")
    ap.add_argument("--nodes-rows", type=int, default=4_000_000, help="particles over the nodes (default 4M)")
    ap.add_argument(
        "--nodes-cpu", type=float, default=None, help="each node's share of a core (default 0.25)"
    )
    ap.add_argument("--nodes-repeats", type=int, default=3, help="runs of each node count (default 3)")
    ap.add_argument("--refit", type=Path, default=None, help="a nodes JSON: refit its model only, no runs")
    ap.add_argument("--work", type=Path, default=Path("build/flows"))
    ap.add_argument("--out", type=Path, default=Path("benches/results/flows"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    stamp = {"date": time.strftime("%Y-%m-%d"), "machine": describe()}
    if a.refit is not None:  # the model changed, the runs did not
        doc = json.loads(a.refit.read_text())
        a.refit.write_text(json.dumps(doc | nodes_model(doc["runs"]), indent=2))
        return
    if "partition" in a.parts.split(","):
        r = partition(a.gb, a.partitions, a.work) | stamp
        (a.out / "partition.json").write_text(json.dumps(r, indent=2))
        F.plot_partition(r["runs"], a.out / "partition.png")
        for key, ratio in r["bluefield2_over_core"].items():
            console.print(f"{key}: bluefield2 takes {ratio:.2f}x the one-core host's time")
    if "sift" in a.parts.split(","):
        r = sift(a.sift_gb, a.partitions, a.work) | stamp
        (a.out / "sift.json").write_text(json.dumps(r, indent=2))
        for x in r["runs"]:
            rate, amp = 1e3 * x["sift_gb_per_s"], x["write_amplification"]
            console.print(f"{x['dataset']} on {x['profile']}: {rate:.1f} MB/s partitioned and sifted, "
                          f"write amplification {amp:.2f}")  # fmt: skip
    if "nodes" in a.parts.split(","):
        from offload.flows import run as R

        r = nodes(a.nodes_rows, a.partitions, a.work, a.nodes_cpu, a.nodes_repeats) | stamp
        name = "nodes" if a.nodes_cpu is None else f"nodes-cpu{a.nodes_cpu:g}"
        (a.out / f"{name}.json").write_text(json.dumps(r, indent=2))
        R.plot_nodes(r["runs"][-4:], a.out / f"{name}.png")  # the last repeat of each count
        for c in r["validation"]:
            console.print(f"{c['nodes']} nodes: {1e3 * c['measured_gb_per_s']:.1f} MB/s measured (median), "
                          f"{1e3 * c['predicted_gb_per_s']:.1f} model ({c['error']:+.1%}, "
                          f"{'fit' if c['fitted_on'] else 'validation'})")  # fmt: skip
        for k, p in r["predict_100"].items():
            console.print(f"100 nodes, {k}: {p['gb_per_s']:.2f} GB/s ({p['bound']}-bound); seed 1.32 GB/s")


if __name__ == "__main__":
    main()
