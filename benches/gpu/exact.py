"""The gpu matcher's answers on a real rule set, checked on the device: every query of a trace
against `linear` (the semantics) and `fast`, and the trace repeated past several chunks against
`fast`. Writes JSON; exits 1 on any difference, 2 without a GPU.

Usage: python benches/gpu/exact.py RULETYPE RULES QUERIES OUT.json [--repeat-to N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from offload import rules
from offload.rules.bench import load_query_columns


def _diff(a: np.ndarray, b: np.ndarray) -> dict[str, object]:
    bad = np.flatnonzero(a != b)
    return {"queries": len(a), "mismatches": len(bad), "first": [int(i) for i in bad[:5]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ruletype", type=Path)
    ap.add_argument("rules", type=Path)
    ap.add_argument("queries", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--repeat-to", type=int, default=3 << 20, help="queries in the repeated check (default 3 Mi)"
    )
    a = ap.parse_args()
    try:
        device = rules.gpu_device()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    rs = rules.load(a.ruletype, a.rules)
    _, cols = load_query_columns(rs, a.queries)
    threads = os.cpu_count() or 1
    engines = {m: rules.compile(rs, m) for m in ("linear", "fast", "gpu")}
    answers, seconds = {}, {}
    for m, eng in engines.items():
        t0 = time.perf_counter()
        answers[m] = np.asarray(eng.match(cols, threads=threads).rule)
        seconds[m] = time.perf_counter() - t0
    fast, gpu = engines["fast"], engines["gpu"]
    codes = fast.encode(cols)
    many = np.ascontiguousarray(np.tile(codes, (-(-a.repeat_to // len(codes)), 1)))
    res = {
        "device": device,
        "rules": len(rs),
        "threads": threads,
        "seconds": seconds,
        "matched": int(np.count_nonzero(answers["linear"] >= 0)),
        "gpu_vs_linear": _diff(answers["gpu"], answers["linear"]),
        "fast_vs_linear": _diff(answers["fast"], answers["linear"]),
        "gpu_vs_fast_repeated": _diff(
            np.asarray(gpu.match(many).rule), np.asarray(fast.match(many, threads=threads).rule)
        ),
    }
    a.out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    ok = all(res[k]["mismatches"] == 0 for k in ("gpu_vs_linear", "fast_vs_linear", "gpu_vs_fast_repeated"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
