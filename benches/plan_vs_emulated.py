"""The planner's model of one device shared by k executors, checked against the emulated device.

For k = 1, 2, 4 kernel executors and k = 0 (inline), it starts `offload serve --matcher emulated`
on the demo's rule set (100k rules), drives it open-loop with `offload serve bench --encoded`
(256 queries per request) at fixed rates, then predicts each run with `offload plan simulate`'s
model of the same configuration (the same device profile, open loop at the same rate, evenly
spaced arrivals, `--encoded`) and prints the error of each prediction: throughput, p50 and p99.
Two series:

- `h200`: the H200 profile (data/plans/whatif/gpu-h200.toml), self-filling batches of up to
  4,096 queries (`--batch-timeout-us 0`). A batch of 256 queries holds the device 104 µs, so on
  this 2-vCPU machine the host path, not the device, is the bound.
- `slow`: the same profile with a 1 ms kernel floor, one request per batch
  (`--batch-max-queries 0`): the device binds at 1,000 batches/s, and k executors on the one
  device cannot pass it (the model before issue 25 gave each executor a device: k × 1,000).
  Then self-filling at 3,000/s, where the batches must grow for the device to keep up. Each
  row also gives the throughput error of the model before issue 25 (`k dev.`: a device per executor).

The model's host side is measured, not predicted: each run's own CPU per request by part (the
daemon's `stats` → `cpu`: broker, executor, ZeroMQ's I/O thread; the load generator's process
CPU; the emulated device's own thread, which looks the answers up while the executor sleeps to
the due instant), shared on this
machine's cores. The CPU other processes took during each run (/proc/stat less this script and
the daemon) is shown (`others`, cores) but not taken off: they yield what they use to the
scheduler's fair share, and subtracting it predicted saturation where there was none. On a
machine others are working on, a run with `others` near 1 or more is noise, not a check. The
client ↔ daemon hop is half the probe profile's ZeroMQ ipc round trip. Nothing here is fitted.

    .venv/bin/python benches/plan_vs_emulated.py --out benches/results/plan-vs-emulated.json

Takes about 2 minutes on the 2-vCPU VM (8 daemons, 32 runs of 2 s + 1 s drain, 64 simulations).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import rules as rules_api
from offload.plan import simulate as sim
from offload.rules.bench import load_query_columns
from offload.serve import bench, daemon
from offload.serve.cli import control_request

ROOT = Path(__file__).resolve().parents[1]
REQUEST_SIZE = 256
H200 = ROOT / "data" / "plans" / "whatif" / "gpu-h200.toml"


@dataclass(frozen=True)
class Series:
    name: str
    kernel_fixed_s: float | None  # None: the profile's
    runs: tuple[tuple[int, float], ...]  # (batch_max_queries, requests/s)


SERIES = (
    Series("h200", None, ((4096, 2000), (4096, 4000), (4096, 6000))),
    Series("slow", 1e-3, ((0, 600), (0, 900), (0, 1400), (0, 2500), (4096, 3000))),
)


def args() -> argparse.Namespace:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument(
        "--demo", type=Path, default=ROOT / "build" / "demo", help="ruletype.xml, rules.csv, queries.csv"
    )
    a.add_argument(
        "--probe", type=Path, default=None, help="probe profile (default: the demo's, else the results')"
    )
    a.add_argument("--ks", default="1,2,4,0", help="kernel executors (0 = inline)")
    a.add_argument("--series", default="h200,slow")
    a.add_argument("--duration", type=float, default=2.0)
    a.add_argument("--out", type=Path, default=None)
    a.add_argument(
        "--arrivals", default="fixed", help="the model's: fixed (the generator's schedule) or poisson"
    )
    a.add_argument(
        "--predict-from", type=Path, default=None, help="a result of this script: predict its runs again"
    )
    return a.parse_args()


def probe_channel(path: Path | None) -> tuple[float, float | None, str]:
    """One way of the client ↔ daemon hop: half the probe's fitted ZeroMQ ipc round trip."""
    for p in (path, ROOT / "build/demo/probe-quick.json", ROOT / "benches/results/probe-full.json"):
        if p and p.exists():
            fit = json.loads(p.read_text())["channels"]["zmq/ipc-round-trip"]["fit"]
            return float(fit["latency_s"]) / 2, fit.get("bandwidth_bps"), str(p)
    raise SystemExit("no probe profile: give --probe (offload probe)")


