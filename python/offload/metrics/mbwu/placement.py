"""Where the key-value store runs, and what its data access costs (seed 003, slides 45-46 and 50).

The seed ran YCSB A on RocksDB and found that one more thread raised the device's throughput by
20% but not RocksDB's, a "6x data access amplification": the store moves six bytes to and from
the device for each byte the application asks for. Offloading the store to an embedded device
returns that traffic and its CPU to the host.

Here YCSB A (:mod:`.kv`) runs with its workers, and so RocksDB with its flushes and compactions,
in two placements:

* ``host``: this machine with no quota;
* ``embedded``: a process held to a node budget (``bluefield2``: a quarter of a core, a cgroup
  quota, :mod:`offload.host.budgets`), whose workers inherit the budget.

Per placement and worker count it records the store's throughput (the step's steady window, as
the MBWU procedure reads it), the device's throughput (the bytes the worker processes read and
wrote at the storage layer, /proc/<pid>/io), the data access amplification (those bytes over the
bytes of keys and values the operations moved) and the CPU seconds per operation. The host's best
throughput is this run's MBWU; the embedded placement's is given in MBWUs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from offload.metrics.mbwu.detect import summarize
from offload.metrics.mbwu.kv import KvLayout, precondition, run_kv_step

PLACEMENTS = ("host", "embedded")
SEED_AMPLIFICATION = 6.0
SEED_DEVICE_GAIN = 0.20  # the device's throughput with one more thread


def amplification(d: dict[str, Any]) -> dict[str, Any]:
    """A step's data access from its ``run_kv_step`` detail: device bytes per user byte, in all
    and split into reads and writes, device MB/s, and CPU µs per operation."""
    user, dev = d["user_bytes"], d["read_bytes"] + d["write_bytes"]
    ops = d["reads"] + d["updates"]
    return {
        "ops": ops,
        "user_mb": user / 1e6,
        "device_read_mb": d["read_bytes"] / 1e6,
        "device_write_mb": d["write_bytes"] / 1e6,
        "amplification": dev / user if user else None,
        "read_amplification": d["read_bytes"] / user if user else None,
        "write_amplification": d["write_bytes"] / user if user else None,
        "device_mb_s": dev / 1e6 / d["seconds"],
        "cpu_us_per_op": d["cpu_s"] / ops * 1e6 if ops else None,
    }


def step(
    layout: KvLayout, workers: int, seconds: float, warmup_s: float, bucket_s: float = 0.5
) -> dict[str, Any]:
    """One YCSB A step of ``workers`` processes: its throughput and its data access."""
    detail: dict[str, Any] = {}
    samples = run_kv_step(layout, "ycsb-a", workers, seconds, bucket_s, None, warmup_s, detail)
    return summarize(workers, samples, 0.15, 3) | amplification(detail)


def _sweep(layout: KvLayout, workers: Sequence[int], seconds: float, warmup_s: float) -> list[dict[str, Any]]:
    return [step(layout, n, seconds, warmup_s) for n in workers]


def _embedded(
    profile: str, layout: KvLayout, workers: Sequence[int], seconds: float, warmup_s: float
) -> dict[str, Any]:
    """The embedded placement: the sweep in a process held to the budget, its workers inherit it."""
    from offload.host import budgets as B
    from offload.metrics.budgeted import run_in_budget

    timeout = len(workers) * (warmup_s + seconds + 90) + 60
    args = (layout, list(workers), seconds, warmup_s)
    budget, steps = run_in_budget(B.profile(profile), "placement", _sweep, args, timeout)
    return {"budget": budget, "steps": steps}


def compare(
    work_dir: Path,
    keys: int = 200_000,
    workers: Sequence[int] = (1, 2),
    seconds: float = 4.0,
    warmup_s: float = 1.0,
    embedded: str = "bluefield2",
    memtable: int = 4 << 20,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Preconditions a key space under ``work_dir`` (removed afterwards), then runs YCSB A at each
    worker count on the host and in a process held to ``embedded``; the seed's figures beside.
    ``memtable`` scales the LSM tree down (:class:`KvLayout`) so a short window sees compactions."""
    ws = list(workers)
    if not ws or ws[0] < 1 or ws != sorted(set(ws)):
        raise ValueError(f"worker counts must be rising and >= 1, got {ws}")
    if seconds <= 0 or warmup_s < 0:
        raise ValueError(f"need seconds > 0 and warm-up >= 0, got {seconds} and {warmup_s}")
    say = progress or (lambda _s: None)
    layout = KvLayout(work_dir / "placement", keys, max(ws), memtable=memtable)
    try:
        say(f"precondition: {keys:,} keys of 1 KiB, half overwritten")
        pre = precondition(layout)
        say("host placement")
        host = _sweep(layout, ws, seconds, warmup_s)
        say(f"embedded placement ({embedded})")
        emb = _embedded(embedded, layout, ws, seconds, warmup_s)
    finally:
        shutil.rmtree(layout.root, ignore_errors=True)
    mbwu = max(s["value"] for s in host)
    for s in emb["steps"]:
        s["mbwus"] = s["value"] / mbwu if mbwu else None
    return {
        "workload": "ycsb-a",
        "precondition": pre,
        "seconds": seconds,
        "warmup_s": warmup_s,
        "memtable_bytes": memtable,
        "placements": {"host": {"budget": None, "steps": host}, "embedded": {"profile": embedded, **emb}},
        "mbwu_host": mbwu,
        "gain_with_one_more_worker": _gains(host),
        "seed": {
            "amplification": SEED_AMPLIFICATION,
            "device_gain_one_more_thread": SEED_DEVICE_GAIN,
            "store_gain_one_more_thread": "no significant improvement",
        },
    }


