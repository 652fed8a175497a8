"""The service's host path, before and after issue 25, side by side in one run (BENCHMARKS.md,
"The service's host path"; `offload report --host-path`).

Each configuration is a daemon (`offload-serve`, the daemon without Python) on the same rule set,
driven by the open-loop generator (`offload serve bench`'s engine) to its knee: the most
requests/s whose p99 from due time stays within the SLA. At the knee's rate one more run
measures the daemon's CPU per query by thread role (`stats` → `cpu`): the host path
(offload.serve.hostpath). "before" is the daemon built from the commit given by --before-bin
(the pipeline as it was: every request through a worker, crossbeam queues, one request per
matcher call); "after" is this checkout's. The null matcher measures the host path alone; the
emulated device (a measured H200 profile, no matching on the host) shows what the host path lets
a device deliver here.

`--set transports` runs issue 40's matrix instead: null, fast and the emulated H200, inline and
with one executor, over ipc, tcp and shared memory (shm://), all with this checkout's daemon.
`--runs N` repeats the whole set N times, interleaved (configuration by configuration within each
repeat); `runs` then holds, per configuration, the run with the median knee, and `repeats` every
run, with `medians` (knee, p99, host path, the generator's CPU against it) per configuration.

Usage: python benches/serve_hostpath.py --ruletype R --rules R --queries Q --out build/bench/hostpath.json
       [--before-bin /path/to/old/offload-serve] [--profile data/plans/whatif/gpu-h200.toml]
       [--set transports] [--runs 3] [--daemon-cpus 0 --generator-cpus 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from offload.files import write_text
from offload.serve import hostpath

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ruletype", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--queries", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--before-bin", type=Path, help="offload-serve built from the commit before (skipped if absent)"
    )
    ap.add_argument("--after-bin", type=Path, default=ROOT / "target/release/offload-serve")
    ap.add_argument("--profile", type=Path, default=ROOT / "data/plans/whatif/gpu-h200.toml")
    ap.add_argument("--request-size", type=int, default=256)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--duration", type=float, default=1.5, help="seconds per knee step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sla-p99-us", type=float, default=5000.0)
    ap.add_argument("--only", default="", help="run the configurations whose label holds this text")
    ap.add_argument("--set", choices=("before-after", "transports", "shards"), default="before-after")
    ap.add_argument("--runs", type=int, default=1, help="repeats of the whole set, interleaved")
    ap.add_argument("--daemon-cpus", default="", help="CPUs of the daemon, e.g. 0 (default: any)")
    ap.add_argument("--generator-cpus", default="", help="CPUs of the generator, e.g. 1 (default: any)")
    a = ap.parse_args()
    cpus = lambda text: frozenset(int(c) for c in text.split(",")) if text else None  # noqa: E731
    setup = hostpath.Setup(a.ruletype, a.rules, a.queries, a.profile, a.request_size, a.connections,
                           a.duration, a.steps, a.sla_p99_us, daemon_cpus=cpus(a.daemon_cpus),
                           generator_cpus=cpus(a.generator_cpus))  # fmt: skip
    binaries = {"before": a.before_bin, "after": a.after_bin}
    chosen = {
        "before-after": hostpath.CONFIGS,
        "transports": hostpath.TRANSPORT_CONFIGS,
        "shards": hostpath.SHARD_CONFIGS,
    }[a.set]
    configs = [c for c in chosen if binaries[c.build] and binaries[c.build].exists() and a.only in c.label]
    results = []
    for repeat in range(max(1, a.runs)):
        print(f"repeat {repeat + 1} of {a.runs}", flush=True)
        results.append(
            hostpath.run(
                setup, configs, lambda c: [str(binaries[c.build])], lambda line: print(line, flush=True)
            )
        )
    result = combine(results) if a.runs > 1 else results[0]
    write_text(a.out, json.dumps(result, indent=1) + "\n")
    hostpath.plot(result, a.out.with_suffix(".png"))
    print(f"wrote {a.out} and {a.out.with_suffix('.png')}")


def combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from repeats: per configuration the run with the median knee, every run in
    `repeats`, and the medians of what BENCHMARKS.md quotes."""

    def knee(run: dict[str, Any]) -> float:
        return float((run.get("knee") or {}).get("queries_per_s") or 0.0)

    def median_of(rows: list[dict[str, Any]], value: Any) -> float | None:
        got = [v for v in map(value, rows) if v is not None]
        return statistics.median(got) if got else None

    by_label: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        for run in r["runs"]:
            by_label.setdefault(run["label"], []).append(run)
    medians, chosen = {}, []
    for label, rows in by_label.items():
        ordered = sorted(rows, key=knee)
        chosen.append(ordered[len(ordered) // 2])
        ratio = lambda run: (run.get("generator_to_host_path") or {}).get("ratio")  # noqa: E731
        host = lambda run: ((run.get("daemon_cpu") or {}).get("ns_per_query") or {}).get("host_path")  # noqa: E731
        medians[label] = {
            "knee_queries_per_s": median_of(rows, knee), "knees": [knee(run) for run in rows],
            "p99_us": median_of(rows, lambda run: (run.get("knee") or {}).get("p99_us")),
            "host_path_ns_per_query": median_of(rows, host),
            "generator_to_host_path": median_of(rows, ratio),
            "generator_bound": [bool((run.get("generator") or {}).get("bound")) for run in rows],
            "at_knee_held": [run.get("at_knee_held") for run in rows],
        }  # fmt: skip
    return {**results[0], "runs": chosen, "repeats": [r["runs"] for r in results], "medians": medians}


if __name__ == "__main__":
    main()
