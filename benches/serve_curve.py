"""What CURVE costs on the data path, side by side in one run: the same daemon (1w 1k 1e, TCP
loopback) with and without `--curve-data-client`, the same trace replayed closed loop by p
client processes, alternated over several rounds; medians of each, and the ratio CURVE / plain.
Two request shapes: as traced (a user request's queries) and one query per request (the
per-message cost at its most visible).

    python benches/serve_curve.py --ruletype R.xml --rules R.csv --trace build/s100k [--out J.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import _native, rules
from offload.host.machine import machine
from offload.serve import CurveKeys, daemon, inject


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_round(
    args: argparse.Namespace, keys: Path, traces: dict[str, inject.Trace], curve: bool
) -> dict[str, dict[str, Any]]:
    """Starts a daemon (CURVE on its data endpoint or not) and replays every trace shape."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    client_key = str(keys / "client.key")
    extra = ["--curve-secret-key", str(keys / "server.key_secret"), "--curve-client", client_key]
    extra += ["--curve-data-client", client_key]
    proc = daemon.start(
        *daemon.rule_flags(args.ruletype, args.rules),
        "-e",
        endpoint,
        "--workers",
        "1",
        *(extra if curve else []),
        timeout_s=300,
    )
    client = CurveKeys(keys / "server.key", keys / "client.key_secret") if curve else None
    try:
        out = {}
        for shape, trace in traces.items():
            r = inject.run(endpoint, trace, processes=args.p, duration=args.duration, curve=client)
            assert set(r["status"]) == {"Ok"}, r["status"]
            out[shape] = {k: r[k] for k in ("requests_per_s", "queries_per_s")} | {
                "p50_us": r["latency_us"]["p50"],
                "p99_us": r["latency_us"]["p99"],
            }
        return out
    finally:
        daemon.stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--trace", required=True, help="directory with queries.csv + requests.csv")
    ap.add_argument("--p", type=int, default=2, help="client processes (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per replay (default 3)")
    ap.add_argument("--out", default="build/bench/serve-curve.json")
    args = ap.parse_args()

    rs = rules.load(args.ruletype, args.rules)
    traced = inject.load_trace(Path(args.trace), rs.criterion_codes)
    traces = {"as traced": traced, "1 query per request": traced.fixed_size(1)}
    rows: dict[str, list[dict[str, dict[str, Any]]]] = {"plain": [], "curve": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("server", "client"):
            _native.curve_key_pair(tmp, name, False)
        for i in range(args.rounds):
            for mode in ("plain", "curve") if i % 2 == 0 else ("curve", "plain"):
                rows[mode].append(one_round(args, Path(tmp), traces, mode == "curve"))
                print(f"round {i + 1} {mode}: " + json.dumps(rows[mode][-1]), flush=True)

    summary: dict[str, Any] = {}
    for shape in traces:
        med = {
            mode: {k: statistics.median(r[shape][k] for r in rows[mode]) for k in rows[mode][0][shape]}
            for mode in rows
        }
        summary[shape] = med | {
            "curve_over_plain": {k: med["curve"][k] / med["plain"][k] for k in med["plain"]}
        }
    result = {
        "benchmark": "serve-curve",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {"p": args.p, "w": 1, "k": 1, "e": 1, "rounds": args.rounds, "duration_s": args.duration},
        "rows": rows,
        "median": summary,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for shape, s in summary.items():
        r = s["curve_over_plain"]
        print(
            f"{shape}: CURVE / plain = requests/s x{r['requests_per_s']:.2f}, p50 x{r['p50_us']:.2f}, "
            f"p99 x{r['p99_us']:.2f} (plain {s['plain']['requests_per_s']:,.0f} req/s, "
            f"p50 {s['plain']['p50_us']:.0f} µs)"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
