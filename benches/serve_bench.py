"""Service benchmarks, side by side in one run (issue 3's numbers):

1. single-query round trip over IPC through `offload serve` vs a bare ZeroMQ echo (Rust ROUTER,
   same Python DEALER client), medians;
2. hot reload of the whole rule set under load: every reply checked against the version that
   answered, and the worst round trip during the reload vs the steady state.

    python benches/serve_bench.py --ruletype R.xml --rules R.csv --queries Q.csv [--out J.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from offload import _native, rules
from offload.rules.bench import load_query_columns, machine
from offload.serve import Client, daemon
from offload.serve.cli import control_request


def bare_round_trip_us(endpoint: str, n: int, payload: bytes) -> list[float]:
    t = threading.Thread(target=_native.zmq_echo, args=(endpoint, 30.0), daemon=True)
    t.start()
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    s.send(payload)  # warm-up (and wait for the bind)
    s.poll(10_000)
    s.recv()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        s.send(payload)
        s.recv()
        out.append((time.perf_counter() - t0) * 1e6)
    s.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--round-trips", type=int, default=2_000)
    ap.add_argument("--request-size", type=int, default=100, help="queries per request under reload")
    ap.add_argument("--out", default="build/bench/serve.json")
    a = ap.parse_args(argv)

    rs = rules.load(a.ruletype, a.rules)
    _, cols = load_query_columns(rs, Path(a.queries), limit=10_000)
    tmp = tempfile.mkdtemp(prefix="offload-bench-")
    endpoint, control = f"ipc://{tmp}/serve.sock", f"ipc://{tmp}/control.sock"
    proc = daemon.start(
        *daemon.rule_flags(a.ruletype, a.rules), "-e", endpoint, "--control", control, "--workers", "1"
    )
    result: dict[str, Any] = {
        "benchmark": "serve",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rules": len(rs),
    }
    try:
        with Client(endpoint, criteria=rs.criterion_codes, timeout_s=60) as c:
            one = [[col[0]] for col in cols]
            _, frame = c.request_frame(one)
            c.match(one)  # warm-up
            service = []
            for _ in range(a.round_trips):
                service.append(c.match(one).round_trip_s * 1e6)
        bare = bare_round_trip_us(f"ipc://{tmp}/echo.sock", a.round_trips, frame)
        result["round_trip_us"] = {
            "service_single_query_median": statistics.median(service),
            "bare_zmq_echo_median": statistics.median(bare),
            "ratio": statistics.median(service) / statistics.median(bare),
            "frame_bytes": len(frame),
        }
        rt = result["round_trip_us"]
        print(
            f"single-query round trip over IPC: service {rt['service_single_query_median']:.1f} us, "
            f"bare ZeroMQ {rt['bare_zmq_echo_median']:.1f} us, ratio {rt['ratio']:.2f}"
        )

        # Hot reload under load: the same files again as version 2 (a full load + compile).
        q = [col[: a.request_size] for col in cols]
        expected = rules.compile(rs).match(q).rule
        samples: list[tuple[float, float, int, bool, str]] = []  # (t, rtt_us, version, right, status)
        stop = threading.Event()

        def load() -> None:
            with Client(endpoint, timeout_s=60) as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    r = c.match(q)
                    right = bool(np.array_equal(r.rule, expected))
                    samples.append((t0, r.round_trip_s * 1e6, r.version, right, r.status))

        th = threading.Thread(target=load)
        th.start()
        time.sleep(2.0)
        t_reload = time.perf_counter()
        answer = control_request(control, f"reload\n{a.ruletype}\n{a.rules}", 300)
        t_done = time.perf_counter()
        time.sleep(2.0)
        stop.set()
        th.join(timeout=60)
        before = [s[1] for s in samples if s[0] < t_reload]
        during = [s[1] for s in samples if t_reload <= s[0] <= t_done]
        result["reload"] = {
            "answer": answer,
            "requests": len(samples),
            "failed": sum(1 for s in samples if s[4] != "Ok"),
            "wrong": sum(1 for s in samples if not s[3]),
            "versions": sorted({s[2] for s in samples}),
            "reload_wall_s": t_done - t_reload,
            "steady_median_us": statistics.median(before),
            "steady_max_us": max(before),
            "during_reload_median_us": statistics.median(during) if during else None,
            "during_reload_max_us": max(during) if during else None,
            "worst_added_latency_us": (max(during) - statistics.median(before)) if during else None,
        }
        print(json.dumps(result["reload"], indent=2))
    finally:
        daemon.stop(proc)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")
    ok = result["reload"]["failed"] == 0 and result["reload"]["wrong"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