def profile_file(series: Series, tmp: Path) -> Path:
    """The series' device profile: the H200's, or a copy with its kernel floor replaced."""
    if series.kernel_fixed_s is None:
        return H200
    about, costs = sim.load_preset(str(H200))
    costs["kernel_fixed_s"] = series.kernel_fixed_s
    lines = [
        "[about]",
        f'name = "{about["name"]}, kernel floor {series.kernel_fixed_s * 1e3:g} ms"',
        "",
        "[costs]",
    ]
    lines += [f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in costs.items()]
    path = tmp / f"{series.name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def busy_cores_s() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat: all but idle and iowait)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def thread_cpu_ns(pid: int, name: str) -> int:
    """CPU ns of the child's threads called `name` (their /proc schedstat); 0 if none."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == name:
                total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue
    return total


class Frames:
    """The encoded request frames, built once from the first daemon's dictionary."""

    def __init__(self, demo: Path) -> None:
        self.demo, self.frames = demo, list[bytes]()

    def get(self, ep: str) -> list[bytes]:
        if not self.frames:
            rs = rules_api.load(self.demo / "ruletype.xml", self.demo / "rules.csv")
            limit = bench.MAX_FRAMES * REQUEST_SIZE
            _, cols = load_query_columns(rs, self.demo / "queries.csv", limit=limit)
            self.frames, _ = bench.encoded_frames(ep, cols, list(rs.criterion_codes), REQUEST_SIZE)
        return self.frames


def measure(a: argparse.Namespace, series: Series, k: int, profile: Path, frames: Frames) -> dict[str, Any]:
    """One daemon with k executors; each of the series' runs against it (batching set between
    runs with `set`), after a warm-up; the stats and CPU clocks around each run."""
    d = a.demo
    tmp = Path(tempfile.mkdtemp(prefix="pve-"))
    ep, ctl = f"ipc://{tmp}/d.sock", f"ipc://{tmp}/c.sock"
    flags = [*daemon.rule_flags(d / "ruletype.xml", d / "rules.csv"), "-e", ep, "-c", ctl,
             "--matcher", "emulated", "--emulate-profile", str(profile),
             "--emulate-queries", str(d / "queries.csv"), "--kernels", str(k), "--workers", "1",
             "--batch-max-queries", str(series.runs[0][0]), "--batch-timeout-us", "0"]  # fmt: skip
    proc = daemon.start(*flags, timeout_s=120)
    runs, said = [], ""
    try:
        fr = frames.get(ep)
        bench.run(ep, fr, bench.Load("open", series.runs[0][1], duration_s=0.5, drain_s=1.0))  # warm-up
        for batch, rate in series.runs:
            answer = control_request(ctl, f"set batch_max_queries {batch}", 10)
            if answer.get("ok") is False:
                raise RuntimeError(f"set batch_max_queries {batch}: {answer}")
            clocks = (busy_cores_s(), process_cpu_s(proc.pid), own_cpu_s(), time.monotonic())
            s0, dev0 = control_request(ctl, "stats", 10), thread_cpu_ns(proc.pid, "emulated-device")
            r = bench.run(ep, fr, bench.Load("open", rate, duration_s=a.duration, drain_s=1.0))
            s1, dev1 = control_request(ctl, "stats", 10), thread_cpu_ns(proc.pid, "emulated-device")
            now = (busy_cores_s(), process_cpu_s(proc.pid), own_cpu_s(), time.monotonic())
            wall = now[3] - clocks[3]
            others = max(0.0, (now[0] - clocks[0]) - (now[1] - clocks[1]) - (now[2] - clocks[2])) / wall
            runs.append(run_row(series, k, batch, rate, r, s0, s1, dev1 - dev0, others))
            p50 = r["latency_us"]["p50"]  # None when no request was answered
            said_run = f"{r['requests_per_s']:,.0f}/s p50 " + ("none" if p50 is None else f"{p50:,.0f} µs")
            said_run += f", other processes {others:.2f} cores"
            print(f"  measured {series.name} {k}k batch {batch} {rate:g}/s: {said_run}", file=sys.stderr)
    finally:
        try:
            said = daemon.stop(proc, timeout_s=60)
        except Exception:  # the daemon must not outlive the script
            proc.kill()
            proc.wait(10)
    wake = re.search(r"thread wake-up (\d+) µs", said)
    wake_s = int(wake.group(1)) * 1e-6 if wake else 0.0
    return {"runs": [r | {"wake_s": wake_s, "frame_bytes": statistics.fmean(map(len, fr))} for r in runs]}


