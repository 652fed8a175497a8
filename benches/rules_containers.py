"""What a query column's container costs `CompiledRules.encode`: one criterion given as a list of
str, a NumPy U array, a list of bytes, a NumPy S array or an Arrow binary column (bytes are text
in UTF-8: docs/rules.md, "Missing values"), the other criteria as lists of str. Alternated
rounds, medians; writes JSON.

Usage: python benches/rules_containers.py OUT.json [--queries N] [--rounds R] [--criterion APT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from offload import rules
from offload.host.machine import machine
from offload.rules.bench import load_query_columns

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "examples" / "mct-mini"


def containers(text: list[str]) -> dict[str, Any]:
    raw = [v.encode() for v in text]
    return {
        "str list": text,
        "numpy U": np.array(text, dtype="U"),
        "bytes list": raw,
        "numpy S": np.array(raw, dtype="S"),
        "arrow binary": pa.array(raw, type=pa.binary()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--queries", type=int, default=1_000_000, help="queries encoded (default 1000000)")
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds (default 5)")
    ap.add_argument("--criterion", default="APT", help="the criterion given in each container (default APT)")
    a = ap.parse_args()
    rs = rules.load(EXAMPLE / "ruletype.toml", EXAMPLE / "rules.csv")
    _, cols = load_query_columns(rs, EXAMPLE / "queries.csv")
    engine = rules.compile(rs, "fast")
    base = [list(np.resize(np.array(c, dtype=object), a.queries)) for c in cols]
    which = list(rs.criterion_codes).index(a.criterion)
    variants = containers(base[which])
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(a.rounds):
        for name, column in variants.items():
            queries = [column if i == which else c for i, c in enumerate(base)]
            t0 = time.perf_counter()
            engine.encode(queries)
            times[name].append(time.perf_counter() - t0)
    median = {name: statistics.median(t) for name, t in times.items()}
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=EXAMPLE
    ).stdout.strip()
    res = {
        "command": " ".join(["python", *sys.argv]),
        "commit": commit or None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "queries": a.queries,
        "rounds": a.rounds,
        "criterion": a.criterion,
        "encode_s": median,
        "ns_per_query": {name: 1e9 * s / a.queries for name, s in median.items()},
        "over_str_list": {name: s / median["str list"] for name, s in median.items()},
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res.items() if k not in ("machine", "command")}, indent=2))


if __name__ == "__main__":
    main()