def _gains(steps: list[dict[str, Any]]) -> dict[str, float] | None:
    """From the first worker count to the second: the store's and the device's relative gain."""
    if len(steps) < 2:
        return None
    a, b = steps[0], steps[1]
    return {"store": b["value"] / a["value"] - 1, "device": b["device_mb_s"] / a["device_mb_s"] - 1}


def plot(r: dict[str, Any], path: Path) -> None:
    """Per placement and worker count: the store's ops/s, the device's MB/s, and the data access
    amplification split into reads and writes, the seed's 6x marked."""
    from offload.files import save_figure
    from offload.host.plots import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    labels, bars = [], []
    for name, p in r["placements"].items():
        for s in p["steps"]:
            labels.append(f"{'host' if name == 'host' else 'node'}\n{s['threads']}w")
            bars.append(s)
    xs = range(len(bars))
    colors = ["C0" if lab.startswith("host") else "C3" for lab in labels]
    axes[0].bar(xs, [s["value"] for s in bars], color=colors)
    axes[0].set_ylabel("YCSB A ops/s (steady window)")
    axes[1].bar(xs, [s["device_mb_s"] for s in bars], color=colors)
    axes[1].set_ylabel("device MB/s (read + written)")
    reads = [s["read_amplification"] or 0 for s in bars]
    axes[2].bar(xs, reads, color="C2", label="reads")
    axes[2].bar(xs, [s["write_amplification"] or 0 for s in bars], bottom=reads, color="C1", label="writes")
    axes[2].axhline(r["seed"]["amplification"], color="black", ls="--", lw=0.8, label="seed: 6x")
    axes[2].set_ylabel("device bytes ÷ bytes of keys and values")
    axes[2].legend(fontsize=8)
    for a in axes:
        a.set_xticks(list(xs), labels, fontsize=8)
        a.grid(True, axis="y", alpha=0.3)
    emb = r["placements"]["embedded"]["profile"]
    fig.suptitle(f"RocksDB under YCSB A on the host and on a {emb} node (blue: host, red: node), this disk")
    fig.tight_layout()
    save_figure(fig, path)