def run_row(
    series: Series, k: int, batch: int, rate: float, r: dict[str, Any],
    s0: dict[str, Any], s1: dict[str, Any], dev_ns: int, others: float,
) -> dict[str, Any]:  # fmt: skip
    """A run's figures and the host's CPU per request over it, by part (two stats' differences)."""
    c0, c1 = s0["cpu"], s1["cpu"]
    served = max(1.0, (c1["queries"] - c0["queries"]) / REQUEST_SIZE)
    parts = {p: (c1["cpu_ns"][p] - c0["cpu_ns"].get(p, 0)) / served * 1e-9 for p in c1["cpu_ns"]}
    gen = r["generator"]["process_cpu_s"] / max(1, r["answered"])
    e0, e1 = s0.get("emulated") or {}, s1.get("emulated") or {}
    batches = e1.get("batches", 0) - e0.get("batches", 0)
    return {
        "series": series.name, "k": k, "batch_max_queries": batch, "rate": rate,
        "requests_per_s": r["requests_per_s"], "queries_per_s": r["queries_per_s"],
        "p50_us": r["latency_us"]["p50"], "p99_us": r["latency_us"]["p99"],
        "busy": r["status"].get("Busy", 0), "unanswered": r["unanswered"], "unsent": r["unsent"],
        "queries_per_batch": (e1.get("queries", 0) - e0.get("queries", 0)) / batches if batches else None,
        "late_batches": e1.get("late_batches", 0) - e0.get("late_batches", 0),
        "other_processes_cores": others,
        "cpu_s_per_request": parts | {"generator": gen, "device_thread": dev_ns * 1e-9 / served},
    }  # fmt: skip


def costs_of(row: dict[str, Any], device: sim.Costs, channel: tuple[float, float | None]) -> sim.Costs:
    """The model's costs for a run: the device's profile, the host's CPU as measured (see the top)."""
    c = row["cpu_s_per_request"]
    return replace(
        device,
        channel_latency_s=channel[0], channel_bps=channel[1],
        request_bytes_per_query=row["frame_bytes"] / REQUEST_SIZE,
        broker_s=c["broker"] / 2,  # a pass in, a pass out
        reply_request_s=c["executor"],  # inline: 0, the broker's CPU has it all
        background_request_s=c.get("zmq_io", 0.0) + c["generator"] + c["device_thread"],
        kernel_wakeup_s=row["wake_s"],
    )  # fmt: skip


def predict(
    a: argparse.Namespace, row: dict[str, Any], costs: sim.Costs, cpus: int, devices: int = 1
) -> dict[str, Any]:
    """The model's figures for a run; `devices` = k is the model before issue 25 (a device each)."""
    pipe = sim.Pipeline(
        1, 1, row["k"], 1, row["batch_max_queries"], 0.0, 64, cpus, encoded=True, devices=devices
    )
    load = sim.Load((REQUEST_SIZE,), "open", row["rate"], a.duration, 0.2, 1, 200_000, a.arrivals)
    r = sim.simulate(pipe, costs, load)
    pct = {f"p{q}_us": r.percentile(q) * 1e6 if r.enough(q) else None for q in (50, 99)}
    return {"requests_per_s": r.throughput_rps, **pct, "busy": r.busy,
            "queries_per_batch": r.queries_per_batch, "utilisation": r.utilisation}  # fmt: skip


def err(pred: float | None, meas: float) -> float | None:
    return (pred - meas) / meas if pred is not None and meas else None


