"""A whole MBWU measurement: the `Plan` (workloads, sizes, sweep, detectors, an optional node
budget as the embedded side) and `measure`, which preconditions, sweeps every workload to its
plateau on the host and, with a budget, in a process held to it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload.host.machine import machine
from offload.metrics.mbwu.detect import sweep
from offload.metrics.mbwu.kv import KV_WORKLOADS, KvLayout, precondition, run_kv_step
from offload.metrics.mbwu.scan import make_scan_data, run_scan_step

WORKLOADS = (*KV_WORKLOADS, "arrow-scan")
UNITS = {"ycsb-a": "ops/s", "ycsb-c": "ops/s", "arrow-scan": "rows/s"}


@dataclass(frozen=True)
class Plan:
    """What :func:`measure` runs: workloads, where (a directory on the disk under test), sizes,
    the sweep and its detectors, and an optional node budget to measure as the embedded side."""

    workloads: tuple[str, ...] = WORKLOADS
    work_dir: Path = Path("/var/tmp/offload-mbwu")
    keys: int = 500_000
    threads: tuple[int, ...] = (1, 2, 4, 8)
    seconds: float = 4.0
    warmup_s: float = 2.0
    bucket_s: float = 0.5
    rate: float | None = None
    overwrite: float = 0.5
    precondition_rate: float | None = None
    scan_rows: int = 4_000_000
    threshold: float = 0.05
    bound: float = 0.15
    min_window: int = 4
    embedded: str | None = None

    def check(self) -> None:
        bad = [w for w in self.workloads if w not in WORKLOADS]
        if bad or not self.workloads:
            raise ValueError(f"unknown workload {', '.join(bad) or '(none)'}; one of {', '.join(WORKLOADS)}")
        ts = list(self.threads)
        if not ts or ts[0] < 1 or ts != sorted(set(ts)):
            raise ValueError(f"thread counts must be rising and >= 1, got {ts}")
        if self.keys < max(self.threads, default=1):
            raise ValueError(
                f"{self.keys} keys are fewer than the {max(self.threads)} shards the sweep needs"
            )
        if self.warmup_s < 0:
            raise ValueError(f"the warm-up must be >= 0 s, got {self.warmup_s}")
        if self.seconds <= 0 or not 0 < self.bucket_s <= self.seconds:
            raise ValueError(f"need 0 < bucket ({self.bucket_s} s) <= step ({self.seconds} s)")
        for name, v in (("rate", self.rate), ("precondition rate", self.precondition_rate)):
            if v is not None and v <= 0:
                raise ValueError(f"the {name} must be > 0 ops/s, got {v}")
        if _tmpfs(self.work_dir):
            raise ValueError(
                f"{self.work_dir} is on a memory file system; the MBWU is a disk's: choose a disk"
            )


def _tmpfs(path: Path) -> bool:
    """Whether ``path`` (or its nearest existing parent) is on tmpfs/ramfs, by /proc/mounts."""
    p = path.resolve()
    while not p.exists():
        p = p.parent
    best, fstype = "", ""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    for line in mounts:
        parts = line.split()
        if (
            len(parts) > 2
            and (str(p) + "/").startswith(parts[1].rstrip("/") + "/")
            and len(parts[1]) >= len(best)
        ):
            best, fstype = parts[1], parts[2]
    return fstype in ("tmpfs", "ramfs")


def _workload_sweep(plan: Plan, workload: str, progress: Callable[[str], None] | None) -> dict[str, Any]:
    if workload in KV_WORKLOADS:
        layout = KvLayout(plan.work_dir / "kv", plan.keys, max(plan.threads))

        def step(n: int) -> list[float]:
            return run_kv_step(layout, workload, n, plan.seconds, plan.bucket_s, plan.rate, plan.warmup_s)
    else:

        def step(n: int) -> list[float]:
            return run_scan_step(plan.work_dir / "scan", n, plan.seconds)

    return sweep(step, plan.threads, plan.threshold, plan.bound, plan.min_window, progress)


def _embedded_sweep(plan: Plan, workload: str) -> dict[str, Any]:
    """The embedded side: the same sweep in a process held to the node budget (its worker
    processes inherit the cgroup)."""
    from offload.host import budgets as B
    from offload.metrics.budgeted import run_in_budget

    assert plan.embedded is not None
    timeout = len(plan.threads) * (plan.warmup_s + plan.seconds + 90) + 60
    budget, r = run_in_budget(
        B.profile(plan.embedded), "mbwu", _workload_sweep, (plan, workload, None), timeout
    )
    return {"budget": budget, **r}


def measure(plan: Plan, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The procedure for every workload of ``plan``: precondition, sweep to the plateau, MBWU;
    with ``plan.embedded``, the same sweep in a process held to that node budget, and its
    throughput in MBWUs (the seed's 0.37-0.5 for its Arm board)."""
    plan.check()
    say = progress or (lambda _s: None)
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    here = machine(plan.work_dir) | {"load_average_at_start": os.getloadavg()}  # the disk under work_dir too
    report: dict[str, Any] = {"machine": here, "plan": _plan_json(plan), "workloads": {}}
    try:
        if any(w in KV_WORKLOADS for w in plan.workloads):
            say("precondition: load and overwrite the key space")
            layout = KvLayout(plan.work_dir / "kv", plan.keys, max(plan.threads))
            report["precondition"] = precondition(layout, plan.overwrite, plan.precondition_rate)
        if "arrow-scan" in plan.workloads:
            say("write the Parquet data set")
            report["scan_data"] = make_scan_data(plan.work_dir / "scan", plan.scan_rows)
        for w in plan.workloads:
            r: dict[str, Any] = {
                "unit": UNITS[w],
                "host": _workload_sweep(plan, w, lambda s, w=w: say(f"{w}: {s}")),
            }
            r["mbwu"] = r["host"]["mbwu"]
            if plan.embedded:
                say(f"{w}: {plan.embedded} node")
                e = _embedded_sweep(plan, w)
                r["embedded"] = e
                r["embedded_mbwus"] = e["mbwu"] / r["mbwu"] if r["mbwu"] > 0 else None
            report["workloads"][w] = r
        report["machine"]["load_average_at_end"] = os.getloadavg()  # others' work shares the CPUs
    finally:
        shutil.rmtree(plan.work_dir / "kv", ignore_errors=True)
        shutil.rmtree(plan.work_dir / "scan", ignore_errors=True)
    return report


def _plan_json(plan: Plan) -> dict[str, Any]:
    d = {k: getattr(plan, k) for k in plan.__dataclass_fields__}
    d["work_dir"], d["workloads"], d["threads"] = str(plan.work_dir), list(plan.workloads), list(plan.threads)
    return d
