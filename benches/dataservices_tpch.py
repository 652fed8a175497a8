"""TPC-H through a node, as a new user would (issue 45, item 6; BENCHMARKS.md, "TPC-H through a
node").

tpchgen-cli writes the eight tables as Parquet (strings as Arrow ``string_view``, which a node
loads as ``string``); a node on loopback in this process registers them from its data
directory; the 22 queries (``benches/tpch``: the TPC-H specification's text with its validation
parameters, q15's view written as a CTE) run on it offload, pushback and auto, each against
DuckDB on the same files. Before each runs, the node's ``explain`` gives its estimate of the
result, set beside the result's true rows.

Equal means the same rows in any order, numbers compared as float64 within 1e-9 relative or
1e-6 absolute: DataFusion's ``avg`` of a decimal keeps 6 places (q1's averages differ from
DuckDB's in the 6th), which the report states beside each query as its largest difference.

    make bench-tools                                     # duckdb and tpchgen-cli, into the venv
    python benches/dataservices_tpch.py --scale 0.1      # ~2 min on a 2-vCPU VM; --scale 1: ~15
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

console = Console(stderr=True)
TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
QUERIES = Path(__file__).parent / "tpch"
WAYS = ("offload", "pushback", "auto")
TOKEN = "tpch"
REL, ABS = 1e-9, 1e-6
"""Numbers equal within REL relative or ABS absolute (DataFusion's decimal avg: 6 places)."""
ESTIMATE_WITHIN = 10.0
"""The issue's bound on a result size's estimate: within 10x of the truth."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor [default: 0.1]")
    ap.add_argument(
        "--dir", type=Path, default=Path("build/tpch"), help="where the data goes [default: build/tpch]"
    )
    ap.add_argument("--queries", default="1-22", help="which queries, e.g. 1-22 or 9,20 [default: 1-22]")
    ap.add_argument("--out", type=Path, help="the JSON [default: benches/results/dataservices-tpch/sfS.json]")
    a = ap.parse_args()
    if _tpchgen() is None:
        sys.exit("error: tpchgen-cli is not installed: run `make bench-tools`")
    try:
        import duckdb  # noqa: F401
    except ImportError:
        sys.exit("error: duckdb is not installed: run `make bench-tools`")
    data = generate(a.dir / f"sf{a.scale:g}", a.scale)
    numbers = _numbers(a.queries)
    t0 = time.monotonic()
    rows = run(data, numbers)
    out = a.out or Path(f"benches/results/dataservices-tpch/sf{a.scale:g}.json")
    result = _provenance(a) | {"scale": a.scale, "seconds": round(time.monotonic() - t0), "queries": rows}
    result["summary"] = summarize(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    report(rows, result["summary"])
    console.print(f"wrote {out} ({result['seconds']} s)")


def generate(where: Path, scale: float) -> Path:
    """The eight tables at ``scale`` as Parquet in ``where`` (made once)."""
    if all((where / f"{t}.parquet").exists() for t in TABLES):
        return where
    where.mkdir(parents=True, exist_ok=True)
    console.print(f"tpchgen-cli: scale {scale:g} into {where}")
    subprocess.run([str(_tpchgen()), "parquet", "-s", f"{scale:g}", "--output-dir", str(where)], check=True)
    return where


def run(data: Path, numbers: list[int]) -> list[dict[str, Any]]:
    """Each query's rows, both ways and auto, against DuckDB, and the node's estimate."""
    import duckdb

    from offload.dataservices.client import NodeClient
    from offload.dataservices.node import Node, NodeConfig

    duck = duckdb.connect()
    for t in TABLES:
        duck.execute(f"create view {t} as select * from read_parquet('{data / t}.parquet')")
    node = Node(NodeConfig(TOKEN, data_dir=data, name="tpch"))
    out = []
    try:
        with NodeClient(f"127.0.0.1:{node.port}", TOKEN, timeout_s=600) as client:
            for t in TABLES:
                client.register(t, f"{t}.parquet")
            for n in numbers:
                sql = (QUERIES / f"q{n:02d}.sql").read_text()
                out.append(one(n, sql, client, duck))
                console.print(_line(out[-1]))
    finally:
        node.shutdown()
    return out


def one(n: int, sql: str, client: Any, duck: Any) -> dict[str, Any]:
    """Query ``n`` three ways against DuckDB, and its estimate."""
    row: dict[str, Any] = {"query": f"q{n}"}
    t = time.perf_counter()
    truth = duck.sql(sql).fetch_arrow_table()
    row["duckdb_s"], row["rows"] = time.perf_counter() - t, truth.num_rows
    try:
        explained = client.explain(sql)
        row["estimated_rows"] = explained["estimate"]["rows"] if explained.get("estimate") else None
        row["auto_would"] = explained.get("way")
    except Exception as e:  # the node's error, said in the report
        row["estimate_error"] = str(e).splitlines()[0]
    row["estimate_ratio"] = _ratio(row.get("estimated_rows"), truth.num_rows)
    for way in WAYS:
        t = time.perf_counter()
        try:
            got, timing = client.query(sql, way)
        except Exception as e:
            row[way] = {"equal": False, "error": str(e).splitlines()[0]}
            continue
        row[way] = {"seconds": time.perf_counter() - t, "rows": got.num_rows} | difference(got, truth)
        if way == "auto":
            row[way]["chose"] = timing.way
    return row


def difference(got: pa.Table, want: pa.Table) -> dict[str, Any]:
    """Whether ``got`` holds ``want``'s rows in any order (columns by position, numbers as
    float64 within REL or ABS), and the largest difference between numbers."""
    if got.num_columns != want.num_columns or got.num_rows != want.num_rows:
        return {
            "equal": False,
            "why": f"shape {got.num_rows}x{got.num_columns}, want {want.num_rows}x{want.num_columns}",
        }
    a, b = _sorted_rows(got), _sorted_rows(want)
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                d = abs(x - y) if not (math.isnan(x) and math.isnan(y)) else 0.0
                if d > max(REL * abs(y), ABS):
                    return {"equal": False, "why": f"{x!r} against {y!r}", "largest_difference": d}
                worst = max(worst, d)
            elif x != y:
                return {"equal": False, "why": f"{x!r} against {y!r}"}
    return {"equal": True, "largest_difference": worst}


def _sorted_rows(t: pa.Table) -> list[tuple[Any, ...]]:
    cols = []
    for c in t.columns:
        numeric = pa.types.is_integer(c.type) or pa.types.is_floating(c.type) or pa.types.is_decimal(c.type)
        cols.append(pc.cast(c, pa.float64()).to_pylist() if numeric else [_plain(v) for v in c.to_pylist()])
    rows = list(zip(*cols, strict=True)) if cols else []
    return sorted(
        rows, key=lambda r: tuple((v is None, str(v) if not isinstance(v, float) else f"{v:.6g}") for v in r)
    )


def _plain(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _ratio(estimated: float | None, true: int) -> float | None:
    """How far the estimate is from the truth, either way (both floored at 1 row)."""
    if estimated is None:
        return None
    e, t = max(float(estimated), 1.0), max(float(true), 1.0)
    return max(e / t, t / e)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    equal = [r["query"] for r in rows if all(r.get(w, {}).get("equal") for w in WAYS)]
    within = [
        r["query"] for r in rows if r["estimate_ratio"] is not None and r["estimate_ratio"] <= ESTIMATE_WITHIN
    ]
    return {
        "queries": len(rows),
        "equal_all_three_ways": len(equal),
        "not_equal": [r["query"] for r in rows if r["query"] not in equal],
        "estimate_within_10x": len(within),
        "estimate_off": {r["query"]: r["estimate_ratio"] for r in rows if r["query"] not in within},
    }


def report(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    t = Table(title="TPC-H through a node, against DuckDB")
    for c in ("query", "rows", "estimated", "off by", "offload", "pushback", "auto", "largest difference"):
        t.add_column(c, justify="right")
    for r in rows:
        cells = [_cell(r.get(w, {})) for w in WAYS]
        est = r.get("estimated_rows")
        worst = max((r.get(w, {}).get("largest_difference") or 0.0 for w in WAYS), default=0.0)
        off = (
            f"{r['estimate_ratio']:.1f}x"
            if r["estimate_ratio"] is not None
            else r.get("estimate_error", "-")[:30]
        )
        t.add_row(
            r["query"], f"{r['rows']:,}", "-" if est is None else f"{est:,.0f}", off, *cells, f"{worst:.1e}"
        )
    console.print(t)
    console.print(
        f"equal all three ways: {summary['equal_all_three_ways']} of {summary['queries']}; "
        f"estimate within 10x: {summary['estimate_within_10x']} of {summary['queries']}"
    )


def _cell(w: dict[str, Any]) -> str:
    if w.get("equal"):
        return f"= {w['seconds']:.2f} s" + (f" ({w['chose']})" if "chose" in w else "")
    return ("error: " + w.get("error", w.get("why", "?")))[:40]


def _line(r: dict[str, Any]) -> str:
    ways = " ".join(f"{w}={'=' if r.get(w, {}).get('equal') else 'x'}" for w in WAYS)
    off = r["estimate_ratio"]
    return (
        f"{r['query']}: {r['rows']:,} rows, {ways}, estimate off {off:.1f}x"
        if off
        else f"{r['query']}: {ways}"
    )


def _numbers(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    if not out or min(out) < 1 or max(out) > 22:
        sys.exit(f"error: --queries {spec!r}: give numbers 1-22, e.g. 1-22 or 9,20")
    return out


def _provenance(a: argparse.Namespace) -> dict[str, Any]:
    from offload.host.machine import describe

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {"benchmark": "dataservices_tpch", "command": " ".join(sys.argv), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe()}  # fmt: skip


def _tpchgen() -> str | None:
    """tpchgen-cli on the PATH, or beside this interpreter (`make bench-tools` installs it into
    the venv, whose bin need not be on the PATH)."""
    return shutil.which("tpchgen-cli") or shutil.which("tpchgen-cli", path=str(Path(sys.executable).parent))


if __name__ == "__main__":
    main()