def main() -> None:
    a = args()
    t0 = time.monotonic()
    cpus = len(os.sched_getaffinity(0))
    ks = [int(x) for x in a.ks.split(",")]
    chosen = [s for s in SERIES if s.name in a.series.split(",")]
    channel = probe_channel(a.probe)
    tmp = Path(tempfile.mkdtemp(prefix="pve-profiles-"))
    frames, devices = Frames(a.demo), {}
    runs: list[dict[str, Any]] = []
    if a.predict_from:
        runs = [r["measured"] for r in json.loads(a.predict_from.read_text())["rows"]]
    for series in chosen:
        profile = profile_file(series, tmp)
        devices[series.name] = sim.Costs(**sim.load_preset(str(profile))[1])
        for k in ks if not a.predict_from else ():
            runs += measure(a, series, k, profile, frames)["runs"]
    rows = []
    for run in runs:  # the daemons are stopped: nothing competes now
        costs = costs_of(run, devices[run["series"]], channel[:2])
        p = predict(a, run, costs, cpus)
        errors = {x: err(p[x], run[x]) for x in ("requests_per_s", "p50_us", "p99_us")}
        own = predict(a, run, costs, cpus, max(1, run["k"]))  # each executor its own device
        errors |= {"requests_per_s_device_each": err(own["requests_per_s"], run["requests_per_s"])}
        rows.append({"measured": run, "predicted": p, "predicted_device_each": own, "error": errors})
    print(table_of(rows))
    print(summary(rows))
    if a.out:
        out = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "what": "offload plan simulate's model of one device shared by k executors against the emulated "
            "device (benches/plan_vs_emulated.py, docs/plan.md)",
            "series": [asdict(s) for s in chosen], "probe": channel[2], "cpus": cpus,
            "request_size": REQUEST_SIZE, "duration_s": a.duration, "rows": rows,
            "wall_s": time.monotonic() - t0,
        }  # fmt: skip
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1) + "\n")


def pc(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0%}"


def table_of(rows: list[dict[str, Any]]) -> str:
    head = (f"{'series':<6} {'k':>6} {'batch':>5} {'rate/s':>6} | "
            f"{'meas. /s':>8} {'p50 µs':>7} {'p99 µs':>7} {'q/batch':>7} {'others':>6} | "
            f"{'pred. /s':>8} {'p50 µs':>7} {'p99 µs':>7} {'q/batch':>7} | "
            f"{'err /s':>6} {'p50':>5} {'p99':>5} | {'k dev.':>6}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        m, p, e = r["measured"], r["predicted"], r["error"]
        k = "inline" if m["k"] == 0 else f"{m['k']}k"
        qb = f"{m['queries_per_batch']:,.0f}" if m["queries_per_batch"] else "n/a"
        lines.append(
            f"{m['series']:<6} {k:>6} {m['batch_max_queries']:>5} {m['rate']:>6,.0f} | "
            f"{m['requests_per_s']:>8,.0f} "
            f"{m['p50_us']:>7,.0f} {m['p99_us']:>7,.0f} {qb:>7} {m['other_processes_cores']:>6.2f} | "
            f"{p['requests_per_s']:>8,.0f} {p['p50_us'] or 0:>7,.0f} {p['p99_us'] or 0:>7,.0f} "
            f"{p['queries_per_batch']:>7,.0f} | "
            f"{pc(e['requests_per_s']):>6} {pc(e['p50_us']):>5} {pc(e['p99_us']):>5} | "
            f"{pc(e['requests_per_s_device_each']):>6}"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """The median absolute error per series and figure."""
    out = []
    for name in dict.fromkeys(r["measured"]["series"] for r in rows):
        errs = {}
        for x in ("requests_per_s", "p50_us", "p99_us"):
            e = [
                abs(r["error"][x])
                for r in rows
                if r["measured"]["series"] == name and r["error"][x] is not None
            ]
            errs[x] = statistics.median(e) if e else None
        out.append(f"{name}: median absolute error: throughput {pc(errs['requests_per_s'])}, "
                   f"p50 {pc(errs['p50_us'])}, p99 {pc(errs['p99_us'])}")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    main()
