"""Fig. 15's all-DRAM baseline of RM-SSD (seed 002), measured where paging does not slow it:
`dram` (every table in process memory, the sums and the MLPs on this host) on NCF and WnD by
table size, with 4 KiB pages and with transparent huge pages, beside rm-ssd (the flash model).

Why: the seed says RM-SSD "even beats the all-DRAM version on NCF and WnD". Our 8 GiB runs had
NCF's dram swing from 5,260/s to 40,953/s between runs: random lookups into 8 GiB of 4 KiB pages
miss the TLB, and in this VM each miss is a nested (two-level) page walk. Here each table size is
loaded afresh --repeats times, each in a child process, once with malloc's ordinary 4 KiB pages
and once with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc then asks for transparent huge pages,
which THP's `madvise` mode grants); each run records its throughput, the lookup stage per lookup
apart from the MLPs, the page faults taken while it ran, and the bytes it got on huge pages
(`anon_huge_bytes`: 0 means the tunable did not take). The load average is recorded: other work
on the machine shows there.

    python benches/recsys_dram.py                              # NCF and WnD, 64M / 1G / 4G
    python benches/recsys_dram.py --models ncf --sizes 64M,8G --repeats 7

Writes OUT/dram-baseline.json and OUT/fig15-dram-baseline.png. A few minutes for the defaults
(the tables are made once under --dir; 4G needs 4 GiB free memory twice over, for the process and
the page cache it loads from).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from offload.files import write_text
from offload.recsys import bench as B
from offload.recsys import plots as P
from offload.recsys import sweeps as S
from offload.recsys.cli import _size

console = Console(stderr=True)
HUGE_ENV = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def child(model: str, size: int, root: Path, batches: int, repeats: int) -> None:
    """One table size, one page size (the parent sets the environment): the probe as JSON."""
    d = S.model_dir(root, model, size)
    load0 = os.getloadavg()[0]
    r = S.dram_probe(d, S.trace_for(d, batches, 16), repeats=repeats)
    print(json.dumps(r | {"loadavg_1min": [load0, os.getloadavg()[0]]}))


def probe(model: str, size: int, pages: str, a: argparse.Namespace) -> dict[str, Any]:
    env = os.environ | (HUGE_ENV if pages == "huge" else {})
    env.pop("GLIBC_TUNABLES", None) if pages == "4k" else None
    cmd = [sys.executable, __file__, "--child", model, str(size), "--dir", str(a.dir),
           "--batches", str(a.batches), "--repeats", str(a.repeats)]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{model} {size >> 20}M {pages}: the child failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"pages": pages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="ncf,wnd", help="comma list (default ncf,wnd)")
    ap.add_argument("--sizes", default="64M,1G,4G", help="table sizes (default 64M,1G,4G)")
    ap.add_argument("--dir", type=Path, default=Path("build/recsys-small"), help="model directories")
    ap.add_argument("--out", type=Path, default=Path("benches/results/recsys"), help="JSON and PNG here")
    ap.add_argument("--batches", type=int, default=66, help="batches of 16 per run (default 66, 2 warm-up)")
    ap.add_argument("--repeats", type=int, default=5, help="loads per size and page size (default 5)")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "BYTES"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.batches < 3 or a.repeats < 1:
        ap.error("--batches >= 3 and --repeats >= 1")
    if a.child:
        child(a.child[0], int(a.child[1]), a.dir, a.batches, a.repeats)
        return
    sizes = [_size(x) for x in a.sizes.split(",")]
    res: dict[str, Any] = {"kind": "offload.recsys.dram_baseline", "thp": S.thp_mode(), "models": {}}
    for m in a.models.split(","):
        d = S.model_dir(a.dir, m, sizes[0])
        rm, _ = B.run_strategy(d, S.trace_for(d, a.batches, 16), "rm-ssd", "flash", B.RunOptions(warmup=2))
        rm_ssd = {"throughput_per_s": rm["throughput_per_s"], "table_bytes": d.table_bytes}
        entry: dict[str, Any] = {"rm_ssd": rm_ssd, "dram": []}
        console.print(f"{m}: rm-ssd (flash model) {rm['throughput_per_s']:,.0f}/s")
        for size in sizes:
            for pages in ("4k", "huge"):
                r = probe(m, size, pages, a)
                entry["dram"].append(r)
                tps = ", ".join(f"{x['throughput_per_s']:,.0f}" for x in r["runs"])
                huge = max((x["anon_huge_bytes"] or 0) for x in r["runs"]) / 2**20
                lookup = r["lookup_ns_median"]
                console.print(
                    f"  dram {size >> 20:>5} MiB, {pages:4} pages: {tps} /s; lookup {lookup:,.0f} ns; "
                    f"{huge:,.0f} MiB on huge pages",
                    highlight=False,
                )
        entry["verdict"] = S.dram_verdict(entry)
        res["models"][m] = entry
        a.out.mkdir(parents=True, exist_ok=True)
        write_text(a.out / "dram-baseline.json", json.dumps(res, indent=2))
        console.print(f"  {entry['verdict']['text']}")
    P.dram_by_size(res, a.out / "fig15-dram-baseline.png")
    console.print(f"wrote {a.out / 'dram-baseline.json'} and {a.out / 'fig15-dram-baseline.png'}")


if __name__ == "__main__":
    main()
