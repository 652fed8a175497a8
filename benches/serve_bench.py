"""Service benchmarks, side by side in one run (issue 3's numbers):

1. single-query round trip over IPC through `offload serve` vs a bare ZeroMQ echo (Rust ROUTER,
   same Python DEALER client), medians;
2. hot reload of the whole rule set under load: every reply checked against the version that
   answered, and the worst round trip during the reload vs the steady state;
3. throughput on the same cores: requests of N pre-encoded queries through the daemon (1w 1k
   1e, pinned to CPU 0; the client processes pinned to the other CPUs) vs the in-process matcher
   on the same CPU 0 over the same batches, alternated over several rounds, medians.

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
from offload.host.machine import machine
from offload.rules.bench import load_query_columns
from offload.serve import Client, daemon, inject
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


def in_process_queries_per_s(eng: rules.CompiledRules, codes: np.ndarray, size: int) -> float:
    """The in-process matcher over the same requests the service gets, one thread, on CPU 0."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        t0 = time.perf_counter()
        for lo in range(0, len(codes), size):
            eng.match(codes[lo : lo + size], threads=1)
        return len(codes) / (time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, before)


def same_cores_throughput(a: argparse.Namespace, rs: rules.RuleSet, tmp: str) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or 0 not in cpus:
        return {"skipped": "needs CPU 0 and one more CPU for the clients"}
    _, cols = load_query_columns(rs, Path(a.queries), limit=a.throughput_queries)
    eng = rules.compile(rs)
    codes = eng.encode(cols)
    trace = inject.Trace(cols, [], criteria=list(rs.criterion_codes))
    trace = trace.fixed_size(a.throughput_size).encoded(codes)
    endpoint = f"ipc://{tmp}/throughput.sock"
    clients = [c for c in cpus if c != 0]
    flags = ["-e", endpoint, "--workers", "1", "--kernels", "1", "--engine-threads", "1", "--queue", "256"]
    proc = daemon.start(*daemon.rule_flags(a.ruletype, a.rules), *flags, cpus={0})
    local, service, statuses = [], [], []
    try:
        for r in range(a.rounds):
            local.append(in_process_queries_per_s(eng, codes, a.throughput_size))
            run = inject.run(endpoint, trace, a.throughput_clients, mode="closed", duration=3.0, cpus=clients)
            service.append(run["queries_per_s"])
            statuses.append(run["status"])
            print(f"round {r + 1}: in-process {local[-1] / 1e6:.2f}, service {service[-1] / 1e6:.2f} M q/s")
    finally:
        daemon.stop(proc)
    out = {
        "request_queries": a.throughput_size,
        "queries": len(codes),
        "service_config": f"{a.throughput_clients}p 1w 1k 1e, daemon on CPU 0, clients on CPUs "
        + ",".join(map(str, clients)),
        "in_process_queries_per_s": local,
        "service_queries_per_s": service,
        "statuses": statuses,
        "in_process_median": statistics.median(local),
        "service_median": statistics.median(service),
        "ratio": statistics.median(service) / statistics.median(local),
    }
    svc, loc = out["service_median"] / 1e6, out["in_process_median"] / 1e6
    print(f"same cores ({a.throughput_size}-query pre-encoded requests): service {svc:.2f} M q/s")
    print(f"vs in-process {loc:.2f} M q/s = {100 * out['ratio']:.0f}%")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--round-trips", type=int, default=2_000)
    ap.add_argument("--request-size", type=int, default=100, help="queries per request under reload")
    ap.add_argument("--throughput-size", type=int, default=4096, help="queries per throughput request")
    ap.add_argument("--throughput-queries", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--throughput-clients", type=int, default=4, help="client processes (enough to keep 1k busy)"
    )
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
            with Client(endpoint, criteria=rs.criterion_codes, timeout_s=60) as c:
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
    result["same_cores_throughput"] = same_cores_throughput(a, rs, tmp)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")
    ok = result["reload"]["failed"] == 0 and result["reload"]["wrong"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
